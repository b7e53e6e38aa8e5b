"""`reconbench bench` starts without the table printer (tabulate, with wcwidth): only the listing and the slice plan
print tables, and they import it where they print."""

from __future__ import annotations

import subprocess
import sys


def test_the_bench_command_loads_without_tabulate():
    probe = ("import sys; from reconbench.cli import load_commands; g = load_commands('bench'); "
             "print('bench' in g.commands, 'tabulate' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True False"

"""The command an audit records (``command`` in audit.json, the report's "Reproduce") runs again as written.

A ``module:factory`` architecture imports only with its folder on ``PYTHONPATH``; a fresh shell started from the same
folder without that variable must still find it when it runs the recorded line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers.audit_kit import digits_split, small_mlp
from _helpers.cli import run_cli

#: the owner's module: a plain PyTorch factory that, when the marker variable is set, says it was imported and stops
#: the process there (the re-run only has to show that the import works, not audit again)
OWNER_MODULE = textwrap.dedent('''
    import math
    import os

    from torch import nn

    if os.environ.get("OWNER_NET_STOP_AT_IMPORT"):
        print("owner module imported")
        raise SystemExit(0)


    def build(input_shape, out_dim, hidden=64):
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                             nn.Linear(hidden, out_dim))
''')


@pytest.mark.parametrize("layout", ["module", "package"])
def test_the_recorded_command_of_a_factory_audit_imports_the_factory_again(layout, tmp_path, monkeypatch, capsys):
    name = f"owner_net_{layout}_{os.getpid()}"   # unique: a module of this name must not be in sys.modules already
    if layout == "module":
        (tmp_path / f"{name}.py").write_text(OWNER_MODULE)
        family = f"{name}:build"
    else:   # a package in a subfolder of the working folder: its folder, not the working one, goes on the path
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "__init__.py").write_text("")
        (tmp_path / "src" / name / "nets.py").write_text(OWNER_MODULE)
        family = f"{name}.nets:build"
    xtr, ytr, xho, yho = digits_split(5)
    torch.manual_seed(0)
    torch.save(small_mlp((1, 8, 8), 1).state_dict(), tmp_path / "net.pt")
    np.savez(tmp_path / "train.npz", images=xtr, labels=ytr)
    np.savez(tmp_path / "held.npz", images=xho, labels=yho)
    # the user's first run: PYTHONPATH names the module's folder, the paths are typed relative to the working folder
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path if layout == "module" else tmp_path / "src"))
    for module in [m for m in sys.modules if m.startswith(name)]:
        monkeypatch.delitem(sys.modules, module)
    code, _, err = run_cli(["audit", "net.pt", "--family", family, "--train", "train.npz", "--held-out", "held.npz",
                            "--task", "binary", "--attack", "weight_rows", "--budget", "1", "--search-runs", "1",
                            "--out", "out"], capsys)
    for module in [m for m in sys.modules if m.startswith(name)]:
        monkeypatch.delitem(sys.modules, module)
    assert code == 0, err
    command = json.loads(Path("out/audit.json").read_text())["command"]
    assert str(tmp_path) not in command   # the folder is written relative to the working folder
    # the re-run: a shell in the same folder, without the PYTHONPATH of the first run, reconbench on PATH
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OWNER_NET_STOP_AT_IMPORT"] = "1"
    done = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "owner module imported" in done.stdout, (command, done.stdout, done.stderr)


def test_an_audit_of_a_builtin_family_records_the_command_as_typed(tmp_path):
    from reconbench.auditing.run import rerunnable

    command = "reconbench audit w.pt --family mlp --out o"
    assert rerunnable(command, "mlp") == command

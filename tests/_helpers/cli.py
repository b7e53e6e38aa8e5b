"""Run the ``reconbench`` command line in-process and return (exit code, stdout, stderr)."""

from __future__ import annotations

from typing import Any

import pytest

from reconbench.cli import main


def run_cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1 if code else 0), out.out, out.err

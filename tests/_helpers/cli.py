"""Run the ``reconbench`` command line in-process and return (exit code, stdout, stderr)."""

from __future__ import annotations

import contextlib
import io
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


def run_cli_redirected(args: list[str]) -> tuple[int, str, str]:
    """``reconbench ARGS`` in-process without ``capsys`` (fixtures of any scope): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as stop:
            code = stop.code
    return (code if isinstance(code, int) else 1 if code else 0), out.getvalue(), err.getvalue()

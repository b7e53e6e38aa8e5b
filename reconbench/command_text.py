"""A command line as it may be committed: no absolute path of the machine that ran it.

Records keep the command that produced them, and results are committed and shared, so a path such as a device
machine's output folder or a temporary folder would name one machine. :func:`portable_command` writes each such path
relative to a root it can be found from again: ``$OUT`` (a device call's output folder, when the ``OUT`` variable is
set), the working directory (a relative path), ``$TMPDIR`` (the temporary folder) and ``$HOME``; a shell with the
same variables expands the record back into the command that ran.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath


def _roots(cwd: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(absolute folder, what to write instead), the most specific first."""
    roots: list[tuple[str, str]] = []
    if env.get("OUT", "").startswith("/"):
        roots.append((env["OUT"], "$OUT"))
    roots.append((cwd, "."))
    roots.append((env.get("TMPDIR") or tempfile.gettempdir(), "$TMPDIR"))
    if env.get("HOME", "").startswith("/") and env["HOME"] != "/":
        roots.append((env["HOME"], "$HOME"))
    # a longer folder first: $OUT inside the home folder is still $OUT
    return sorted(((str(PurePosixPath(r)), s) for r, s in roots), key=lambda rs: -len(rs[0]))


def portable_path(text: str, roots: Sequence[tuple[str, str]]) -> str:
    """``text`` with a leading absolute path under one of ``roots`` written from that root; else unchanged."""
    if not text.startswith("/"):
        return text
    for root, short in roots:
        if text == root:
            return short
        if text.startswith(root.rstrip("/") + "/"):
            rest = text[len(root.rstrip("/")) + 1:]
            return rest if short == "." else f"{short}/{rest}"
    return text


def _quoted(text: str) -> str:
    """Shell-quote ``text``, leaving a leading placeholder (``$OUT``, ``$TMPDIR``, ``$HOME``) bare to expand."""
    for short in ("$OUT", "$TMPDIR", "$HOME"):
        if text == short or text.startswith(short + "/"):
            tail = text[len(short):]
            return short + (shlex.quote(tail) if tail else "")
    return shlex.quote(text)


def portable_arg(arg: str, roots: Sequence[tuple[str, str]]) -> str:
    """One argument, shell-quoted: a path, or an ``--option=path``, written from its root."""
    if arg.startswith("-") and "=" in arg:
        option, _, value = arg.partition("=")
        return shlex.quote(option + "=") + _quoted(portable_path(value, roots))
    return _quoted(portable_path(arg, roots))


def portable_command(args: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The shell-quoted command ``args`` with every absolute path under the output folder, the working directory,
    the temporary folder or the home folder written from it (``$OUT/pack``, ``runs/x``, ``$TMPDIR/tmp.ab``,
    ``$HOME/data``)."""
    roots = _roots(cwd if cwd is not None else os.getcwd(), os.environ if env is None else env)
    return " ".join(portable_arg(arg, roots) for arg in args)


#: an absolute path of a machine results come from (a home folder, a work tree, a device's root): what a committed
#: file must not hold (tests/unit/codebase/test_repository_hygiene.py checks the tracked tree with its own pattern)
_ROOTS = ["root/", r"home/[\w.-]+/", r"Users/[\w.-]+/", "work/"]   # without the leading slash: this file holds none
MACHINE_PATH = re.compile(r"""(?:^|(?<=[\s"'(=,\[`]))(""" + "|".join("/" + r for r in _ROOTS)
                          + r"""|[A-Za-z]:\\Users\\)""")


def machine_path_lines(text: str) -> list[int]:
    """The 1-based numbers of the lines of ``text`` that hold such a path."""
    return [n for n, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]

"""The ``reconbench`` command line. Each command lives in its own module of this package.

The command modules (and torch with them) are imported inside :func:`main`, so that Ctrl-C during start-up ends with
one line like any other interruption."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import re
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import NoReturn, TextIO

import click

from reconbench.cli import common
from reconbench.errors import ReconbenchError

#: exit status of a user error (bad option, file, data) and of an internal error (a bug)
EXIT_USER, EXIT_BUG, EXIT_INTERRUPTED = 2, 1, 130


def one_line(text: str) -> str:
    """Messages are printed on one line, whatever the exception put in them."""
    return " ".join(str(text).split())


def write_trace(exc: BaseException) -> str | None:
    """Write the full traceback to a file in the temporary folder; its path, or None where that fails."""
    try:
        fd, path = tempfile.mkstemp(prefix=f"reconbench-trace-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(common.command_line() + "\n\n")
            fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return path
    except OSError:
        return None


def out_of_memory(exc: BaseException) -> bool:
    """An allocation that failed: Python's MemoryError, torch's CPU allocator or CUDA out of memory."""
    text = str(exc)
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "CUDA out of memory" in text)


def allocation(exc: BaseException) -> str:
    """What the failed allocation asked for, e.g. 'tried to allocate 2.5 PiB', else the exception's first words."""
    from reconbench.preflight import format_bytes

    found = re.search(r"tried to allocate (\d+) bytes", str(exc))
    if found:
        return f"tried to allocate {format_bytes(int(found.group(1)))}"
    return one_line(str(exc))[:200] or type(exc).__name__


def interrupt_hint() -> str:
    """What to type to continue after Ctrl-C: `bench` needs --resume, `run` resumes its folder by itself."""
    args = common.ARGV
    if args[:1] == ["bench"] and "--resume" not in args:
        return f"re-run with --resume to continue: {common.command_line()} --resume"
    return f"re-run the same command to resume: {common.command_line()}"


#: the module of each command (each registers its commands on import)
COMMAND_MODULES = {"audit": "audit_cmd", "bench": "bench_cmd", "cite": "cite_cmd", "doctor": "doctor_cmd",
                   "evaluate": "evaluate_cmd", "export": "export_cmd", "leaderboard": "leaderboard_cmd",
                   "list": "plugins_cmd", "plugins": "plugins_cmd", "run": "run_cmd", "site": "site_cmd",
                   "train": "train_cmd"}


def load_commands(command: str | None = None) -> click.Group:
    """The command group with ``command`` registered, or every command (None, or a name that is not one: the help
    and the error for an unknown command list them all). Importing one command's module only spares e.g. `run` the
    leaderboard site's and the suite runner's imports (pandas among them)."""
    names = sorted(set(COMMAND_MODULES.values())) if command not in COMMAND_MODULES else [COMMAND_MODULES[command]]
    for name in names:
        importlib.import_module(f"reconbench.cli.{name}")
    common.refuse_empty_values(common.main_group)
    return common.main_group


def invoked_command(args: list[str]) -> str | None:
    """The command a command line names (its first word that is not an option), or None."""
    return next((a for a in args if not a.startswith("-")), None)


def one_line_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that prints reconbench's own warnings as one ``warning:`` line (without the file, line
    and source line Python adds); others as ``show`` does. Only in a shell: a caller's warnings stay its own."""
    def shown(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
              line: str | None = None) -> None:
        text = str(message)
        if text.startswith("reconbench: "):
            click.echo(f"warning: {text.removeprefix('reconbench: ')}", err=True)
        else:
            show(message, category, filename, lineno, file, line)
    return shown


def main(argv: list[str] | None = None) -> None:
    """Entry point: errors print one clear line (no traceback) and exit non-zero; ``--debug`` shows the trace."""
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*")
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    common.DEBUG[0] = "--debug" in args[:cut]
    args = [a for i, a in enumerate(args) if not (i < cut and a == "--debug")]
    common.ARGV[:] = args
    if argv is None:   # a command typed in a shell (not a call from Python): the fast BLAS path if asked for
        from reconbench.fast_blas import reexec_with_shim

        reexec_with_shim()
        warnings.showwarning = one_line_warnings(warnings.showwarning)
    if argv is not None:
        _run(args, argv)
        return
    try:
        _run(args, argv)
    except SystemExit as exc:
        _leave(exc.code)
    _leave(0)


def _run(args: list[str], argv: list[str] | None) -> None:
    """The command itself, its errors as one line and an exit status (``sys.exit``)."""
    started = False
    try:
        command = invoked_command(args)
        group = load_commands(command) if command in COMMAND_MODULES else load_commands()
        if argv is None:   # a whole process for one command: what start-up imported (torch among it) lives as long
            # as the process, so the cyclic collector stops walking it on every full collection and at exit (about
            # 0.3 s of CPU of a process); a cycle that is already garbage here is then never freed (start-up leaves
            # a few kB). Not in a caller's process (tests call main with argv), whose objects must stay collectable.
            gc.freeze()
        started = True
        group.main(args=args, prog_name="reconbench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo(f"aborted: finished work is kept; {interrupt_hint()}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = f" (see `{exc.ctx.command_path} -h`)" if exc.ctx is not None else ""
        click.echo(f"error: {one_line(exc.format_message())}{where}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except ReconbenchError as exc:
        if common.DEBUG[0]:
            traceback.print_exc()
        click.echo(f"error: {one_line(str(exc))}", err=True)
        sys.exit(EXIT_USER)
    except KeyboardInterrupt:
        if not started:
            click.echo("interrupted during start-up, before any work", err=True)
        else:
            click.echo(f"interrupted: finished work is kept; {interrupt_hint()}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as exc:  # the environment: a full disk, a folder that became unwritable, a vanished file
        if common.DEBUG[0]:
            traceback.print_exc()
        path = write_trace(exc)
        where = f"; full trace in {path}" if path else ""
        name = f" {exc.filename}" if exc.filename else ""
        click.echo(f"error: cannot access{name} ({exc.strerror or exc}); check the path, its permissions and the free "
                   f"disk space, then re-run the same command to resume{where}", err=True)
        sys.exit(EXIT_USER)
    except Exception as exc:  # last resort: a bug, or an environment problem nothing above foresaw
        if out_of_memory(exc):  # an allocation no estimate foresaw: the sizes asked for, not a bug
            click.echo(f"error: out of memory ({allocation(exc)}); ask for less: smaller --widths, --candidates, "
                       "--search-runs or attack steps (--set steps=...)", err=True)
            sys.exit(EXIT_USER)
        if common.DEBUG[0]:
            traceback.print_exc()
        path = write_trace(exc)
        where = f"; full trace in {path}" if path else ""
        click.echo(f"error: internal error {type(exc).__name__}: {one_line(str(exc))[:300]}{where} (re-run with "
                   "--debug to print it; please report it)", err=True)
        sys.exit(EXIT_BUG)


def _leave(code: str | int | None) -> NoReturn:
    """End a command's own process with ``code`` without Python's teardown: the exit handlers run and the output is
    flushed as at a normal exit, but the interpreter does not free every object one by one, which took about 0.15 s
    of CPU after a run (0.45 s before start-up froze its imports out of the collector). Files are all written and
    closed by then. Where a non-daemon thread is still running, the normal exit waits for it as usual."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:   # sys.exit("message"): printed, status 1, as Python does
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe: nothing more can reach it
            pass
    os._exit(status)

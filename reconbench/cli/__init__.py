"""The ``reconbench`` command line. Each command lives in its own module of this package."""

from __future__ import annotations

import sys
import warnings

import click

# the command modules register themselves on import
from reconbench.cli import bench_cmd, common, evaluate_cmd, leaderboard_cmd, plugins_cmd, run_cmd, train_cmd  # noqa: F401
from reconbench.cli.common import main_group
from reconbench.errors import ReconbenchError


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors print one clear line (no traceback) and exit with status 2."""
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*")
    common.ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    try:
        main_group.main(args=argv, prog_name="reconbench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ReconbenchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted: finished runs are kept; re-run the same command to resume", err=True)
        sys.exit(130)

"""The command group and option helpers shared by the command modules."""

from __future__ import annotations

from typing import Any

import click
import tomllib

from reconbench import __version__
from reconbench.errors import ReconbenchError

#: the arguments of the current invocation (set by ``reconbench.cli.main``), recorded with benchmark results
ARGV: list[str] = []


def command_line() -> str:
    """The command as typed, e.g. ``reconbench bench ci --resume`` (for provenance)."""
    import shlex

    return shlex.join(["reconbench", *ARGV])


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="reconbench")
def main_group() -> None:
    """reconbench: benchmark training-data reconstruction attacks on released network weights.

    \b
    Quick start:
      reconbench run --attack multiclass_kkt     train a small target on `digits` and attack it
      reconbench list attacks                    what is registered
      reconbench plugins                         which plugins are loaded
    """


def parse_value(text: str) -> Any:
    """TOML-typed value (1e-3, true, [1000, 1000], "s"); bare words stay strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_assignments(items: tuple[str, ...], option: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ReconbenchError(f"{option} expects KEY=VALUE, got {item!r} (e.g. {option} lr=0.1)")
        out[key.strip()] = parse_value(value.strip())
    return out


def parse_int_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError as exc:
        raise ReconbenchError(f"expected comma-separated integers like 1000,1000, got {text!r}") from exc


quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress bars or chatter.")
data_root_option = click.option("--data-root", type=click.Path(file_okay=False), default=None,
                                help="Folder with data files (default: $RECONBENCH_DATA, else ~/.cache/reconbench/data).")

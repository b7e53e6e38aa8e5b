"""The command group and option helpers shared by the command modules."""

from __future__ import annotations

from typing import Any

import click
import tomllib

from reconbench import __version__
from reconbench.errors import ReconbenchError

#: the arguments of the current invocation (set by ``reconbench.cli.main``), recorded with benchmark results
ARGV: list[str] = []
#: print full tracebacks (``--debug`` anywhere on the command line)
DEBUG = [False]


def command_line() -> str:
    """The command as typed, e.g. ``reconbench bench ci --resume`` (for provenance)."""
    import shlex

    return shlex.join(["reconbench", *ARGV])


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        DEBUG[0] = True
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="reconbench")
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
              help="On an error, print the full Python traceback (may also follow the command).")
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
        key = key.strip()
        if not sep or not key:
            raise ReconbenchError(f"{option} expects KEY=VALUE, got {item!r} (e.g. {option} lr=0.1)")
        if key in out:
            raise ReconbenchError(f"{option} sets {key} twice ({key}={out[key]!r} and {item.strip()!r}); keep one")
        out[key] = parse_value(value.strip())
    return out


def check_device(device: str, option: str = "--device") -> str:
    """A torch device string that exists here, or a one-line error saying what to pass instead."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ReconbenchError(f"{option} {device!r} is not a torch device; pass cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ReconbenchError(f"{option} {device}: no CUDA device is available here; pass {option} cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ReconbenchError(f"{option} {device}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                                  f"pass {option} cuda:0")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ReconbenchError(f"{option} {device}: no MPS device is available here; pass {option} cpu")
    elif dev.type != "cpu":
        raise ReconbenchError(f"{option} {device}: reconbench runs on cpu, cuda or mps; pass {option} cpu")
    return device


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

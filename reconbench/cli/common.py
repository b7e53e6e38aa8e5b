"""The command group and option helpers shared by the command modules."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import tomllib

from reconbench import __version__
from reconbench.config import INT64, MAX_SEED
from reconbench.errors import ReconbenchError

#: a click command function, as a decorator that adds options takes and returns it
FC = TypeVar("FC", bound=Callable[..., Any])

#: the arguments of the current invocation (set by ``reconbench.cli.main``), recorded with benchmark results
ARGV: list[str] = []
#: print full tracebacks (``--debug`` anywhere on the command line)
DEBUG = [False]


def command_line() -> str:
    """The command as typed, e.g. ``reconbench bench ci --resume`` (for provenance), with no absolute path of this
    machine: a path under the working directory, ``$OUT``, the temporary or the home folder is written from it
    (:func:`reconbench.command_text.portable_command`), since records holding it are committed."""
    from reconbench.command_text import portable_command

    return portable_command(["reconbench", *ARGV])


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
    """TOML-typed value (1e-3, true, [1000, 1000], "s"); bare words stay strings, also as the items of a list
    (``[ssim, corr]`` is ``["ssim", "corr"]``: a shell user need not quote every word)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]") and "[" not in inner[1:-1] and "]" not in inner[1:-1]:
        items = [item.strip() for item in inner[1:-1].split(",")]
        if items[-1] == "":
            items.pop()   # a trailing comma, as TOML allows
        if items and all(items):
            return [parse_value(item) for item in items]
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


def parse_int_list(text: str | None, option: str = "") -> list[int] | None:
    """Comma-separated integers (an empty text: none); an empty item (``32,,32``, ``32,``) is refused, not skipped."""
    if text is None:
        return None
    compact = text.replace(" ", "")
    if not compact:
        return []
    named = f"{option} " if option else ""
    try:
        items = [int(t) for t in compact.split(",")]
    except ValueError as exc:
        empty = " (an empty item between commas)" if "" in compact.split(",") else ""
        raise ReconbenchError(f"{named}expected comma-separated integers like 1000,1000, got {text!r}{empty}") from exc
    return items


class Count(click.ParamType):
    """A whole number in ``[low, high]``; the message says which numbers are accepted (``1e23`` is not one)."""

    name = "integer"

    def __init__(self, low: int, high: int = INT64[1]) -> None:
        self.low, self.high = low, high

    def describe(self) -> str:
        high = f"{self.high:,}" if self.high < 10**15 else f"{self.high:.3g}"
        return f"a whole number from {self.low} to {high}"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip().replace("_", ""), 10)
            except ValueError:
                self.fail(f"{str(value)[:40]!r} is not a whole number; pass {self.describe()}", param, ctx)
        if not self.low <= number <= self.high:
            shown = str(number) if len(str(number)) <= 20 else f"{str(number)[:3]}... ({len(str(number))} digits)"
            self.fail(f"{shown} is out of range; pass {self.describe()}", param, ctx)
        return number


#: the seeds accepted everywhere (the search, the init regimes and the weight initialisation)
SEED = Count(0, MAX_SEED)


class NonEmpty(click.ParamType):
    """Wraps a text or path type and refuses an empty value, which would silently mean the default or the current
    folder."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        self.name = inner.name

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("the value is empty; pass one, or leave the option out for its default", param, ctx)
        try:
            return self.inner.convert(value, param, ctx)
        except click.BadParameter as exc:
            if isinstance(self.inner, click.Path) and not self.inner.file_okay and "is a file" in exc.message:
                # click names the problem only: say what to pass instead
                self.fail(f"{exc.message.rstrip('.')}: pass the path of a folder (the file is left alone)", param,
                          ctx)
            raise

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str | None:
        return self.inner.get_metavar(param, *args, **kwargs)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
        return self.inner.shell_complete(ctx, param, incomplete)


def refuse_empty_values(command: click.Command) -> None:
    """Every text and path option and argument of ``command`` (and its subcommands) refuses an empty value."""
    for param in command.params:
        if isinstance(param.type, (click.types.StringParamType, click.Path)):
            param.type = NonEmpty(param.type)
    for sub in getattr(command, "commands", {}).values():
        refuse_empty_values(sub)


def remove_if_unused(folder: Path) -> None:
    """Remove an output folder this command created, when a failure left nothing in it but its lock file."""
    from reconbench.provenance import LOCK_FILE

    try:
        if folder.is_dir() and all(p.name.startswith(LOCK_FILE) for p in folder.iterdir()):
            shutil.rmtree(folder)
    except OSError:
        pass  # best effort: an empty folder blocks nothing


quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress bars or chatter.")
yes_option = click.option("--yes", is_flag=True,
                          help="Run even when the estimated time is above the ceiling (a day of computation).")
#: estimates above this are printed with the plan (on stderr, so that the outputs scripts read stay as they are)
SHOW_COST_SECONDS = 60.0


def show_cost(total: float, quiet: bool) -> None:
    from reconbench.preflight import cost_line

    if total > SHOW_COST_SECONDS and not quiet:
        click.echo(cost_line(total), err=True)
data_root_option = click.option("--data-root", type=click.Path(file_okay=False), default=None,
                                help="Folder with data files (default: $RECONBENCH_DATA, else ~/.cache/reconbench/data).")


def track_options(f: FC) -> FC:
    """--track, --track-uri and --track-experiment (reconbench.tracking)."""
    f = click.option("--track-experiment", default=None, metavar="NAME",
                     help="With --track: the MLflow experiment (default: 'reconbench' for run, the suite's name for "
                          "bench).")(f)
    f = click.option("--track-uri", default=None, metavar="URI",
                     help="With --track: the tracking store, e.g. sqlite:///mlflow.db or http://host:5000 (default: "
                          "MLflow's own: $MLFLOW_TRACKING_URI, else a local store in this folder: ./mlflow.db with "
                          "artefacts in ./mlruns for MLflow 3, ./mlruns alone before; docs/search.md).")(f)
    return click.option("--track", type=click.Choice(["mlflow"]), default=None,
                        help="Log each finished run (config, seed, metrics and nulls, loss traces, result.json and "
                             "figures) to an experiment tracker; pip install 'reconbench[mlflow]'.")(f)

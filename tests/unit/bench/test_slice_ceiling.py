"""The preflight's cost ceiling (a day of estimated computation, refused without --yes) does not stop a command
that --deadline bounds: it runs what fits and says the ceiling was not applied. Through the command line (click's
CliRunner), on a tiny digits suite whose attack asks for an absurd number of steps."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from reconbench.cli import load_commands
from reconbench.preflight import CostLimitError

TINY = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "tiny.toml"


def huge_suite(tmp_path: Path) -> Path:
    """tiny.toml with 10^13 attack steps a run: years of computation by the preflight's estimate."""
    text = TINY.read_text().replace("config = { steps = 100 }", "config = { steps = 10_000_000_000_000 }")
    assert "10_000_000_000_000" in text
    path = tmp_path / "huge.toml"
    path.write_text(text)
    return path


def bench(tmp_path: Path, *extra: str):
    args = ["bench", str(huge_suite(tmp_path)), "--device", "cpu", "--only", "*--gaussian--*", "--out",
            str(tmp_path / "res"), "--cache", str(tmp_path / "cache"), *extra]
    return CliRunner().invoke(load_commands(), args)


def test_without_a_deadline_the_ceiling_refuses(tmp_path, no_work):
    result = bench(tmp_path)
    assert "a command may take unasked" in str(result.exception) and "or pass --yes" in str(result.exception)


def test_a_deadline_bounds_the_command_so_the_ceiling_is_not_applied(tmp_path, no_work):
    """The cell's own estimate passes the deadline, so nothing starts (exit 1, nothing fitted): the ceiling neither
    fires nor asks for --yes, and the note says why."""
    result = bench(tmp_path, "--deadline", "30")
    assert not isinstance(result.exception, CostLimitError), result.output
    assert "a command may take unasked; --deadline 30 bounds this command" in result.output
    assert "so that ceiling is not applied" in result.output
    assert "nothing ran; no cell fits" in result.output and result.exit_code == 1
    # quiet: the note is left out, and still nothing is refused
    quiet = bench(tmp_path, "--deadline", "30", "-q")
    assert not isinstance(quiet.exception, CostLimitError) and "ceiling" not in quiet.output

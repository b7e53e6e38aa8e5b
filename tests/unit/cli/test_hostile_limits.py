"""Hostile and mistaken input that used to crash, hang or be accepted: sizes beyond the machine, numbers beyond 64
bits, empty option values, suites with values the command line refuses, files that are not what they claim, an
unreachable cluster, failed commands that left their folder claimed, and Ctrl-C during start-up.

Every case must end with a non-zero exit status and one line on stderr naming the problem, before any optimiser
exists (so before training and before any attack step). Inputs are tiny: a case that would hang is refused before
work, so its test is quick.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.cli import run_cli
from _helpers.guards import default_sigint, trained_card

from reconbench import plugins
from reconbench.config import build_config
from reconbench.errors import ReconbenchError
from reconbench.targets.recipe import TrainSpec

REPO = Path(__file__).resolve().parents[3]
TINY = ["--dataset", "digits", "--task", "multiclass", "--num-classes", "3", "--n-per-class", "2", "--widths", "8",
        "--steps", "5"]
RUN = ["run", "--attack", "multiclass_kkt"]
HUGE = "1000000000000"  # 10^12


@pytest.fixture(autouse=True)
def sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECONBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")


def refused(args: list[str], capsys: Any, *expect: str) -> str:
    """Run the command; it must fail with one `error:` line on stderr naming every string of ``expect``."""
    code, out, err = run_cli(args, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0, f"exit 0 for {args}: {out[-300:]}"
    assert "Traceback" not in out + err, err[-2000:]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err[-600:]}"
    assert lines[0].startswith("error:") and "internal error" not in lines[0], lines[0]
    for text in expect:
        assert text.lower() in lines[0].lower(), f"{text!r} not named in: {lines[0]}"
    return lines[0]


# -- the command line ---------------------------------------------------------------------------------------------
CLI_CASES = {  # name: (arguments, what the message must name)
    "widths-1e12": ([*RUN, *TINY, "--widths", HUGE], ("--widths", "memory", "available")),
    "candidates-1e12": ([*RUN, *TINY, "--candidates", HUGE], ("--candidates", "memory", "available")),
    "search-runs-1e12": ([*RUN, *TINY, "--search-runs", HUGE], ("--search-runs", "memory", "available")),
    "seed-1e23": ([*RUN, *TINY, "--seed", "1e23"], ("--seed", "whole number")),
    "seed-10^30": ([*RUN, *TINY, "--seed", "1" + "0" * 30], ("--seed", "out of range")),
    "train-seed-1e23": ([*RUN, *TINY, "--train-seed", "1e23"], ("--train-seed",)),
    "train-seed-2^32": ([*RUN, *TINY, "--train-seed", str(2**32)], ("--train-seed", "out of range")),
    "set-steps-1e99": ([*RUN, *TINY, "--set", "steps=1e99"], ("steps", "64-bit")),
    "set-lr-10^400": ([*RUN, *TINY, "--set", "lr=1" + "0" * 400], ("lr", "float64")),
    "steps-1e20": ([*RUN, *TINY, "--steps", "99999999999999999999"], ("--steps", "out of range")),
    "n-per-class-1e20": ([*RUN, *TINY, "--n-per-class", "99999999999999999999"], ("--n-per-class",)),
    "model-set-widths-1e20": ([*RUN, *TINY, "--model-set", "widths=[99999999999999999999]"], ("widths", "64-bit")),
    "defense-bits-0": (["train", *TINY, "--defense", "int8_quantise", "--defense-set", "bits=0"], ("bits", ">= 2")),
    "defense-noise-1e300": (["train", *TINY, "--defense", "weight_noise", "--defense-set", "relative_std=1e300"],
                            ("relative_std", "<= 1000")),
    "defense-smoothing-1": (["train", *TINY, "--defense", "label_smoothing", "--defense-set", "smoothing=1"],
                            ("smoothing",)),
    "attack-for-another-task": (["run", "--attack", "haim_binary_kkt", *TINY], ("binary", "multiclass")),
    "ray-address-refused": (["bench", "ci", "--executor", "ray", "--address", "127.0.0.1:1"], ("127.0.0.1:1",)),
    "ray-address-not-an-address": (["bench", "ci", "--executor", "ray", "--address", "head:port"], ("head:port",)),
}


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_command_line_refused(name, capsys, no_work):
    args, expect = CLI_CASES[name]
    refused(args, capsys, *expect)


EMPTY_CASES = [  # options whose empty value used to mean "the default" or "the current folder" without a word
    [*RUN, *TINY, "--loss", ""],
    [*RUN, *TINY, "--out", ""],
    [*RUN, *TINY, "--family", ""],
    [*RUN, *TINY, "--dataset", ""],
    [*RUN, *TINY, "--widths", ""],
    [*RUN, *TINY, "--cache", ""],
    [*RUN, *TINY, "--data-root", ""],
    [*RUN, *TINY, "--defense", ""],
    [*RUN, *TINY, "--binary-rule", " "],
    ["run", "--attack", "", *TINY],
    [*RUN, *TINY, "--init", ""],
    [*RUN, *TINY, "--device", ""],
    ["train", *TINY, "--out", ""],
    ["bench", ""],
    ["bench", "ci", "--out", ""],
    ["leaderboard", "ci", "--results", ""],
    ["evaluate", ""],
]


@pytest.mark.parametrize("args", EMPTY_CASES, ids=[" ".join(a[-2:]) for a in EMPTY_CASES])
def test_empty_values_refused(args, capsys, no_work):
    refused(args, capsys, "empty")
    assert not [p for p in Path.cwd().iterdir() if p.name not in ("cache", "data")]  # nothing written


def test_every_text_option_refuses_an_empty_value():
    """The rule holds for every command's text and path options, present and future."""
    import click

    from reconbench.cli import load_commands
    from reconbench.cli.common import NonEmpty

    def params(cmd: click.Command) -> list[click.Parameter]:
        return [*cmd.params, *(p for sub in getattr(cmd, "commands", {}).values() for p in params(sub))]

    loose = [p.name for p in params(load_commands())
             if isinstance(p.type, (click.types.StringParamType, click.Path)) and not isinstance(p.type, NonEmpty)]
    assert not loose


# -- model cards ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def card_dir(tmp_path_factory):
    return trained_card(tmp_path_factory.mktemp("card"), TINY)


def test_card_whose_shapes_imply_terabytes_is_refused_before_it_is_built(card_dir, tmp_path, capsys, no_work):
    """A forger edits the architecture (and recomputes the card's content hash): the network would take ~4e13
    bytes. Refused with the estimate and the limit, not by the allocator."""
    from reconbench.targets.cards import content_sha256

    folder = tmp_path / "big"
    shutil.copytree(card_dir, folder)
    data = json.loads((folder / "card.json").read_text())
    data["model_spec"]["widths"] = [5 * 10**11]
    data["content_sha256"] = content_sha256(data)
    (folder / "card.json").write_text(json.dumps(data))
    refused([*RUN, "--model", str(folder)], capsys, "memory", "available")


# -- suites ---------------------------------------------------------------------------------------------------------
SUITE = """\
[suite]
name = "tiny"
seeds = [0]
search_runs = 1

[protocol]
figures = false

[targets.t]
dataset = "digits"
task = "multiclass"
num_classes = 3
n_per_class = 2
widths = [8]
steps = 5

[attacks.multiclass_kkt]
config = { steps = 2 }

[[grid]]
targets = ["t"]
attacks = ["multiclass_kkt"]
"""

SUITE_EDITS = {  # name: (old, new, what the message must name)
    "negative-seed": ("seeds = [0]", "seeds = [-1]", "seeds"),
    "seed-beyond-2^32": ("seeds = [0]", f"seeds = [{2**32}]", "seeds"),
    "negative-candidates": ("search_runs = 1\n", "search_runs = 1\ncandidates = -3\n", "candidates"),
    "zero-attack-candidates": ("config = { steps = 2 }", "config = { steps = 2 }\ncandidates = 0", "candidates"),
    "negative-target-seed": ("steps = 5", "steps = 5\nseed = -1", "seed"),
    "bad-model-option": ("widths = [8]", "widths = [8]\nmodel = { nosuch = 1 }", "nosuch"),
    "bad-model-value": ("widths = [8]", 'widths = [8]\nmodel = { init_scale = "big" }', "init_scale"),
    "loss-for-another-task": ("steps = 5", 'steps = 5\nloss = "bce"', "bce"),
    "timm-pretrained": ("widths = [8]\n", 'family = "timm_resnet"\nmodel = { pretrained = true }\n', "pretrained"),
    "npz-climbs-out": ('dataset = "digits"', 'dataset = "npz:../secret.npz"', "data folder"),
    "npz-deeper-climb": ('dataset = "digits"', 'dataset = "npz:sub/../../secret.npz"', "data folder"),
    "npz-absolute": ('dataset = "digits"', 'dataset = "npz:/etc/secret.npz"', "data folder"),
    "npz-home": ('dataset = "digits"', 'dataset = "npz:~/secret.npz"', "data folder"),
    "astronomical-steps": ("steps = 5", "steps = 99999999999999999999", "steps"),
    "attack-steps-1e99": ("{ steps = 2 }", "{ steps = 1e99 }", "steps"),
    "widths-1e12": ("widths = [8]", f"widths = [{HUGE}]", "memory"),
    "search-runs-1e12": ("search_runs = 1\n", f"search_runs = {HUGE}\n", "memory"),
    "candidates-1e12": ("search_runs = 1\n", f"search_runs = 1\ncandidates = {HUGE}\n", "memory"),
    "empty-loss": ("steps = 5", 'steps = 5\nloss = ""', "empty"),
    "attack-for-another-task": ('attacks = ["multiclass_kkt"]\n',
                                'attacks = ["multiclass_kkt", "haim_binary_kkt"]\n[attacks.haim_binary_kkt]\n',
                                "haim_binary_kkt"),
    "unknown-dataset": ('dataset = "digits"', 'dataset = "digitz"', "digitz"),
    "too-many-per-class": ("n_per_class = 2", "n_per_class = 100000", "n_per_class"),
}


def _suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("edit", list(SUITE_EDITS))
def test_suite_refused_as_a_whole_before_any_cell(edit, tmp_path, capsys, no_work):
    old, new, expect = SUITE_EDITS[edit]
    assert old in SUITE
    path = _suite(tmp_path, SUITE.replace(old, new, 1))
    refused(["bench", str(path), "--out", str(tmp_path / "o")], capsys, "s.toml", expect)
    assert not (tmp_path / "o").exists()  # nothing written, no cell ran


def test_timm_architecture_that_does_not_exist_refused(tmp_path, capsys, no_work):
    pytest.importorskip("timm")
    path = _suite(tmp_path, SUITE.replace("widths = [8]\n", 'family = "timm"\nmodel = { arch = "no_such_net" }\n'))
    refused(["bench", str(path), "--out", str(tmp_path / "o")], capsys, "s.toml", "no_such_net")


def test_cli_refuses_what_the_suite_refuses(capsys, no_work):
    """The same values through the command line."""
    refused([*RUN, *TINY, "--model-set", "nosuch=1"], capsys, "nosuch")
    refused([*RUN, *TINY, "--family", "timm_resnet", "--model-set", "pretrained=true"], capsys, "pretrained")
    refused([*RUN, *TINY, "--dataset", "digitz"], capsys, "digitz")


def test_binary_file_as_a_suite(tmp_path, capsys, no_work):
    path = tmp_path / "s.toml"
    path.write_bytes(bytes(range(256)))
    for args in (["bench", str(path)], ["leaderboard", str(path)]):
        refused(args, capsys, "s.toml", "not a text file")


def test_bench_exits_non_zero_when_a_cell_failed(tmp_path, capsys):
    """A cell whose attack is not registered fails (it never trains); the others may run; the exit status says so."""
    text = SUITE.replace('attacks = ["multiclass_kkt"]', 'attacks = ["not_registered"]') + "\n[attacks.not_registered]\n"
    code, out, err = run_cli(["bench", str(_suite(tmp_path, text)), "--out", str(tmp_path / "o"), "-q"], capsys)
    assert code == 1, out + err
    assert "1 failed" in out and "failed: t--not_registered--gaussian--s0" in out


# -- data files -----------------------------------------------------------------------------------------------------
def _data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    return folder


def test_npz_label_of_a_trillion_refused_quickly(tmp_path, capsys, no_work):
    np.savez(_data(tmp_path) / "big.npz", images=np.random.default_rng(0).random((20, 8, 8)),
             labels=np.array([0] * 19 + [10**12]))
    refused([*RUN, "--dataset", "npz:big.npz", "--n-per-class", "1", "--widths", "8"], capsys, "big.npz", "renumber")


@pytest.mark.parametrize("content,expect", [(b"hello, I am text\n", "not an .npz"), (None, ".npy")],
                         ids=["text", "npy"])
def test_npz_that_is_not_an_npz(content, expect, tmp_path, capsys, no_work):
    path = _data(tmp_path) / "d.npz"
    if content is None:
        with open(path, "wb") as fh:
            np.save(fh, np.zeros((4, 8, 8)))
    else:
        path.write_bytes(content)
    line = refused(["train", "--dataset", "npz:d.npz"], capsys, "d.npz", expect)
    assert "pickle" not in line


# -- a failed command leaves nothing that blocks the corrected one ---------------------------------------------------
def test_failed_run_leaves_no_claimed_folder(tmp_path, capsys):
    out = tmp_path / "X"
    refused([*RUN, *TINY, "--dataset", "digitz", "--out", str(out)], capsys, "digitz")
    assert not out.exists()
    code, _, err = run_cli([*RUN, *TINY, "--set", "steps=2", "--search-runs", "1", "--protocol-set", "figures=false",
                            "--out", str(out), "-q"], capsys)
    assert code == 0, err


def test_run_failing_before_any_search_run_releases_its_folder(tmp_path, capsys, monkeypatch):
    """A failure after the configuration was recorded (here: inside the attack) takes the record back."""
    from reconbench.cli import run_cmd

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ReconbenchError("the attack failed")

    out = tmp_path / "existing"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = [*RUN, *TINY, "--set", "steps=2", "--search-runs", "1", "--protocol-set", "figures=false", "-q"]
    with monkeypatch.context() as mp:
        mp.setattr(run_cmd, "run_attack", fail)
        refused([*args, "--out", str(out)], capsys, "the attack failed")
        refused([*args, "--out", str(tmp_path / "new")], capsys, "the attack failed")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["notes.txt"]
    assert not (tmp_path / "new").exists()
    code, _, err = run_cli([*args, "--set", "lr=0.01", "--out", str(out)], capsys)  # another configuration
    assert code == 0, err


def test_failed_train_leaves_no_folder(tmp_path, capsys, monkeypatch):
    from reconbench.cli import train_cmd

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ReconbenchError("training failed")

    monkeypatch.setattr(train_cmd, "train_target", fail)
    refused(["train", *TINY, "--out", str(tmp_path / "card")], capsys, "training failed")
    assert not (tmp_path / "card").exists()


@pytest.mark.parametrize("exc", [
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
                 "to allocate 256000000000000 bytes. Error code 12 (Cannot allocate memory)"),
    MemoryError(),
], ids=["torch-allocator", "MemoryError"])
def test_an_allocation_no_estimate_foresaw_is_one_line(exc, tmp_path, capsys, monkeypatch):
    """The last resort behind the estimates: a failed allocation is the sizes asked for, not an internal error."""
    from reconbench.cli import run_cmd

    def allocate(*args: Any, **kwargs: Any) -> None:
        raise exc

    monkeypatch.setattr(run_cmd, "run_attack", allocate)
    line = refused([*RUN, *TINY, "--out", str(tmp_path / "o")], capsys, "out of memory", "--candidates")
    assert isinstance(exc, MemoryError) or "233 TiB" in line  # 256e12 bytes = 232.8 TiB


# -- Ctrl-C during start-up ------------------------------------------------------------------------------------------
def test_ctrl_c_while_the_commands_load_is_one_line(capsys, monkeypatch):
    import reconbench.cli as cli

    def interrupted(*command: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "load_commands", interrupted)
    code, _, err = run_cli(["run", "--attack", "multiclass_kkt"], capsys)
    assert code == 130 and [ln for ln in err.splitlines() if ln.strip()] == [err.strip()] and "start-up" in err


def test_sigint_during_the_torch_import_is_one_line(tmp_path):
    """A real SIGINT, delivered while the command modules import torch (as a Ctrl-C in a terminal would be)."""
    script = textwrap.dedent("""
        import builtins, os, signal, sys
        real_import = builtins.__import__
        def import_(name, *args, **kwargs):
            if name == "torch" and "torch" not in sys.modules:
                os.kill(os.getpid(), signal.SIGINT)
            return real_import(name, *args, **kwargs)
        builtins.__import__ = import_
        from reconbench.cli import main
        main(["list", "attacks"])
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path, preexec_fn=default_sigint)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines == ["interrupted during start-up, before any work"]
    assert signal.SIGINT  # the signal exists on this platform


# -- the estimates and bounds themselves ----------------------------------------------------------------------------
FAMILIES = [name for name in plugins.names("models")]


@pytest.mark.parametrize("family", FAMILIES)
def test_meta_count_equals_the_built_networks_parameters(family):
    """The size estimate is exact for every registered family: the meta-device build against a real one."""
    from reconbench.preflight import model_parameters

    if family.startswith("timm"):
        pytest.importorskip("timm")
    spec = {"widths": [7, 5]} if family in ("mlp", "mlp_bias") else {}
    shape = (3, 32, 32) if family.startswith("timm") or family == "conv" else (1, 8, 8)
    real = plugins.get("models", family).build(shape, 4, spec, generator=torch.Generator().manual_seed(0))
    assert model_parameters(family, shape, 4, spec) == sum(p.numel() for p in real.parameters())


def test_memory_refusal_names_the_estimate_and_the_limit(monkeypatch):
    from reconbench import preflight

    monkeypatch.setattr(preflight, "available_memory", lambda: 3 * 2**30)
    with pytest.raises(preflight.MemoryLimitError) as info:
        preflight.check_fits(5 * 2**40, "a thing", "make it smaller")
    assert "5 TiB" in str(info.value) and "3 GiB available" in str(info.value) and "make it smaller" in str(info.value)
    preflight.check_fits(3 * 2**30, "a thing", "make it smaller")  # exactly the limit fits
    monkeypatch.setattr(preflight, "available_memory", lambda: None)
    preflight.check_fits(10**30, "a thing", "make it smaller")  # no limit known: nothing refused


def test_available_memory_is_at_most_the_total():
    from reconbench.preflight import available_memory

    have = available_memory()
    if have is None:
        pytest.skip("this system does not report its memory")
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 <= have <= total


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**400, 1e99])
def test_integer_options_fit_64_bits(value):
    with pytest.raises(ReconbenchError, match="64-bit"):
        build_config(TrainSpec, {"steps": value}, "recipe.train")
    assert build_config(TrainSpec, {"steps": 2**63 - 1}, "recipe.train").steps == 2**63 - 1


def test_example_low_rank_defense_checks_its_option_when_configured(monkeypatch):
    """The external example declares its range, so a suite or `--defense-set` refuses it before training."""
    import importlib.util

    path = REPO / "examples" / "reconbench-lowrank-defense" / "src" / "reconbench_lowrank_defense.py"
    spec = importlib.util.spec_from_file_location("example_lowrank_limits", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ReconbenchError, match="rank_fraction"):
            build_config(module.LowRankConfig, {"rank_fraction": bad}, "--defense-set")
    assert build_config(module.LowRankConfig, {"rank_fraction": 1.0}, "--defense-set").rank_fraction == 1.0

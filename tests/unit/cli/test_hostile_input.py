"""Hostile input: every command, every option and every plugin option with invalid values, and corrupted cards,
results, suites, leaderboards and data. Each must end with a non-zero exit status and one line on stderr that names
the problem, with no traceback, and before any training or attack step (a guard on the optimisers fails the test
if work starts first).

Only the command line and plain file edits are used, so the table can be run against any version of reconbench.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.guards import WorkStarted, trained_card
from safetensors.torch import load_file, save_file

from reconbench import plugins
from reconbench.cli import main

REPO = Path(__file__).resolve().parents[3]
TINY = ["--dataset", "digits", "--task", "multiclass", "--num-classes", "3", "--n-per-class", "2", "--widths", "8",
        "--steps", "5"]


@pytest.fixture(autouse=True)
def sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")


def cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_refused(args: list[str], capsys: Any, expect: str = "") -> str:
    code, out, err = cli(args, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0, f"exit 0 for {args}: {out[-300:]}"
    assert "Traceback" not in out + err, err[-2000:]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err[-600:]}"
    assert lines[0].startswith("error:"), lines[0]
    assert "internal error" not in lines[0], lines[0]
    assert expect.lower() in lines[0].lower(), f"{expect!r} not named in: {lines[0]}"
    return lines[0]


# -- the command-line options of every command ---------------------------------------------------------------------
UNWRITABLE = "/proc/reconbench-cannot-write-here"

RECIPE_CASES = [  # (arguments, what the message must name)
    (["--n-per-class", "0"], "--n-per-class"),
    (["--n-per-class", "abc"], "--n-per-class"),
    (["--num-classes", "1"], "--num-classes"),
    (["--num-classes", "11"], "--num-classes"),
    (["--task", "ranking"], "--task"),
    (["--dataset", "nope"], "nope"),
    (["--dataset", "npz:missing.npz"], "missing.npz"),
    (["--binary-rule", "nope", "--task", "binary"], "nope"),
    (["--family", "nope"], "nope"),
    (["--widths", "a,b"], "a,b"),
    (["--widths", "0"], "widths"),
    (["--widths", "32,,32"], "--widths"),
    (["--widths", "32,"], "--widths"),
    (["--model-set", "init_scale=abc"], "init_scale"),
    (["--model-set", "init_scale=nan"], "init_scale"),
    (["--model-set", "init_scale=-1"], "init_scale"),
    (["--model-set", "first_only=maybe"], "first_only"),
    (["--model-set", "nosuch=1"], "nosuch"),
    (["--model-set", "widths"], "--model-set"),
    (["--model-set", "init_scale=1", "--model-set", "init_scale=2"], "init_scale"),
    (["--steps", "0"], "--steps"),
    (["--steps", "-1"], "--steps"),
    (["--lr", "-1"], "--lr"),
    (["--lr", "0"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--weight-decay", "-1"], "--weight-decay"),
    (["--weight-decay", "nan"], "--weight-decay"),
    (["--weight-decay", "1e99"], "weight decay below 2 / lr"),
    (["--dataset", "npz:/dev/zero"], "not a regular file"),
    (["--steps", "9000000000000000000"], "pass --yes"),
    (["--loss", "nope"], "nope"),
    (["--schedule", "fast"], "--schedule"),
    (["--train-dtype", "float16"], "--train-dtype"),
    (["--train-seed", "-1"], "--train-seed"),
    (["--defense", "nope"], "nope"),
    (["--defense", "weight_noise", "--defense-set", "relative_std=nan"], "relative_std"),
    (["--defense", "weight_noise", "--defense-set", "relative_std=-1"], "relative_std"),
    (["--defense", "weight_noise", "--defense-set", "nosuch=1"], "nosuch"),
    (["--defense-set", "relative_std=0.1"], "defense"),
    (["--recipe", "missing.toml"], "missing.toml"),
]

RUN_CASES = [
    (["--attack", "nope"], "nope"),
    (["--attack", "multiclass_kkt", "--model", "no-such-card"], "no-such-card"),
    (["--attack", "multiclass_kkt", "--init", "nope"], "nope"),
    (["--attack", "multiclass_kkt", "--init-set", "scale"], "--init-set"),
    (["--attack", "multiclass_kkt", "--init-set", "nosuch=1"], "nosuch"),
    (["--attack", "multiclass_kkt", "--init-set", "scale=nan"], "scale"),
    (["--attack", "multiclass_kkt", "--init-set", "scale=-1"], "scale"),
    (["--attack", "multiclass_kkt", "--set", "lr"], "--set"),
    (["--attack", "multiclass_kkt", "--set", "lr=-1"], "lr"),
    (["--attack", "multiclass_kkt", "--set", "steps=-5"], "steps"),
    (["--attack", "multiclass_kkt", "--set", "lr=nan"], "lr"),
    (["--attack", "multiclass_kkt", "--set", "lr=inf"], "lr"),
    (["--attack", "multiclass_kkt", "--set", "steps=5", "--set", "steps=6"], "steps"),
    (["--attack", "runkel_bilevel", "--set", "outer_steps=-3"], "outer_steps"),
    (["--attack", "runkel_bilevel", "--set", "inner_tol=nan"], "inner_tol"),
    (["--attack", "runkel_bilevel", "--set", "softplus_beta=0"], "softplus_beta"),
    (["--attack", "haim_binary_kkt", "--set", "lambda_min=-1"], "lambda_min"),
    (["--attack", "multiclass_kkt", "--search-runs", "0"], "--search-runs"),
    (["--attack", "multiclass_kkt", "--search-runs", "-2"], "--search-runs"),
    (["--attack", "multiclass_kkt", "--candidates", "0"], "--candidates"),
    (["--attack", "multiclass_kkt", "--seed", "-1"], "--seed"),
    (["--attack", "multiclass_kkt", "--seed", "x"], "--seed"),
    (["--attack", "multiclass_kkt", "--dtype", "float16"], "--dtype"),
    (["--attack", "multiclass_kkt", "--device", "nope"], "nope"),
    (["--attack", "multiclass_kkt", "--protocol-set", "nosuch=1"], "nosuch"),
    (["--attack", "multiclass_kkt", "--protocol-set", "good_threshold=nan"], "good_threshold"),
    (["--attack", "multiclass_kkt", "--protocol-set", "good_threshold=-1"], "good_threshold"),
    (["--attack", "multiclass_kkt", "--protocol-set", "good_threshold=1"], "good_threshold"),
    (["--attack", "multiclass_kkt", "--track-uri", "http://127.0.0.1:1"], "--track mlflow"),
    (["--attack", "multiclass_kkt", "--track-experiment", "x"], "--track mlflow"),
    (["--attack", "multiclass_kkt", "--search-runs", "100000", "--set", "steps=100000"], "pass --yes"),
    (["--attack", "multiclass_kkt", "--set", "steps=9000000000000000000"], "pass --yes"),
    (["--attack", "multiclass_kkt", "--protocol-set", "distance=cosine"], "cosine"),
    (["--attack", "multiclass_kkt", "--out", UNWRITABLE], "--out"),
    (["--attack", "multiclass_kkt", "--cache", UNWRITABLE], "--cache"),
    (["--attack", "multiclass_kkt", "--bogus"], "--bogus"),
]
if not torch.cuda.is_available():
    RUN_CASES.append((["--attack", "multiclass_kkt", "--device", "cuda"], "cuda"))

OTHER_CASES = [
    (["train", "--out", UNWRITABLE, *TINY], "--out"),
    (["train", "--cache", UNWRITABLE, *TINY], "--cache"),
    (["bench", "no-such-suite"], "no-such-suite"),
    (["bench", "ci", "--only", "nothing-matches-this"], "nothing-matches-this"),
    (["bench", "ci", "--device", "nope"], "nope"),
    (["bench", "ci", "--dtype", "float16"], "--dtype"),
    (["bench", "ci", "--out", UNWRITABLE], "--out"),
    (["bench", "ci", "--cache", UNWRITABLE], "--cache"),
    (["bench", "ci", "--deadline", "0"], "--deadline"),
    (["bench", "ci", "--deadline", "-5"], "--deadline"),
    (["bench", "ci", "--deadline", "nan"], "--deadline"),
    (["bench", "ci", "--costs", "c.json"], "--costs"),
    (["bench", "ci", "--deadline", "60", "--costs", "no-such-costs.json"], "no-such-costs.json"),
    (["bench", "ci", "--deadline", "60", "--executor", "ray"], "--executor ray"),
    (["bench", "ci", "--finished", "no-such-ledger.json"], "no-such-ledger.json"),
    (["bench", "ci", "--unpack", "no-such-pack"], "no-such-pack"),
    (["bench", "ci", "--unpack", "p", "--deadline", "60"], "--unpack"),
    (["bench", "ci", "--pack", str(REPO / "docs")], "not an empty folder"),
    (["bench", "ci", "--track-uri", "http://127.0.0.1:1"], "--track mlflow"),
    (["bench", "."], "is a folder"),
    (["leaderboard", "."], "is a folder"),
    (["leaderboard", "no-such-suite"], "no-such-suite"),
    (["leaderboard", "ci", "--results", "no-such-results"], "no-such-results"),
    (["leaderboard", "ci", "--out", "empty", "--verify"], "empty"),
    (["leaderboard", "ci", "--out", UNWRITABLE, "--results", str(REPO / "leaderboards" / "ci")], "--out"),
    (["evaluate", "no-such-result"], "no-such-result"),
    (["list", "nope"], "nope"),
    (["nosuchcommand"], "nosuchcommand"),
]


@pytest.mark.parametrize("extra,expect", RECIPE_CASES, ids=[" ".join(a) for a, _ in RECIPE_CASES])
@pytest.mark.parametrize("command", ["train", "run"])
def test_recipe_options_refused(command, extra, expect, capsys, no_work):
    args = [command, *(["--attack", "multiclass_kkt"] if command == "run" else []), *TINY, *extra]
    assert_refused(args, capsys, expect)


@pytest.mark.parametrize("extra,expect", RUN_CASES, ids=[" ".join(a) for a, _ in RUN_CASES])
def test_run_options_refused(extra, expect, capsys, no_work):
    assert_refused(["run", *extra], capsys, expect)


@pytest.mark.parametrize("args,expect", OTHER_CASES, ids=[" ".join(a) for a, _ in OTHER_CASES])
def test_other_commands_refused(args, expect, capsys, no_work):
    assert_refused(args, capsys, expect)


# -- every option of every plugin --------------------------------------------------------------------------------
def _bad_values(annotation: Any, default: Any) -> list[str]:
    """Values no option of this type may take: wrong types, NaN and infinities for numbers, unknown choices."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Literal:
        return ['"not-a-choice"']
    if origin in (typing.Union, __import__("types").UnionType) and len(args) == 1:
        return [v for v in _bad_values(args[0], default) if v != "null"]
    if annotation is float:
        return ["nan", "inf", "-inf", '"abc"']
    if annotation is int:
        return ["1.5", '"abc"']
    if annotation is bool:
        return ['"maybe"']
    return []


def _plugin_option_cases() -> list[tuple[str, str, str, str]]:
    cases = []
    for kind in ("attacks", "inits", "defenses", "metrics"):
        for name in plugins.names(kind):
            cls = plugins.get(kind, name).config_cls
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                for value in _bad_values(hints[f.name], f.default):
                    cases.append((kind, name, f.name, value))
            cases.append((kind, name, "no_such_option", "1"))
    return cases


PLUGIN_CASES = _plugin_option_cases()


def _plugin_args(kind: str, name: str, key: str, value: str) -> list[str]:
    if kind == "attacks":
        return ["run", "--attack", name, "--set", f"{key}={value}"]
    if kind == "inits":
        return ["run", "--attack", "multiclass_kkt", *TINY, "--init", name, "--init-set", f"{key}={value}"]
    if kind == "defenses":
        return ["train", *TINY, "--defense", name, "--defense-set", f"{key}={value}"]
    return ["run", "--attack", "multiclass_kkt", *TINY, "--protocol-set", f"{name}.{key}={value}"]


@pytest.mark.parametrize("kind,name,key,value", PLUGIN_CASES, ids=["/".join(c) for c in PLUGIN_CASES])
def test_plugin_options_refused(kind, name, key, value, capsys, no_work):
    assert_refused(_plugin_args(kind, name, key, value), capsys, key)


def _limit_cases() -> list[tuple[str, str, str, str]]:
    """For every declared range of a plugin option, a value just outside it."""
    try:
        from reconbench.config import field_limits
    except ImportError:  # a version without declared ranges
        return []
    cases = []
    for kind in ("attacks", "inits", "defenses"):
        for name in plugins.names(kind):
            cls = plugins.get(kind, name).config_cls
            for key, lim in field_limits(cls).items():
                for bound, step in ((lim.gt, 0.0), (lim.ge, -1.0), (lim.lt, 0.0), (lim.le, 1.0)):
                    if bound is not None:
                        cases.append((kind, name, key, repr(float(bound) + step)))
    return cases


LIMIT_CASES = _limit_cases()


@pytest.mark.parametrize("kind,name,key,value", LIMIT_CASES, ids=["/".join(c) for c in LIMIT_CASES])
def test_plugin_ranges_refused(kind, name, key, value, capsys, no_work):
    assert_refused(_plugin_args(kind, name, key, value), capsys, key)


@pytest.mark.parametrize("family", plugins.names("models"))
def test_model_options_of_every_family_refused(family, capsys, no_work):
    spec = plugins.get("models", family).default_spec()
    for key, default in spec.items():
        bad = ['"abc"'] if isinstance(default, (int, float)) and not isinstance(default, bool) else \
            ['"maybe"'] if isinstance(default, bool) else ["5"] if isinstance(default, list) else []
        for value in bad:
            assert_refused(["train", *TINY[:-4], "--family", family, "--model-set", f"{key}={value}"], capsys, key)


# -- corrupted model cards --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def card_dir(tmp_path_factory):
    """A tiny multiclass card trained through the command line (well under a second of training)."""
    return trained_card(tmp_path_factory.mktemp("card"), TINY)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _card_copy(card_dir: Path, dest: Path) -> tuple[Path, dict[str, Any]]:
    shutil.copytree(card_dir, dest)
    return dest, json.loads((dest / "card.json").read_text())


def _write_card(folder: Path, data: Any, rehash: bool = False) -> None:
    if rehash and isinstance(data, dict) and "content_sha256" in data:  # a forger who recomputes every hash
        from reconbench.targets.cards import content_sha256

        data["content_sha256"] = content_sha256(data)
    (folder / "card.json").write_text(json.dumps(data))


def _retensor(folder: Path, data: dict[str, Any], fn: Any) -> dict[str, Any]:
    """Rewrite the weights through ``fn`` and record their new sha256, as a forger would."""
    path = folder / "weights.safetensors"
    save_file({k: fn(v).contiguous() for k, v in load_file(str(path)).items()}, str(path))
    data["weights"]["sha256"] = _sha256(path)
    return data


CARD_EDITS = {
    "json-list": lambda d, f: "[1, 2]",
    "not-json": lambda d, f: "{card",
    "no-model_spec": lambda d, f: {k: v for k, v in d.items() if k != "model_spec"},
    "no-weights": lambda d, f: {k: v for k, v in d.items() if k != "weights"},
    "no-mean_image": lambda d, f: {k: v for k, v in d.items() if k != "mean_image"},
    "model_spec-string": lambda d, f: {**d, "model_spec": "mlp"},
    "num_classes-edited": lambda d, f: {**d, "num_classes": d["num_classes"] + 1},
    "class_counts-edited": lambda d, f: {**d, "class_counts": [c + 1 for c in d["class_counts"]]},
    "train_labels-reversed": lambda d, f: {**d, "problem": {**d["problem"],
                                                            "train_labels": d["problem"]["train_labels"][::-1]}},
    "test_error-edited": lambda d, f: {**d, "metrics": {**d["metrics"], "test_error": 0.0}},
    "margins-edited": lambda d, f: {**d, "metrics": {**d["metrics"], "margins": [m + 1 for m in d["metrics"]["margins"]]}},
    "certificate-ratio-edited": lambda d, f: {**d, "metrics": {**d["metrics"], "certificate": {
        **d["metrics"]["certificate"], "ratio": d["metrics"]["certificate"]["ratio"] / 100}}},
    "nan-weights": lambda d, f: _retensor(f, d, lambda t: t * math.nan),
    "float16-weights": lambda d, f: _retensor(f, d, lambda t: t.half()),
    "int64-weights": lambda d, f: _retensor(f, d, lambda t: t.long()),
}


@pytest.mark.parametrize("edit", list(CARD_EDITS))
@pytest.mark.parametrize("rehash", [False, True], ids=["as-edited", "hash-recomputed"])
def test_corrupted_card_refused(edit, rehash, card_dir, tmp_path, capsys, no_work):
    folder, data = _card_copy(card_dir, tmp_path / "bad")
    edited = CARD_EDITS[edit](data, folder)
    if isinstance(edited, str):
        (folder / "card.json").write_text(edited)
    else:
        _write_card(folder, edited, rehash)
    assert_refused(["run", "--attack", "multiclass_kkt", "--model", str(folder), "--out", str(tmp_path / "o")],
                   capsys, str(folder.name))


# -- corrupted data ---------------------------------------------------------------------------------------------
def _npz(path: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    np.savez(path, images=images, labels=labels)
    return path


def test_npz_labels_outside_classes_refused(tmp_path, capsys, no_work):
    imgs = np.random.default_rng(0).random((40, 8, 8))
    _npz(tmp_path / "neg.npz", imgs, np.arange(40) % 10 - 5)
    assert_refused(["train", "--dataset", f"npz:{tmp_path / 'neg.npz'}", "--n-per-class", "2", "--widths", "8"],
                   capsys, "label")
    np.savez(tmp_path / "cls.npz", images=imgs, labels=np.arange(40) % 10, classes=np.array(["a", "b"]))
    assert_refused(["train", "--dataset", f"npz:{tmp_path / 'cls.npz'}", "--n-per-class", "2", "--widths", "8"],
                   capsys, "label")


def test_npz_with_object_arrays_refused_without_pickle_advice(tmp_path, capsys, no_work):
    np.savez(tmp_path / "obj.npz", images=np.array([object()] * 4, dtype=object), labels=np.arange(4))
    line = assert_refused(["train", "--dataset", f"npz:{tmp_path / 'obj.npz'}"], capsys, "obj.npz")
    assert "allow_pickle=True" not in line


def test_changed_training_pixels_refused(tmp_path, capsys):
    """A target trained on an npz file; then the same images are inverted: same indices, other pixels."""
    rng = np.random.default_rng(1)
    imgs, labels = rng.random((30, 8, 8)), np.arange(30) % 3
    data = _npz(tmp_path / "d.npz", imgs, labels)
    recipe = ["--dataset", f"npz:{data}", "--task", "multiclass", "--n-per-class", "2", "--widths", "8", "--steps", "3"]
    code, _, err = cli(["train", *recipe, "--out", str(tmp_path / "card"), "-q"], capsys)
    assert code == 0, err
    _npz(data, 1.0 - imgs, labels)
    _forget_loaded_data()
    assert_refused(["run", "--attack", "multiclass_kkt", "--model", str(tmp_path / "card"), "--out",
                    str(tmp_path / "o")], capsys, "card")


def _forget_loaded_data() -> None:
    """Data sets are cached per process; a new process (the next command) reads the changed file."""
    import importlib

    for name in ("reconbench.targets.problems", "reconbench.problems"):
        try:
            importlib.import_module(name)._load_cached.cache_clear()
        except (ImportError, AttributeError):
            continue


# -- corrupted results, suites and leaderboards ------------------------------------------------------------------
@pytest.fixture(scope="module")
def result_dir(card_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("result") / "r"
    try:
        main(["run", "--attack", "multiclass_kkt", "--model", str(card_dir), "--set", "steps=3", "--search-runs", "1",
              "--protocol-set", "figures=false", "--out", str(out), "-q"])
    except SystemExit as exc:
        assert not exc.code
    return out


def test_a_number_the_evaluation_could_not_compute_is_shown_with_its_reason(card_dir, tmp_path, capsys):
    """The membership test needs pool_per_member held-out images per member of each class; too few give None, and
    the console says why and how many were needed."""
    code, out, err = cli(["run", "--attack", "multiclass_kkt", "--model", str(card_dir), "--set", "steps=3",
                          "--search-runs", "1", "--protocol-set", "figures=false", "--protocol-set",
                          "membership_test.pool_per_member=100000", "--out", str(tmp_path / "r"), "-q"], capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["evaluation"]["summary"]["membership_auc"] is None
    line = next(ln for ln in out.splitlines() if "membership_auc" in ln)
    members = result["target"]["n_train"] // 3  # the card's three classes hold equally many members
    assert "None (unavailable: the problem has" in line and f"for a pool of {100000 * members}" in line, line


def test_an_unreachable_tracking_server_costs_a_warning_not_the_result(result_dir, capsys, monkeypatch):
    """MLflow's own defaults retry for minutes; the tracker bounds its requests (unless the user set them) and
    returns after one warning, the result folder untouched."""
    pytest.importorskip("mlflow")
    from reconbench.tracking import HTTP_DEFAULTS, MlflowTracker

    for key in HTTP_DEFAULTS:  # unset here, and unset again afterwards (setenv records the state to restore)
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    before = (result_dir / "result.json").read_bytes()
    assert MlflowTracker("http://127.0.0.1:1", "x").log_result(result_dir, "r") is None
    import os

    assert {k: os.environ[k] for k in HTTP_DEFAULTS} == HTTP_DEFAULTS
    assert int(HTTP_DEFAULTS["MLFLOW_HTTP_REQUEST_TIMEOUT"]) * (1 + int(HTTP_DEFAULTS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])) <= 30
    err = capsys.readouterr().err
    assert "warning: MLflow tracking of r failed" in err and (result_dir / "result.json").read_bytes() == before


RESULT_EDITS = {
    "protocol-list": lambda r: {**r, "spec": {**r["spec"], "protocol": [1]}},
    "spec-string": lambda r: {**r, "spec": "x"},
    "target-string": lambda r: {**r, "target": "x"},
    "evaluation-string": lambda r: {**r, "evaluation": "x"},
    "no-evaluation": lambda r: {k: v for k, v in r.items() if k != "evaluation"},
    "json-list": lambda r: [r],
    "good_threshold-edited": lambda r: {**r, "evaluation": {**r["evaluation"], "protocol": {
        **r["evaluation"]["protocol"], "good_threshold": -1}}},
    "seed-edited": lambda r: {**r, "spec": {**r["spec"], "seed": r["spec"]["seed"] + 1}},
}


@pytest.mark.parametrize("edit", list(RESULT_EDITS))
def test_corrupted_result_refused_by_check(edit, result_dir, tmp_path, capsys, no_work):
    folder = tmp_path / "r"
    shutil.copytree(result_dir, folder)
    result = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps(RESULT_EDITS[edit](result)))
    assert_refused(["evaluate", str(folder), "--check", "-q"], capsys, "result.json")


def test_check_with_other_protocol_refused_before_evaluating(result_dir, capsys, no_work, monkeypatch):
    import reconbench.evaluation.rescore as rescore_module

    monkeypatch.setattr(rescore_module, "rescore", lambda *a, **k: (_ for _ in ()).throw(WorkStarted("evaluated")))
    assert_refused(["evaluate", str(result_dir), "--check", "--protocol-set", "distance=ncc"], capsys, "--check")


SUITE_EDITS = {
    "escaping-name": ('name = "ci"', 'name = "../../evil"'),
    "dot-dot-name": ('name = "ci"', 'name = ".."'),
    "not-toml": ('name = "ci"', "name = "),
    "unknown-key": ('name = "ci"', 'name = "ci"\nspeed = 3'),
    "zero-search-runs": ('name = "ci"', 'name = "ci"\nsearch_runs = 0'),
    "negative-store-candidates": ('store_candidates = "all"', "store_candidates = -3"),
    "zero-store-candidates": ('store_candidates = "all"', "store_candidates = 0"),
    "duplicate-seeds": ("seeds = [0, 1]", "seeds = [0, 0]"),
    "no-seeds": ("seeds = [0, 1]", "seeds = []"),
    "negative-good-threshold": ("figures = false\n", "figures = false\ngood_threshold = -1\n"),
    "no-calibration-draws": ("figures = false\n", "figures = false\ncalibration_draws = 0\n"),
    "column-format": ("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "x", key = "reconstructed", '
                      'higher_is_better = true, format = "%n%n%n" }]\n'),
    "column-name-html": ("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "<img src=x>", '
                         'key = "reconstructed", higher_is_better = true }]\n'),
    "column-name-pipe": ("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "a | b", '
                         'key = "reconstructed", higher_is_better = true }]\n'),
    "column-name-newline": ("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "a\\n# b", '
                            'key = "reconstructed", higher_is_better = true }]\n'),
    "column-name-long": ("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "' + 'x' * 100_000 + '", '
                         'key = "reconstructed", higher_is_better = true }]\n'),
    "column-name-twice": ("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "a", key = "reconstructed", '
                          'higher_is_better = true }, { name = "a", key = "good_count", higher_is_better = true }]\n'),
}


@pytest.mark.parametrize("edit", list(SUITE_EDITS))
def test_corrupted_suite_refused(edit, tmp_path, capsys, no_work):
    text = next(p for p in (REPO / "reconbench" / "bench" / "suites" / "ci.toml", REPO / "benchmarks" / "suites" /
                            "ci.toml") if p.exists()).read_text()  # where versions of reconbench keep it
    old, new = SUITE_EDITS[edit]
    assert old in text
    (tmp_path / "s.toml").write_text(text.replace(old, new, 1))
    for args in (["bench", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o")],
                 ["leaderboard", str(tmp_path / "s.toml")]):
        assert_refused(args, capsys, "s.toml")
    assert not (tmp_path.parent / "evil").exists() and not Path("evil").exists()


def test_a_suite_that_would_run_for_ages_is_refused_with_its_estimate(tmp_path, capsys, no_work):
    text = (REPO / "reconbench" / "bench" / "suites" / "ci.toml").read_text()
    assert "steps = 500" in text
    (tmp_path / "s.toml").write_text(text.replace("steps = 500", "steps = 9000000000000000000", 1))
    line = assert_refused(["bench", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o")], capsys, "s.toml")
    assert "years" in line and "pass --yes" in line and "training its targets" in line


@pytest.mark.parametrize("command", ["train", "run"])
def test_a_recipe_file_that_would_train_for_ages_is_refused(command, tmp_path, capsys, no_work):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"problem": {"dataset": "digits", "task": "multiclass", "num_classes": 3,
                                              "n_per_class": 2}, "family": "mlp", "model": {"widths": [8]},
                                  "train": {"steps": 9_000_000_000_000_000_000}}))
    extra = ["--attack", "multiclass_kkt"] if command == "run" else []
    line = assert_refused([command, *extra, "--recipe", str(recipe)], capsys, "pass --yes")
    assert "training" in line and "years" in line


def test_the_cost_preflight_is_a_lower_bound_that_yes_overrides():
    from reconbench.preflight import CostLimitError, check_cost, machine_flops, step_seconds

    # arithmetic alone at the best rate this process reaches: a step can only take longer
    assert step_seconds(10**6, 100, 1000) >= 6e11 / machine_flops()
    assert step_seconds(10**6, 100, 2000) == pytest.approx(2 * step_seconds(10**6, 100, 1000))
    with pytest.raises(CostLimitError, match="pass --yes"):
        check_cost([("training", 2e5)], yes=False, fix="lower --steps")
    assert check_cost([("training", 2e5)], yes=True, fix="lower --steps") == 2e5
    assert check_cost([("training", 10.0)], yes=False, fix="lower --steps") == 10.0


def test_a_card_path_whose_card_json_is_a_folder_is_refused(tmp_path, capsys, no_work):
    (tmp_path / "card" / "card.json").mkdir(parents=True)
    line = assert_refused(["run", "--attack", "multiclass_kkt", "--model", str(tmp_path / "card")], capsys,
                          "is a folder, not a model card file")
    assert "cannot access" not in line


def test_a_column_key_that_no_cell_reports_is_refused(tmp_path, capsys):
    text = (REPO / "reconbench" / "bench" / "suites" / "ci.toml").read_text()
    (tmp_path / "s.toml").write_text(text.replace("sample_images = 8\n", 'sample_images = 8\ncolumns = [{ name = "x", '
                                                  'key = "no_such_number", higher_is_better = true }]\n', 1))
    results = Path("res")
    shutil.copytree(REPO / "leaderboards" / "ci", results, ignore=shutil.ignore_patterns("figures", "candidates"))
    line = assert_refused(["leaderboard", str(tmp_path / "s.toml"), "--results", str(results), "--no-figures"],
                          capsys, "no_such_number")
    assert "column 'x'" in line and "[leaderboard]" in line
    assert not (Path("runs") / "leaderboards" / "ci" / "README.md").exists()


@pytest.fixture
def published(tmp_path):
    """A copy of the committed ci leaderboard, every file of it (a board missing its candidates or figures fails)."""
    lb = tmp_path / "lb"
    shutil.copytree(REPO / "leaderboards" / "ci", lb)
    return lb


def test_intact_leaderboard_verifies(published, capsys):
    code, out, err = cli(["leaderboard", "ci", "--out", str(published), "--verify"], capsys)
    assert code == 0, err


def _edit_readme_number(lb: Path) -> None:
    text = (lb / "README.md").read_text()
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| ") and " 0.1" in ln)
    lines[i] = lines[i].replace(" 0.1", " 9.5", 1)
    (lb / "README.md").write_text("\n".join(lines) + "\n")


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


LEADERBOARD_EDITS = {
    "results-not-json": lambda lb: (lb / "results.json").write_text("{results"),
    "results-list": lambda lb: (lb / "results.json").write_text("[]"),
    "cell-array": lambda lb: next((lb / "cells").glob("*.json")).write_text("[1, 2]"),
    "cell-not-json": lambda lb: next((lb / "cells").glob("*.json")).write_text("{cell"),
    "readme-number": _edit_readme_number,
    "cell-misspelt-field": lambda lb: _edit_json(next((lb / "cells").glob("*.json")),
                                                 lambda d: d.update(selectons=d.pop("selections"))),
    "results-wrong-type": lambda lb: _edit_json(lb / "results.json", lambda d: d["header"].update(wall_seconds="slow")),
}


@pytest.mark.parametrize("edit", list(LEADERBOARD_EDITS))
def test_corrupted_leaderboard_fails_verify(edit, published, capsys, no_work):
    LEADERBOARD_EDITS[edit](published)
    line = assert_refused(["leaderboard", "ci", "--out", str(published), "--verify"], capsys, str(published))
    if edit.startswith("cell"):
        assert ".json" in line  # the corrupt cell is named


# -- what the user meant --------------------------------------------------------------------------------------------
def test_leaderboard_without_publish_leaves_the_published_one_alone(capsys):
    results = Path("res")
    shutil.copytree(REPO / "leaderboards" / "ci", results, ignore=shutil.ignore_patterns("figures", "candidates"))
    code, out, err = cli(["leaderboard", "ci", "--results", str(results), "--no-figures"], capsys)
    assert code == 0, err
    assert not Path("leaderboards").exists()
    assert (Path("runs") / "leaderboards" / "ci" / "README.md").exists()


def test_progress_is_plain_off_a_terminal(capsys, monkeypatch):
    from reconbench import progress as progress_module

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_SECONDS", 0.0, raising=False)
    with progress_module.Progress(100, "loop") as bar:
        for i in range(100):
            bar.update(i + 1, {"loss": 1.0 / (i + 1)})
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    assert "loop: 100/100" in err


def test_progress_of_a_long_loop_is_logged_even_when_quiet(capsys, monkeypatch):
    from reconbench import progress as progress_module

    monkeypatch.setattr(progress_module, "PLAIN_EVERY_SECONDS", 0.0, raising=False)
    with progress_module.Progress(10, "long phase", quiet=True) as bar:
        for i in range(10):
            bar.update(i + 1)
    assert "long phase: 10/10" in capsys.readouterr().err
    monkeypatch.setattr(progress_module, "PLAIN_EVERY_SECONDS", 3600.0, raising=False)
    with progress_module.Progress(10, "short phase", quiet=True) as bar:
        for i in range(10):
            bar.update(i + 1)
    assert capsys.readouterr().err == ""  # shorter than the interval: silent


def test_run_into_a_folder_of_another_configuration(card_dir, result_dir, tmp_path, capsys):
    folder = tmp_path / "r"
    shutil.copytree(result_dir, folder)
    args = ["run", "--attack", "multiclass_kkt", "--model", str(card_dir), "--search-runs", "1",
            "--protocol-set", "figures=false", "--out", str(folder), "-q"]
    assert_refused([*args, "--set", "steps=4"], capsys, "--replace")
    (folder / "runs" / "run-007.json").write_text("{}")  # a stale file of the old run
    code, _, err = cli([*args, "--set", "steps=4", "--replace"], capsys)
    assert code == 0, err
    assert json.loads((folder / "result.json").read_text())["spec"]["attack_config"] == {"steps": 4}
    assert not (folder / "runs" / "run-007.json").exists()
    # a file of the user's among the run's files: --replace refuses rather than delete it, and deletes nothing
    (folder / "runs" / "my-notes.txt").write_text("mine")
    (folder / "figures").mkdir(exist_ok=True)
    (folder / "figures" / "drawing.svg").write_text("mine")
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    line = assert_refused([*args, "--set", "steps=5", "--replace"], capsys, "did not write")
    assert "runs/my-notes.txt" in line and "figures/drawing.svg" in line
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before


def test_train_out_refuses_the_card_of_another_recipe(tmp_path, capsys):
    code, _, err = cli(["train", *TINY, "--out", str(tmp_path / "c"), "-q"], capsys)
    assert code == 0, err
    card = (tmp_path / "c" / "card.json").read_bytes()
    line = assert_refused(["train", *TINY[:-1], "6", "--out", str(tmp_path / "c"), "-q"], capsys, "another recipe")
    assert "--out" in line and (tmp_path / "c" / "card.json").read_bytes() == card


def test_debug_prints_the_trace_of_an_internal_error(capsys, monkeypatch):
    from reconbench.cli import plugins_cmd

    monkeypatch.setattr(plugins_cmd.plugins, "host", lambda: 1 / 0)
    code, _, err = cli(["plugins"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and "ZeroDivisionError" in lines[0] and "Traceback" not in err
    trace = lines[0].split("full trace in ")[1].split(" ")[0]
    assert "ZeroDivisionError" in Path(trace).read_text()
    Path(trace).unlink()
    code, _, err = cli(["--debug", "plugins"], capsys)
    assert code != 0 and "Traceback" in err


def test_environment_errors_are_one_line(capsys, monkeypatch):
    from reconbench.cli import plugins_cmd

    def denied() -> None:
        raise PermissionError(13, "Permission denied", "/somewhere/cells")

    monkeypatch.setattr(plugins_cmd.plugins, "host", denied)
    code, _, err = cli(["plugins"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "cannot access /somewhere/cells (Permission denied)" in lines[0]
    Path(lines[0].split("full trace in ")[1]).unlink()

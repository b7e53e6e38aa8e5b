"""Where ``--verify --rerun`` trains a target and runs an attack (stock MKL or its fast path): the choice over every
combination of what a card and a cell record, the second training after a weights mismatch, what is installed into
the re-run's cache and said, the environment of a child on either path, and the cells a publication warns about."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pytest

from reconbench import fast_blas
from reconbench.leaderboard.rerun_paths import (
    PathPlan,
    Trained,
    cell_attack_path,
    mixed_cells,
    plan_paths,
    retrain_target,
)

#: (card records, cell records, this process) -> (train on, in order; attack on), written out by hand
EXPECTED = {
    ("stock", "stock", "stock"): (("stock",), "stock"),
    ("stock", "stock", "fast"): (("stock",), "stock"),
    ("stock", "fast", "stock"): (("stock",), "fast"),
    ("stock", "fast", "fast"): (("stock",), "fast"),
    ("stock", None, "stock"): (("stock",), "stock"),
    ("stock", None, "fast"): (("stock",), "fast"),
    ("fast", "stock", "stock"): (("fast",), "stock"),
    ("fast", "stock", "fast"): (("fast",), "stock"),
    ("fast", "fast", "stock"): (("fast",), "fast"),
    ("fast", "fast", "fast"): (("fast",), "fast"),
    ("fast", None, "stock"): (("fast",), "stock"),
    ("fast", None, "fast"): (("fast",), "fast"),
    (None, "stock", "stock"): (("stock", "fast"), "stock"),
    (None, "stock", "fast"): (("stock", "fast"), "stock"),
    (None, "fast", "stock"): (("fast", "stock"), "fast"),
    (None, "fast", "fast"): (("fast", "stock"), "fast"),
    (None, None, "stock"): (("stock", "fast"), "stock"),
    (None, None, "fast"): (("fast", "stock"), "fast"),
}


def test_the_table_covers_every_combination():
    assert set(EXPECTED) == set(product(("stock", "fast", None), ("stock", "fast", None), ("stock", "fast")))


@pytest.mark.parametrize(("card", "cell", "current"), sorted(EXPECTED, key=str))
def test_the_path_choice(card, cell, current):
    train, attack = EXPECTED[(card, cell, current)]
    assert plan_paths(card, cell, current) == PathPlan(train=train, attack=attack, card_says=card is not None)


def test_an_unknown_path_name_is_refused():
    with pytest.raises(ValueError, match="'mkl'"):
        plan_paths("mkl", None, "stock")


@pytest.mark.parametrize(("provenance", "path"), [
    ({"blas": {"fast_path": True}}, "fast"), ({"blas": {"fast_path": False}}, "stock"),
    ({"blas": {}}, None), ({"blas_line": "BLAS mkl (auto)"}, None), (None, None), ({"blas": "mkl"}, None),
])
def test_the_cell_attack_path_is_read_from_its_provenance(provenance, path):
    assert cell_attack_path(provenance) == path


class FakeTrainer:
    """Trains nothing: each call makes a staging cache holding a target folder and answers the sha256 given for
    the path (a path missing from ``runs_on`` runs on the stock path, as where the fast path is unavailable)."""

    def __init__(self, key: str, shas: dict[str, str | None], runs_on: dict[str, str] | None = None) -> None:
        self.key, self.shas, self.runs_on = key, shas, runs_on or {}
        self.calls: list[str] = []

    def __call__(self, recipe, path: str, staged: Path) -> Trained:
        self.calls.append(path)
        ran = self.runs_on.get(path, path)
        sha = self.shas[ran]
        if sha is not None:
            (staged / "targets" / self.key).mkdir(parents=True)
            (staged / "targets" / self.key / "card.json").write_text(ran)
        note = None if ran == path else "the fast path is not available here"
        return Trained(ran, sha, staged, note)


A, B, CARD = "a" * 64, "b" * 64, "c" * 64


def _installed(cache: Path, key: str) -> str | None:
    card = cache / "targets" / key / "card.json"
    return card.read_text() if card.exists() else None


def test_a_mismatch_on_the_attack_path_trains_again_on_the_other(tmp_path):
    trainer = FakeTrainer("k", {"fast": A, "stock": CARD})
    done = retrain_target("k", {}, plan_paths(None, "fast", "fast"), CARD, trainer, tmp_path / "s", tmp_path / "c")
    assert trainer.calls == ["fast", "stock"]
    assert done.problem is None and done.installed is not None and done.installed.path == "stock"
    assert _installed(tmp_path / "c", "k") == "stock"
    assert done.line.startswith("target k reproduced on the stock path")
    assert "the card does not record its path" in done.line and A[:16] in done.line


def test_a_match_on_the_first_path_trains_once(tmp_path):
    trainer = FakeTrainer("k", {"fast": CARD, "stock": A})
    done = retrain_target("k", {}, plan_paths(None, "fast", "stock"), CARD, trainer, tmp_path / "s", tmp_path / "c")
    assert trainer.calls == ["fast"] and done.problem is None and _installed(tmp_path / "c", "k") == "fast"


def test_a_card_that_records_its_path_is_trained_there_only(tmp_path):
    trainer = FakeTrainer("k", {"fast": A, "stock": CARD})
    done = retrain_target("k", {}, plan_paths("fast", "stock", "stock"), CARD, trainer, tmp_path / "s",
                          tmp_path / "c")
    assert trainer.calls == ["fast"]
    assert done.problem is not None and A[:16] in done.problem and CARD[:16] in done.problem
    assert "does not record" not in done.line
    assert _installed(tmp_path / "c", "k") == "fast"   # nothing computed is lost: the cells run on it


def test_no_path_reproduces_the_card_the_first_training_is_kept(tmp_path):
    trainer = FakeTrainer("k", {"stock": A, "fast": B})
    done = retrain_target("k", {}, plan_paths(None, "stock", "stock"), CARD, trainer, tmp_path / "s", tmp_path / "c")
    assert trainer.calls == ["stock", "fast"] and done.problem is not None
    assert A[:16] in done.line and B[:16] in done.line and "trained on the stock path" in done.line
    assert _installed(tmp_path / "c", "k") == "stock"


def test_where_the_fast_path_is_unavailable_the_stock_path_runs_once(tmp_path):
    trainer = FakeTrainer("k", {"stock": CARD}, runs_on={"fast": "stock"})
    done = retrain_target("k", {}, plan_paths(None, "fast", "stock"), CARD, trainer, tmp_path / "s", tmp_path / "c")
    assert trainer.calls == ["fast"] and done.problem is None
    assert "reproduced on the stock path" in done.line and "not available" in done.line


def test_failed_trainings_install_nothing(tmp_path):
    trainer = FakeTrainer("k", {"stock": None, "fast": None})
    done = retrain_target("k", {}, plan_paths(None, None, "stock"), CARD, trainer, tmp_path / "s", tmp_path / "c")
    assert done.installed is None and done.problem is not None and "training failed" in done.problem
    assert _installed(tmp_path / "c", "k") is None


def test_a_child_on_the_stock_path_carries_no_shim(tmp_path):
    shim = str(tmp_path / "mkl-intel-cpu-shim-0123.so")
    environ = {"LD_PRELOAD": f"/opt/other.so:{shim}", fast_blas.ACTIVE_ENV: shim, fast_blas.FAST_BLAS_ENV: "1",
               "KEEP": "x"}
    env, why = fast_blas.child_env("stock", environ)
    assert why is None
    assert env == {"LD_PRELOAD": "/opt/other.so", "KEEP": "x"}
    env, _ = fast_blas.child_env("stock", {fast_blas.ACTIVE_ENV: shim, "LD_PRELOAD": shim})
    assert "LD_PRELOAD" not in env and fast_blas.ACTIVE_ENV not in env


def test_a_child_on_the_fast_path_gets_the_shim_or_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path))
    env, why = fast_blas.child_env("fast", {"LD_PRELOAD": "/opt/other.so"})
    if fast_blas.unsupported_reason() is not None:
        assert why == fast_blas.unsupported_reason() and fast_blas.ACTIVE_ENV not in env
    else:
        assert why is None
        first = env["LD_PRELOAD"].split(":")[0]
        assert env[fast_blas.ACTIVE_ENV] == first and Path(first).exists() and env["LD_PRELOAD"].endswith(":/opt/other.so")
    with pytest.raises(ValueError, match="'turbo'"):
        fast_blas.child_env("turbo", {})


def test_cells_attacked_on_another_path_than_their_training_are_named():
    cells = {
        "c1": {"target": {"recipe_key": "k1"}, "provenance": {"blas": {"fast_path": True}}},
        "c2": {"target": {"recipe_key": "k1"}, "provenance": {"blas": {"fast_path": False}}},
        "c3": {"target": {"recipe_key": "k2"}, "provenance": {"blas": {"fast_path": True}}},   # card: no path
        "c4": {"target": {"recipe_key": "k1"}, "provenance": {}},                             # cell: no path
        "c5": {"target": {"recipe_key": "k3"}, "provenance": {"blas": {"fast_path": False}}},
    }
    paths = {"k1": "stock", "k2": None, "k3": "fast"}
    mixed = mixed_cells(cells, paths.get)
    assert [(m.cell_id, m.recipe_key, m.trained, m.attacked) for m in mixed] == [
        ("c1", "k1", "stock", "fast"), ("c5", "k3", "fast", "stock")]


def _folder(tmp_path: Path, card_fast: bool | None) -> Path:
    """A results folder of one cell attacked on the fast path, its target's card recording ``card_fast``."""
    import json

    (tmp_path / "cells").mkdir()
    (tmp_path / "targets").mkdir()
    cell = {"format": "reconbench-bench-cell/1", "cell_id": "t--a--i--s0", "status": "ok",
            "target": {"recipe_key": "k1"}, "provenance": {"blas": {"fast_path": True}}}
    (tmp_path / "cells" / "t--a--i--s0.json").write_text(json.dumps(cell))
    card = {"recipe_key": "k1"} if card_fast is None else {"recipe_key": "k1",
                                                            "training_machine": {"fast_path": card_fast}}
    (tmp_path / "targets" / "k1.json").write_text(json.dumps(card))
    return tmp_path


@pytest.mark.parametrize(("card_fast", "warned"), [(False, True), (True, False), (None, False)])
def test_a_results_folder_that_mixes_paths_gets_one_line(tmp_path, card_fast, warned):
    from reconbench.leaderboard.rerun_paths import mixed_paths_line

    line = mixed_paths_line(_folder(tmp_path, card_fast))
    assert (line is not None) == warned
    if line is not None:
        assert "\n" not in line and line.startswith("1 cell(s) of ")
        assert "t--a--i--s0, attacked on the fast path, target k1 trained on the stock path" in line

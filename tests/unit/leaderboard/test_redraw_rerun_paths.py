"""``leaderboard redraw --rerun-missing`` re-runs the figure's cells without stored candidates through the re-run of
``--verify --rerun`` (``rerun.rerun_checked``): each target trained on the BLAS paths its card and cell call for, each
attack on its cell's path (in a child process where that is not this process's), and the candidates that re-run
wrote are the ones drawn. Tried on a scratch copy of leaderboards/ci with the trainings and attacks stood in for."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.cli import run_cli
from matplotlib.image import imread
from safetensors.torch import save_file

from reconbench import fast_blas
from reconbench.bench.suite import Suite, load_suite
from reconbench.evaluation.pair_figure import read_layout
from reconbench.leaderboard import rerun
from reconbench.leaderboard.figures import FigureData
from reconbench.leaderboard.redraw import missing_candidates
from reconbench.leaderboard.rerun_paths import Trained
from reconbench.leaderboard.submit import board_suite
from reconbench.records import CellRecord

REPO = Path(__file__).resolve().parents[3]
CI = REPO / "leaderboards" / "ci"
#: a candidate equal to its training image draws as an affine image of it, rounded by the board's 256-colour palette
#: (at most 8 levels of 255); any other candidate of a digits target correlates far less with it
MIN_CORRELATION = 0.99


def _digest(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _recipe_text(recipe: Mapping[str, Any]) -> str:
    return json.dumps(dict(recipe), sort_keys=True)


class Trainer:
    """Trains nothing: answers each card's weights sha256 on the ``reproduces`` path, another one elsewhere."""

    def __init__(self, board: Path, reproduces: str) -> None:
        self.reproduces = reproduces
        self.shas = {}
        for card in (board / "targets").glob("*.json"):
            data = json.loads(card.read_text())
            if data.get("recipe") is not None:
                self.shas[_recipe_text(data["recipe"])] = data["weights"]["sha256"]
        self.calls: list[tuple[str, str]] = []

    def __call__(self, recipe: Mapping[str, Any], path: str, staged: Path) -> Trained:
        sha = self.shas[_recipe_text(recipe)]
        self.calls.append((sha, path))
        return Trained(path, sha if path == self.reproduces else "0" * 64, staged)


class Attacks:
    """Stands in for the attacks, in this process and in a child: writes each cell's board record into a results
    folder as a run would, with the target's training images (centred) as its candidates (``problems``: what to report)."""

    def __init__(self, board: Path, problems: list[str] | None = None) -> None:
        self.board, self.problems = board, problems or []
        self.here: list[list[str]] = []
        self.child: list[tuple[list[str], str]] = []

    def write(self, ids: list[str], folder: Path) -> None:
        data = FigureData(self.board, None)
        for cid in ids:
            rec = json.loads((self.board / "cells" / f"{cid}.json").read_text())
            out = folder / str(rec["spec"]["dtype"])
            (out / "cells").mkdir(parents=True, exist_ok=True)
            (out / "cells" / f"{cid}.json").write_text(json.dumps(rec))
            problem, _ = data.problem_card(CellRecord.from_dict(rec))
            work = out / CellRecord.from_dict(rec).work_dir
            work.mkdir(parents=True)
            images = torch.as_tensor(np.asarray(problem.train_images), dtype=torch.float64)
            centred = images - problem.mean_tensor(torch.float64)   # candidates live in the centred space
            save_file({"candidates": centred.contiguous()}, str(work / "candidates.safetensors"))

    def rerun_cells(self, suite: Suite, board: Path, ids: list[str], *, work: Path, **_: Any) -> list[str]:
        self.here.append(ids)
        self.write(ids, work)
        return list(self.problems)

    def in_child(self, suite: Suite, board: Path, ids: list[str], path: str, cache: Path, work: Path,
                 data_root: str | None) -> tuple[list[str], str]:
        self.child.append((ids, path))
        self.write(ids, work)
        return list(self.problems), f"{len(ids)} cell(s) attacked on the {path} path, in a child process"


@pytest.fixture
def board(tmp_path: Path) -> Path:
    out = tmp_path / "ci"
    shutil.copytree(CI, out)
    return out


def _stand_in(monkeypatch: pytest.MonkeyPatch, board: Path, current: str, reproduces: str,
              problems: list[str] | None = None) -> tuple[Trainer, Attacks]:
    trainer, attacks = Trainer(board, reproduces), Attacks(board, problems)
    monkeypatch.setattr(fast_blas, "current_path", lambda: current)
    monkeypatch.setattr(rerun, "train_on_path", lambda *_a: trainer)
    monkeypatch.setattr(rerun, "rerun_cells", attacks.rerun_cells)
    monkeypatch.setattr(rerun, "_attack_in_child", attacks.in_child)
    return trainer, attacks


def _missing(board: Path) -> list[str]:
    return missing_candidates(board_suite(load_suite("ci"), board), board)[1]


def _grey(path: Path) -> np.ndarray:
    return np.asarray(imread(path)[..., 0], dtype=np.float64)


@pytest.mark.parametrize("current", ["stock", "fast"])
def test_the_redraw_reruns_on_the_recorded_paths_and_draws_what_the_rerun_wrote(
        board: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], current: str) -> None:
    missing = _missing(board)
    assert missing   # leaderboards/ci stores the candidates of a sample only
    records = {c: json.loads((board / "cells" / f"{c}.json").read_text()) for c in missing}
    recorded = {fast_blas.path_name(r["provenance"]["blas"]["fast_path"]) for r in records.values()}
    assert recorded == {"stock"}
    # the cards record no path: each target is trained on its cell's path first, then on the other one
    trainer, attacks = _stand_in(monkeypatch, board, current, reproduces="fast")
    code, out, err = run_cli(["leaderboard", "redraw", "ci", "--out", str(board), "--rerun-missing"], capsys)
    assert code == 0, err
    targets = {json.loads((board / "targets" / f"{r['target']['recipe_key']}.json").read_text())["weights"]["sha256"]
               for r in records.values()}
    assert sorted(trainer.calls) == sorted((sha, p) for sha in targets for p in ("stock", "fast"))
    assert out.count("re-run: target ") == len(targets)
    assert out.count("reproduced on the fast path (on the stock path its weights were 0000000000000000)") == len(targets)
    # each attack on the path its cell records: here where that is this process's path, else in a child
    if current == "stock":
        assert attacks.here == [missing] and attacks.child == []
    else:
        assert attacks.here == [] and attacks.child == [(missing, "stock")]
        assert f"re-run: {len(missing)} cell(s) attacked on the stock path, in a child process" in out
    assert f"{len(missing)} of them run again" in out
    # the candidates drawn for the re-run cells are the ones the re-run wrote (the training images themselves, drawn
    # on the display's own scale: equal to the training image's tile up to an affine map and the palette's rounding)
    png = board / "figures" / "reconstructions.png"
    layout = read_layout(png)
    assert layout is not None
    shown = json.loads((board / "results.json").read_text())["figures"]["reconstructions"]["cells"]
    image = _grey(png)
    z = layout.zoom
    checked = 0
    for group, cid in enumerate(shown):
        if cid not in missing:
            continue
        for p in (p for p in layout.pairs if p.group == group):
            assert p.candidate is not None, (cid, p.index)
            (x0, y0, x1, y1), (cx0, cy0, cx1, cy1) = p.train, p.candidate
            cand, train = image[cy0:cy1:z, cx0:cx1:z].ravel(), image[y0:y1:z, x0:x1:z].ravel()
            assert np.corrcoef(cand, train)[0, 1] >= MIN_CORRELATION, (cid, p.index)
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("kind", ["a number", "a child that did not finish"])
def test_a_rerun_that_does_not_reproduce_names_the_cells_and_what_to_check(
        board: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    before = _digest(board)
    missing = _missing(board)
    if kind == "a number":
        bad = missing[1:2]
        problem = f"{bad[0]} [pool] summary.ssim_mean: stored 0.5, re-run 0.25"
    else:   # as rerun._attack_in_child reports it
        bad = missing[1:4]
        problem = f"{', '.join(bad)}: the re-run on the stock path did not finish: the child process failed (x)"
    _stand_in(monkeypatch, board, "stock", reproduces="stock", problems=[problem])
    code, out, err = run_cli(["leaderboard", "redraw", "ci", "--out", str(board), "--rerun-missing"], capsys)
    assert code != 0
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "nothing was redrawn" in line
    assert "attacked on the stock path its cell records" in line and "its card records none" in line
    assert "BLAS path" in line and "machine" in line
    named = line.split("Paths taken:")[1]
    assert [c for c in missing if c in named] == bad
    assert "reproduced on the stock path" in out
    assert _digest(board) == before


def test_a_target_that_is_not_reproduced_names_its_cells(board: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    before = _digest(board)
    missing = _missing(board)
    _stand_in(monkeypatch, board, "stock", reproduces="neither")
    code, out, err = run_cli(["leaderboard", "redraw", "ci", "--out", str(board), "--rerun-missing"], capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "not reproduced: weights sha256 stock path 0000000000000000, fast path 0000000000000000" in out
    assert all(c in err for c in missing)   # every target differs: every cell is named
    assert "trained on the stock path, then on the fast path" in err
    assert _digest(board) == before

"""A sampled cell whose candidates cannot travel (a paper cell's 16 x 1000 CIFAR-10 candidates are about 94 MiB in
float16; forced here by a pack that takes no candidates) still brings back its figure's worth: the pack's records
archive carries the figure pairs of every cell, ``--unpack`` keeps them, ``--publish`` puts those of the figure's
cells on the board, the reconstructions figure is drawn from them and says so, and ``--verify`` re-scores them: it
passes, and fails in one line when one value of them is altered (the board's manifest written again, so that only
the re-score can tell). A cell evaluated at a merge (its runs in groups over slices) takes the same subset there."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch
from _helpers.cli import run_cli_redirected as cli
from _helpers.partial_board import HERE, SLICE_A, at_commit

from reconbench.bench import slice_pack
from reconbench.bench.runner import load_cells
from reconbench.bench.slice_pack import COMMIT_ENV
from reconbench.bench.suite import load_suite
from reconbench.leaderboard.figure_pairs import (
    BOARD_FOLDER,
    PAIRS_DTYPE,
    PAIRS_FILE,
    FigurePairs,
    read_pairs,
    rescore_pairs,
    shown_images,
)
from reconbench.leaderboard.manifest import write_manifest
from reconbench.records import CellRecord

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "benchmarks" / "gpu" / "tiny.toml"


def _no_candidates(out: Path, cells: object, limit: int = 0) -> tuple[None, list[str]]:
    return None, []   # as if every sampled cell's float16 candidates passed a pack file


def _slice(root: Path, mp: pytest.MonkeyPatch, suite: Path, name: str, *extra: str) -> Path:
    """One slice on a "device" without git metadata, its sampled candidates too large to travel: the pack."""
    at_commit(mp, None)
    mp.setenv(COMMIT_ENV, SLICE_A)
    mp.setattr(slice_pack, "_candidates_file", _no_candidates)
    mp.setattr(slice_pack, "_LEFT_SAID", set())
    pack = root / f"pack-{name}"
    code, out, err = cli(["bench", str(suite), "--device", "cpu", "--deadline", "600", "--pack", str(pack), "--out",
                          str(root / f"device-{name}"), "--cache", str(root / f"cache-{name}"), "-q", *extra])
    assert code == 0, out + err
    mp.delenv(COMMIT_ENV)
    return pack


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path, Path]:
    """tiny.toml as one slice whose candidates stayed on the device, merged here and published: pack, results, board."""
    with pytest.MonkeyPatch.context() as mp:
        pack = _slice(tmp_path, mp, TINY, "a")
        local, board = tmp_path / "local", tmp_path / "lb"
        code, out, err = cli(["bench", str(TINY), "--unpack", str(pack), "--out", str(local)])
        assert code == 0, out + err
        at_commit(mp, HERE)
        code, out, err = cli(["leaderboard", str(TINY), "--results", str(local), "--publish", "--out", str(board)])
        assert code == 0, out + err
    return pack, local, board


def test_the_figure_pairs_travel_are_kept_published_and_drawn_from(published):
    pack, local, board = published
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["candidates"]["cells"] == []   # no candidates travelled
    (archive,) = [pack / f["name"] for f in manifest["files"] if f["name"].startswith("records-")]
    with tarfile.open(archive) as tar:
        archived = sorted(n for n in tar.getnames() if n.startswith("pairs/"))
    assert archived == sorted(f"pairs/{cid}.safetensors" for cid in manifest["cells"]) and len(archived) == 3
    suite = load_suite(str(TINY))
    for cid, raw in load_cells(local).items():   # --unpack keeps every cell's pairs; no candidates came back
        work = local / "work" / cid
        assert not (work / "candidates.safetensors").exists()
        pairs = read_pairs(work / PAIRS_FILE)
        rec = CellRecord.from_dict(raw)
        assert pairs.cell_id == cid and pairs.shown == shown_images(rec, suite.leaderboard.sample_images)
        assert pairs.best.dtype == PAIRS_DTYPE and pairs.nbytes < 16 * 1024   # four 8x8 digits: a few KB
        for j, i in enumerate(pairs.shown):   # which training image and which candidate each is
            assert (pairs.best_ids[j] if pairs.members[j] else None) == rec.per_image[i].best_candidate
    results = json.loads((board / "results.json").read_text())
    figure = results["figures"]["reconstructions"]
    assert figure["file"] == "figures/reconstructions.png" and results["stored_candidates"] == []
    kept = sorted(p.name for p in (board / BOARD_FOLDER).iterdir())
    assert kept == [f"{cid}.safetensors" for cid in figure["cells"]]   # the figure's cells, no other
    assert "Drawn from a subset of matched pairs in float16" in figure["caption"]
    assert all(cid in figure["caption"] for cid in figure["cells"])
    assert (board / BOARD_FOLDER / kept[0]).read_bytes() == (local / "work" / figure["cells"][0] / PAIRS_FILE
                                                             ).read_bytes()
    # `redraw` draws it again from the pairs the board keeps, without running the cell again
    code, out, err = cli(["leaderboard", "redraw", str(TINY), "--out", str(board)])
    assert code == 0 and "redrawn from 1 cell(s)" in out, out + err
    assert cli(["leaderboard", str(TINY), "--out", str(board), "--verify"])[0] == 0


def test_verify_rescores_the_pairs_and_fails_in_one_line_on_an_altered_value(published):
    _, _, board = published
    code, out, err = cli(["leaderboard", str(TINY), "--out", str(board), "--verify"])
    assert code == 0, out + err
    assert "1 through the figure pairs re-scored from float16" in out
    assert "figure pairs: 1 cell(s) kept in float16, 16 per-image score(s) re-scored from them" in out

    (path,) = (board / BOARD_FOLDER).iterdir()
    pairs = read_pairs(path)
    j = next(j for j, m in enumerate(pairs.members) if m > 0)   # the first shown image a candidate matched
    best, averaged = pairs.best.clone(), pairs.averaged.clone()
    image = best[j] if pairs.members[j] == 1 else averaged[sum(m > 1 for m in pairs.members[:j])]
    spread = float(image.float().max() - image.float().min())
    image.view(-1)[5] += 2 * spread   # one value of the reconstruction the figure draws
    altered = FigurePairs(pairs.cell_id, pairs.shown, pairs.best_ids, pairs.members, best, averaged)
    path.write_bytes(altered.to_bytes())
    code, out, err = cli(["leaderboard", str(TINY), "--out", str(board), "--verify"])
    assert code != 0 and "differ from its MANIFEST.json" in err   # the manifest binds the file first
    write_manifest(board)   # as a forger would: now only the re-score can tell
    code, out, err = cli(["leaderboard", str(TINY), "--out", str(board), "--verify"])
    assert code != 0
    lines = [ln for ln in out.splitlines() if ln.startswith("MISMATCH")]
    assert len(lines) == 1, out   # one line: the pair, the scores that moved, the tolerance, the fix
    assert f"the figure pair of training image {pairs.shown[j]} of {pairs.cell_id} re-scores ssim " in lines[0]
    assert "from its float16 subset, beyond float16's rounding" in lines[0]
    assert err.strip().count("\n") == 0 and "not reproduced" in err


def _split_suite(tmp_path: Path) -> Path:
    """tiny.toml with one cell of three search runs, advanced one at a time (``max_batch`` 1): a group of one run is
    its unsplit run bit for bit."""
    text = TINY.read_text().replace("search_runs = 2", "search_runs = 3")
    text = text.replace('inits = ["gaussian", "uniform", "partition"]', 'inits = ["gaussian"]')
    text = text.replace("config = { steps = 100 }", "config = { steps = 100, max_batch = 1 }")
    path = tmp_path / "split.toml"
    path.write_text(text)
    return path


def test_a_cell_evaluated_at_a_merge_takes_the_pairs_a_whole_slice_brings(tmp_path):
    suite = _split_suite(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        whole = _slice(tmp_path, mp, suite, "whole")
        code, out, err = cli(["bench", str(suite), "--unpack", str(whole), "--out", str(tmp_path / "one")])
        assert code == 0, out + err
        local = tmp_path / "local"
        for i in range(3):   # a group of one run per slice, each on a bare machine; the last merge evaluates it
            ledger = ["--finished", str(local / "finished.json")] if i else []
            pack = _slice(tmp_path, mp, suite, f"g{i}", "--runs-per-slice", "1", *ledger)
            assert json.loads((pack / "manifest.json").read_text())["cells"] == []
            code, out, err = cli(["bench", str(suite), "--unpack", str(pack), "--out", str(local)])
            assert code == 0, out + err
    (cid,) = load_cells(local)
    merged = local / "work" / cid / PAIRS_FILE
    here, there = read_pairs(merged), read_pairs(tmp_path / "one" / "work" / cid / PAIRS_FILE)
    assert (here.shown, here.best_ids, here.members) == (there.shown, there.best_ids, there.members)
    assert torch.equal(here.best, there.best) and torch.equal(here.averaged, there.averaged)
    rec = CellRecord.from_dict(load_cells(local)[cid])
    from reconbench.leaderboard.figures import FigureData

    problem, _ = FigureData(local, None).problem_card(rec)
    problems, compared = rescore_pairs(problem, read_pairs(merged), rec, 4, str(merged))
    assert problems == [] and compared > 0


def test_a_suite_asking_for_figure_pairs_keeps_them_for_every_figure_cell_without_candidates(tmp_path):
    """``[leaderboard] figure_pairs = true`` (paper.toml's): a figure cell whose full candidates are at hand but not
    stored on the board keeps its pairs too, and ``--verify`` fails in one line when they are gone."""
    suite = tmp_path / "pairs.toml"
    suite.write_text(TINY.read_text().replace("sample_images = 4", "sample_images = 4\nfigure_pairs = true\n"
                                                                   "candidates_max_bytes = 0"))
    with pytest.MonkeyPatch.context() as mp:
        at_commit(mp, None)
        mp.setenv(COMMIT_ENV, SLICE_A)
        pack = tmp_path / "pack"
        code, out, err = cli(["bench", str(suite), "--device", "cpu", "--deadline", "600", "--pack", str(pack),
                              "--out", str(tmp_path / "device"), "--cache", str(tmp_path / "cache"), "-q"])
        assert code == 0, out + err
        mp.delenv(COMMIT_ENV)
        assert json.loads((pack / "manifest.json").read_text())["candidates"]["cells"] == []   # 0 bytes: none travel
        local, board = tmp_path / "local", tmp_path / "lb"
        assert cli(["bench", str(suite), "--unpack", str(pack), "--out", str(local)])[0] == 0
        for cid in load_cells(local):   # as if their candidates had come back (a cell evaluated at a merge)
            work = local / "work" / cid
            (tmp_path / "device" / "work" / cid / "candidates.safetensors").replace(work / "candidates.safetensors")
            (work / PAIRS_FILE).unlink()
        at_commit(mp, HERE)
        code, out, err = cli(["leaderboard", str(suite), "--results", str(local), "--publish", "--out", str(board)])
        assert code == 0, out + err
    results = json.loads((board / "results.json").read_text())
    figure = results["figures"]["reconstructions"]
    assert results["stored_candidates"] == [] and "Drawn from a subset" not in figure["caption"]   # drawn in full
    (kept,) = (board / BOARD_FOLDER).iterdir()
    assert kept.name == f"{figure['cells'][0]}.safetensors"
    code, out, err = cli(["leaderboard", str(suite), "--out", str(board), "--verify"])
    assert code == 0 and "1 through the figure pairs re-scored from float16" in out, out + err
    kept.unlink()
    (board / BOARD_FOLDER).rmdir()
    write_manifest(board)
    code, out, err = cli(["leaderboard", str(suite), "--out", str(board), "--verify"])
    lines = [ln for ln in out.splitlines() if ln.startswith("MISMATCH")]
    assert code != 0 and len(lines) == 1 and f"no figure pairs of {figure['cells'][0]}" in lines[0], out + err


def _board_cell(board: Path, local: Path) -> tuple[Path, FigurePairs, CellRecord, object]:
    """The board's one kept figure-pairs file, read, its cell's record and training problem."""
    from reconbench.leaderboard.figures import FigureData

    (path,) = (board / BOARD_FOLDER).iterdir()
    pairs = read_pairs(path)
    rec = CellRecord.from_dict(load_cells(local)[pairs.cell_id])
    problem, _ = FigureData(local, None).problem_card(rec)
    return path, pairs, rec, problem


def test_a_pair_swapped_for_the_nearest_other_candidate_of_its_cell_fails_the_rescore(published, tmp_path):
    """The hardest swap of each shown image: its matched candidate replaced by the candidate of the same cell nearest
    to it (its id unchanged, so only the re-score can tell); each must fail, while the honest subset passes."""
    from safetensors.torch import load_file

    _, local, board = published
    path, pairs, rec, problem = _board_cell(board, local)
    assert rescore_pairs(problem, pairs, rec, 4, str(path)) == ([], 16)
    pooled = load_file(str(tmp_path / "device-a" / "work" / pairs.cell_id / "candidates.safetensors"))["candidates"]
    matched = [j for j, m in enumerate(pairs.members) if m == 1]
    assert matched   # tiny.toml's cells average no candidates: a swapped best candidate is what the figure draws
    for j in matched:
        own = pooled[pairs.best_ids[j]].double()
        assert torch.equal(own.half(), pairs.best[j])   # the subset holds the matched candidate itself
        others = [c for c in range(len(pooled)) if c != pairs.best_ids[j]]
        nearest = min(others, key=lambda c: float((pooled[c].double() - own).norm()))
        best = pairs.best.clone()
        best[j] = pooled[nearest].to(PAIRS_DTYPE)
        swapped = FigurePairs(pairs.cell_id, pairs.shown, pairs.best_ids, pairs.members, best, pairs.averaged)
        problems, _ = rescore_pairs(problem, swapped, rec, 4, str(path))
        assert len(problems) == 1 and f"training image {pairs.shown[j]} of {pairs.cell_id} re-scores" in problems[0]


def test_figure_pairs_of_another_cell_fail_even_where_their_images_and_ids_agree(published):
    _, local, board = published
    path, pairs, rec, problem = _board_cell(board, local)
    other = FigurePairs("another-cell", pairs.shown, pairs.best_ids, pairs.members, pairs.best, pairs.averaged)
    problems, compared = rescore_pairs(problem, other, rec, 4, str(path))
    assert compared == 0 and len(problems) == 1
    assert f"are figure pairs of another-cell, not of {pairs.cell_id}" in problems[0]


def test_kept_figure_pairs_are_taken_again_when_the_rows_show_other_images(published, tmp_path):
    """A cell's ``work/<cell>/figure_pairs.safetensors`` newer than its candidates is kept only while it holds what
    the figure shows: taken again for fewer images (another ``sample_images``), not returned as it was."""
    from reconbench.leaderboard.figure_pairs import pairs_from_results

    device = tmp_path / "device-a"
    cid = sorted(load_cells(device))[0]
    rec = CellRecord.from_dict(load_cells(device)[cid])
    four = read_pairs(pairs_from_results(device, rec, 4))
    assert four.shown == shown_images(rec, 4)
    two = read_pairs(pairs_from_results(device, rec, 2))
    assert two.shown == shown_images(rec, 2) == four.shown[:2]
    assert torch.equal(two.best, four.best[:2])


def test_a_reconstructions_figure_that_fails_to_draw_keeps_no_figure_pairs(tmp_path):
    """The figure's drawing fails after its cells' pairs were read: the board records the failed figure and keeps no
    figure pairs, which --verify would otherwise report as pairs of a cell the figure does not show."""
    from reconbench.evaluation import pair_figure

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no renderer")

    with pytest.MonkeyPatch.context() as mp:
        pack = _slice(tmp_path, mp, TINY, "a")
        local, board = tmp_path / "local", tmp_path / "lb"
        assert cli(["bench", str(TINY), "--unpack", str(pack), "--out", str(local)])[0] == 0
        at_commit(mp, HERE)
        mp.setattr(pair_figure, "draw_pairs", broken)
        code, out, err = cli(["leaderboard", str(TINY), "--results", str(local), "--publish", "--out", str(board)])
        assert code == 0, out + err
    figure = json.loads((board / "results.json").read_text())["figures"]["reconstructions"]
    assert figure["failed"] and "no renderer" in figure["reason"]
    assert not (board / BOARD_FOLDER).is_dir() or not any((board / BOARD_FOLDER).iterdir())
    code, out, err = cli(["leaderboard", str(TINY), "--out", str(board), "--verify"])
    assert "the reconstructions figure does not show" not in out + err


def test_a_cell_re_run_and_checked_through_its_pairs_is_counted_once(published):
    """``--verify --rerun`` of the figure's cell re-derives it in full: the closing line counts it as re-run, not a
    second time through its figure pairs, and the other cells through hashes and seals."""
    _, _, board = published
    cid = json.loads((board / "results.json").read_text())["figures"]["reconstructions"]["cells"][0]
    code, out, err = cli(["leaderboard", str(TINY), "--out", str(board), "--verify", "--rerun", cid])
    assert code == 0, out + err
    assert ("checked 3 cell(s): 0 re-scored from stored candidates, 1 re-run from their recipe and seed, 2 through "
            "hashes and seals only") in out, out


def test_a_pair_too_flat_for_float16_is_said_in_one_line_and_not_compared(published):
    """A shown image's candidate replaced by an image of 1e-4 contrast around grey: float16 cannot bound its SSIMs
    (min-max scaled), so the re-score does not compare them and says so in one line (the file's bytes are the
    manifest's to bind), never passing them at a tolerance wide enough to hold anything; its correlation and distance
    (centred on the data mean, not flat) are still compared, and catch the swap."""
    _, local, board = published
    path, pairs, rec, problem = _board_cell(board, local)
    matched = [j for j, m in enumerate(pairs.members) if m == 1]
    j = matched[0]
    best = pairs.best.clone()
    grey = 0.5 * (1 + 1e-4 * torch.linspace(-0.5, 0.5, best[j].numel(), dtype=torch.float64)).reshape(best[j].shape)
    best[j] = (grey - problem.mean_tensor(torch.float64)).to(PAIRS_DTYPE)
    flat = FigurePairs(pairs.cell_id, pairs.shown, pairs.best_ids, pairs.members, best, pairs.averaged)
    unscored: list[str] = []
    problems, compared = rescore_pairs(problem, flat, rec, 4, str(path), unscored)
    assert len(unscored) == 1 and f"training image {pairs.shown[j]} of {pairs.cell_id} is too flat" in unscored[0]
    assert "re-score its ssim, ssim_standard (" in unscored[0] and compared == 14
    assert len(problems) == 1 and "corr" in problems[0] and "ssim" not in problems[0]

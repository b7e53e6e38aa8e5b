"""docs/claims.md: every claim is wired to a comparison and its null, every number on the page matches the cells it
comes from, the verdict rules decide as written, and the committed page is what the generator writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from reconbench.bench.cells import CELL_FORMAT, expand
from reconbench.bench.suite import load_suite
from reconbench.leaderboard import claims as C

REPO = Path(__file__).resolve().parents[1]
SUITES = ("claims-a", "claims-b")


def test_every_claim_has_its_comparison_and_null_in_the_suites():
    suites = {name: load_suite(name) for name in (*SUITES, C.GPU_SUITE)}
    assert {c.paper for c in C.CLAIMS} == {C.HAIM, C.BUZAGLO, C.RUNKEL}
    for claim in C.CLAIMS:
        if claim.kind == "not_measurable":
            assert claim.needs
            continue
        for name in (claim.suite, C.GPU_SUITE):  # the GPU suite repeats every comparison under the same name
            suite = suites[name]
            comp = C._comparison(suite, claim.comparison)
            null = C._comparison(suite, claim.null)
            assert {v.target for v in comp.variants} <= {v.target for v in null.variants}, claim.id
            assert all(suite.attacks[a].config.get("steps") == 0 for a in null.attacks)
            assert [suite.inits[i].regime for i in null.inits] == ["partition"]
            for label in (claim.attack, claim.init, *claim.contrast):
                assert label is None or label in (*comp.attacks, *comp.inits), (claim.id, label)


def write_cells(folder: Path, suite_name: str, rng: np.random.Generator) -> dict[str, dict]:
    """A results folder holding one finished cell JSON of the claims suite per planned cell, with random numbers."""
    suite = load_suite(suite_name)
    (folder / "cells").mkdir(parents=True)
    written = {}
    for cell in expand(suite):
        n = cell.recipe.problem.n_per_class * (cell.recipe.problem.num_classes or 2)
        summary = {C.HEADLINE_KEY: int(rng.integers(0, n + 1)), "n_train": n,
                   "init_copy_share": float(rng.uniform())}
        rec = {"format": CELL_FORMAT, "cell_id": cell.cell_id, "cell_key": cell.key(suite), "status": "ok",
               "spec": {"dtype": suite.dtype}, "target": {"name": cell.target, "n_train": n},
               "attack": {"label": cell.attack.label, "name": cell.attack.attack},
               "init": {"label": cell.init.label, "regime": cell.init.regime, "is_oracle": False},
               "selections": {"pool": {"summary": summary}}}
        (folder / "cells" / f"{cell.cell_id}.json").write_text(json.dumps(rec))
        written[cell.cell_id] = summary
    return written


def expected_text(values: list[float], share: bool, upper: float = 1.0) -> str:
    """Mean and 95% Student-t interval, computed here with numpy and scipy.stats.t.interval, clipped to what the
    measure can take: [0, 1] for a share, [0, n] (``upper``) for a count."""
    f = (lambda x: f"{x:.2f}") if share else (lambda x: f"{x:.1f}")
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        return f"{f(v[0])} (1 seed)"
    lo, hi = stats.t.interval(0.95, v.size - 1, loc=v.mean(), scale=v.std(ddof=1) / np.sqrt(v.size))
    lo, hi = max(lo, 0.0), min(hi, 1.0 if share else upper)
    return f"{f(v.mean())} [{f(lo)}, {f(hi)}] ({v.size} seeds)"


def row_of(page: str, claim_id: str) -> str:
    return next(line for line in page.splitlines() if line.startswith(f"| `{claim_id}`"))


def test_page_numbers_match_the_cells(tmp_path):
    rng = np.random.default_rng(7)
    cells = {name: write_cells(tmp_path / name, name, rng) for name in SUITES}
    page = C.generate({name: tmp_path / name for name in SUITES}, root=tmp_path)
    suites = {name: load_suite(name) for name in SUITES}
    checked = 0
    for claim in C.CLAIMS:
        row = row_of(page, claim.id)
        if claim.kind == "not_measurable":
            assert C.NOT_MEASURABLE in row
            continue
        suite, written = suites[claim.suite], cells[claim.suite]
        comp = C._comparison(suite, claim.comparison)
        null = C._comparison(suite, claim.null)
        share = claim.measure == "share"
        specs = C._point_specs(claim, comp)
        specs += [(a, specs[0][1], a, specs[0][3]) for a in claim.contrast]
        numbers = row.split(" | ")[3] + " | " + row.split(" | ")[4]  # the "our number" and "null" columns
        expected = []
        for label, target, attack, init in specs:
            recs = [written[f"{target}--{attack}--{init}--s{s}"] for s in comp.seeds]
            scale = [(1 / r["n_train"]) if share else 1.0 for r in recs]
            n_max = max(r["n_train"] for r in recs)
            value = expected_text([r[C.HEADLINE_KEY] * k for r, k in zip(recs, scale, strict=True)], share, n_max)
            assert f"{label}: {value}" in numbers, (claim.id, label, value)
            nrecs = [written[f"{target}--{a}--{i}--s{s}"] for a in null.attacks for i in null.inits
                     for s in null.seeds]
            null_value = expected_text([r[C.HEADLINE_KEY] * scale[0] for r in nrecs], share,
                                       max(r["n_train"] for r in nrecs))
            assert null_value in numbers
            expected += [label, value, null_value]
            if claim.kind == "stays_at_start":
                copies = expected_text([r["init_copy_share"] for r in recs], True)
                assert f"init copies {copies}" in numbers
                expected.append(copies)
            checked += 1
        assert C.NOT_RUN not in row
        # every number in the two columns is one of those computed here (labels such as "n_per_class = 5" aside)
        for text in sorted(expected, key=len, reverse=True):
            numbers = numbers.replace(text, "")
        assert not re.search(r"\d", numbers), (claim.id, numbers)
    assert checked >= 30


def test_counts_agree_with_the_leaderboard_comparison_tables(tmp_path):
    """The page's means are the leaderboard's: the same cells, the same headline, averaged over the same seeds."""
    from reconbench.leaderboard import tables

    rng = np.random.default_rng(11)
    write_cells(tmp_path / "claims-a", "claims-a", rng)
    suite = load_suite("claims-a")
    results = C.measure_claims({"claims-a": tmp_path / "claims-a", "claims-b": tmp_path / "none"})
    pub = tables.collect(suite, tmp_path / "claims-a")
    columns = tables.resolve_columns(suite, pub.ok())
    board = tables.comparison_rows(suite, pub, columns)
    compared = 0
    for res in results:
        c = res.claim
        if c.suite != "claims-a" or c.measure != "count":
            continue
        table = board[c.comparison]
        metric = table["metrics"][0]
        row = next(r for r in table["rows"] if r["selection"] == C.SELECTION and r["attack"] == (c.attack or
                   r["attack"]) and r["init"] == (c.init or r["init"]))
        for point, entry in zip(res.points, row["values"], strict=True):
            assert point.value.mean == pytest.approx(entry[metric]["mean"]), (c.id, point.label)
            compared += 1
    assert compared >= 10


def iv(*values: float) -> C.Interval:
    return C.Interval(list(values))


def point(value: C.Interval, null: C.Interval, copies: C.Interval | None = None) -> C.Point:
    return C.Point("p", [], value, null, copies or iv())


def claim_of(kind: str) -> C.Claim:
    return C.Claim("x", C.HAIM, "s", "e", kind)  # type: ignore[arg-type]


def test_verdict_rules():
    null = iv(2.0)
    high, low, wide = iv(8, 9, 10), iv(1, 2, 2), iv(0, 5, 10)
    assert C.verdict(claim_of("above_null"), [point(high, null)])[0] == C.REPRODUCED
    assert C.verdict(claim_of("above_null"), [point(high, null), point(wide, null)])[0] == C.NOT_REPRODUCED
    assert C.verdict(claim_of("at_null"), [point(low, null)])[0] == C.REPRODUCED
    assert C.verdict(claim_of("at_null"), [point(high, null)])[0] == C.CONTRADICTED
    assert C.verdict(claim_of("increasing"), [point(low, null), point(high, null)])[0] == C.REPRODUCED
    assert C.verdict(claim_of("decreasing"), [point(low, null), point(high, null)])[0] == C.CONTRADICTED
    assert C.verdict(claim_of("decreasing"), [point(wide, null), point(high, null)])[0] == C.NOT_REPRODUCED
    many, few = iv(0.8, 0.9, 0.85), iv(0.1, 0.2, 0.15)
    assert C.verdict(claim_of("stays_at_start"), [point(low, null, many)])[0] == C.REPRODUCED
    assert C.verdict(claim_of("stays_at_start"), [point(high, null, few)])[0] == C.CONTRADICTED
    assert C.verdict(claim_of("stays_at_start"), [point(high, null, many)])[0] == C.NOT_REPRODUCED
    assert C.verdict(claim_of("above_null"), [point(iv(), null)])[0] == C.NOT_RUN
    assert C.verdict(claim_of("above_null"), [point(high, iv())])[0] == C.NOT_RUN
    assert C.verdict(claim_of("above_null"), [point(iv(9.0), null)])[0] == C.NOT_REPRODUCED  # one seed
    # the Student-t interval against a hand computation: t(0.975, 2) = 4.302653
    lo, hi = iv(8, 9, 10).bounds  # type: ignore[misc]
    assert (lo, hi) == pytest.approx((9 - 4.302653 / 3**0.5, 9 + 4.302653 / 3**0.5), rel=1e-6)


def test_without_results_every_row_is_not_yet_run_with_its_setup(tmp_path):
    page = C.generate({name: tmp_path / "missing" for name in SUITES}, root=tmp_path)
    for claim in C.CLAIMS:
        row = row_of(page, claim.id)
        if claim.kind != "not_measurable":
            assert C.NOT_RUN in row and f"`{claim.suite}` / `{claim.comparison}`" in row and "seeds" in row


def test_gpu_page_reads_every_claim_from_the_gpu_suite(tmp_path):
    page = C.generate({C.GPU_SUITE: tmp_path / "missing"}, root=tmp_path, gpu=True)
    for claim in C.CLAIMS:
        row = row_of(page, claim.id)
        if claim.kind != "not_measurable":
            assert f"`{C.GPU_SUITE}` / `{claim.comparison}`" in row and C.NOT_RUN in row
    assert "n = 500 (250 per class)" in row_of(page, "runkel-kkt-partition")


def test_committed_page_is_what_the_generator_writes(monkeypatch):
    monkeypatch.chdir(REPO)
    assert (REPO / "docs" / "claims.md").read_text() == C.generate(root=REPO), (
        "docs/claims.md is out of date: run `python -m reconbench.leaderboard.claims`")


@pytest.mark.parametrize("attack,task", [("haim_binary_kkt", "binary"), ("multiclass_kkt", "multiclass"),
                                         ("general_loss_wd", "regression")])
def test_a_null_cell_scores_the_held_out_images_unchanged(attack, task, tmp_path):
    """The `--null` blocks' 0-step attack returns its partition start: 2n held-out images, each its own start."""
    import torch
    from safetensors.torch import load_file

    from reconbench.runs import RunSpec, run_attack
    from reconbench.targets.cache import get_or_train
    from reconbench.targets.recipe import TargetRecipe

    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": task, "n_per_class": 3, "num_classes": 3 if task == "multiclass"
                    else None, "n_test_per_class": 5},
        "model": {"widths": [16]}, "train": {"steps": 30, "lr": 0.05, "weight_decay": 1e-3, "eval_every": 1000}})
    card = get_or_train(recipe, quiet=True)
    spec = RunSpec(attack=attack, attack_config={"steps": 0}, init="partition", search_runs=1, seed=0)
    result = run_attack(card, spec, tmp_path / "res", quiet=True)
    summary = result["evaluation"]["summary"]
    n = summary["n_train"]
    assert result["runs"][0]["steps"] == 0 and summary["n_candidates"] == 2 * n
    assert summary["init_copy_share"] == 1.0
    pooled = load_file(str(tmp_path / "res" / "candidates.safetensors"))
    decoys = card.problem().x_decoy(pooled["candidates"].dtype).reshape(-1, pooled["candidates"][0].numel())
    flat = pooled["candidates"].reshape(len(pooled["candidates"]), -1)
    # every candidate is one of the held-out decoy images, exactly
    assert torch.cdist(flat, decoys).min(dim=1).values.max() < 1e-6

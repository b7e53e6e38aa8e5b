"""The precision-cpu board (reconbench/bench/suites/precision-cpu.toml): the suite runs each KKT attack in float64
and float32 on cpu-mini's targets, and the Precision A/B section (reconbench/leaderboard/precision_ab.py) puts each
float32 cell beside its float64 twin. The comparison is checked on hand-made records against numbers worked out
here: the null's widths, the Student t interval over seeds, the seconds summed."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
import tomllib
from _helpers.recordkit import board_results, cell_record, selection, write_results

from reconbench.bench import entries
from reconbench.bench.cells import Cell, expand
from reconbench.bench.suite import Suite, load_suite
from reconbench.leaderboard.precision_ab import AGREE, ab_groups, ab_lines, ab_pairs
from reconbench.records import AttackInfo, CellRecord

KKT = {"haim_binary_kkt": "mnist-binary", "multiclass_kkt": "mnist-multiclass", "general_loss_wd": "mnist-regression-wd"}
#: Student's t quantile at 97.5% for 2 degrees of freedom (3 seeds), in closed form: for nu = 2 the distribution
#: function is 1/2 + t / (2 sqrt(t^2 + 2)), so F(t) = 0.975 gives t / sqrt(t^2 + 2) = 0.95, t = sqrt(2 / (1/0.95^2 - 1))
T_975_2DF = math.sqrt(2.0 / (1.0 / 0.95**2 - 1.0))


@pytest.fixture(scope="module")
def suite() -> Suite:
    return load_suite("precision-cpu")


def _record(cell: Cell, suite: Suite, reconstructed: float, calibrated: float, *, null_min: float = 2.0,
            null_mean: float = 3.0, null_max: float = 5.0, cal_null_max: float = 0.0, seconds: float = 10.0
            ) -> CellRecord:
    dtype = cell.attack.dtype or suite.dtype
    spread = {"reconstructed": {"mean": null_mean, "min": null_min, "max": null_max},
              "reconstructed_calibrated": {"mean": 0.0, "min": 0.0, "max": cal_null_max}}
    pool = selection({"reconstructed": reconstructed, "reconstructed_calibrated": calibrated, "n_train": 10},
                     null_spread=spread)
    return cell_record(cell, suite, {"pool": pool}, dtype=dtype, wall_seconds=seconds + 2.0, attack_seconds=seconds,
                       cpu_seconds=seconds + 1.0)


def _kkt_cells(suite: Suite) -> list[Cell]:
    return [c for c in expand(suite) if c.attack.attack in KKT]


# -- the suite ------------------------------------------------------------------------------------------------------
def test_each_kkt_attack_runs_in_both_precisions_on_cpu_minis_targets_with_the_same_everything_else(suite):
    mini = {(c.target, c.seed): c.recipe.key() for c in expand(load_suite("cpu-mini"))}
    cells = _kkt_cells(suite)
    assert len(cells) == 3 * 2 * 3 and set(suite.seeds) == {0, 1, 2}
    for attack, target in KKT.items():
        mine = [c for c in cells if c.attack.attack == attack]
        assert {c.target for c in mine} == {target}
        assert sorted((c.attack.dtype, c.seed) for c in mine) == sorted(
            (d, s) for d in ("float32", "float64") for s in (0, 1, 2))
        f64 = [c for c in mine if c.attack.dtype == "float64"]
        f32 = [c for c in mine if c.attack.dtype == "float32"]
        for a, b in zip(sorted(f64, key=lambda c: c.seed), sorted(f32, key=lambda c: c.seed), strict=True):
            assert (a.attack.config, a.attack.search_runs, a.attack.candidates, a.init, a.recipe) == \
                   (b.attack.config, b.attack.search_runs, b.attack.candidates, b.init, b.recipe)
            assert a.key(suite) != b.key(suite)   # the precision is part of what determines a cell's numbers
        for c in mine:   # the same recipe as cpu-mini's: its cached targets serve, and no recipe changes
            assert c.recipe.key() == mini[(c.target, c.seed)], c.cell_id
        # cpu-mini's attack options, so the float32 cells are the cells cpu-mini runs
        assert mine[0].attack.config == load_suite("cpu-mini").attacks[attack].config


def test_the_suite_calibrates_against_the_data_prior_and_states_its_budget(suite):
    raw = tomllib.loads(suite.path.read_text())
    assert raw["protocol"]["prior_draws"] == 19 and suite.device == "cpu"
    prior = [c for c in expand(suite) if c.attack.attack == "data_prior"]
    assert {(c.target, c.seed) for c in prior} == {(t, s) for t in KKT.values() for s in (0, 1, 2)}
    header = suite.path.read_text().split("[suite]")[0]
    assert re.search(r"at most 8 minutes of one core", header)


# -- the comparison ---------------------------------------------------------------------------------------------------
def test_pairs_form_per_seed_and_agree_exactly_within_the_larger_null_range(suite):
    cells = _kkt_cells(suite)
    records = {c.cell_id: _record(c, suite, 6.0, 1.0) for c in cells}
    pairs = ab_pairs(records)
    assert len(pairs) == 9
    for p in pairs:
        assert "-f64--" in p.reference and p.other == p.reference.replace("-f64--", "-f32--")
        assert p.other_precision == "float32" and p.agree is True
    # the null's excursion is its largest draw minus its mean (5 - 3 = 2; the least, 2, plays no part, as a published
    # board does not keep it): a shift of 2 agrees, 2.5 does not
    one = next(c for c in cells if c.attack.label == "haim_binary_kkt-f32" and c.seed == 1)
    for shift, agree in ((2.0, True), (-2.0, True), (2.5, False), (-2.5, False)):
        records[one.cell_id] = _record(one, suite, 6.0 + shift, 1.0)
        (pair,) = [p for p in ab_pairs(records) if p.other == one.cell_id]
        assert pair.values["reconstructed"].tolerance == 2.0 and pair.agree is agree
    # the larger of the two cells' excursions is the tolerance
    records[one.cell_id] = _record(one, suite, 10.0, 1.0, null_min=0.0, null_max=7.0)
    (pair,) = [p for p in ab_pairs(records) if p.other == one.cell_id]
    assert pair.values["reconstructed"].tolerance == 4.0 and pair.agree is True
    # a calibrated count moved by one where the null never reached one disagrees
    records[one.cell_id] = _record(one, suite, 6.0, 0.0)
    (pair,) = [p for p in ab_pairs(records) if p.other == one.cell_id]
    assert pair.values["reconstructed_calibrated"].agree is False and pair.agree is False


def test_cells_differing_in_more_than_precision_or_failed_are_not_paired(suite):
    cells = [c for c in _kkt_cells(suite) if c.attack.attack == "haim_binary_kkt" and c.seed == 0]
    f64, f32 = sorted(cells, key=lambda c: c.attack.dtype != "float64")
    other_steps = dataclasses.replace(_record(f32, suite, 6.0, 1.0), attack=AttackInfo.written(
        label=f32.attack.label, name=f32.attack.attack, config={"steps": 10}))
    assert ab_pairs({f64.cell_id: _record(f64, suite, 6.0, 1.0), f32.cell_id: other_steps}) == []
    failed = cell_record(f32, suite, {"pool": selection({"reconstructed": 1})}, dtype="float32", status="failed")
    assert ab_pairs({f64.cell_id: _record(f64, suite, 6.0, 1.0), f32.cell_id: failed}) == []
    both64 = cell_record(f32, suite, {"pool": selection({"reconstructed": 1})}, dtype="float64")
    assert ab_pairs({f64.cell_id: _record(f64, suite, 6.0, 1.0), f32.cell_id: both64}) == []


def test_a_group_summarises_its_seeds_with_the_t_interval_the_null_and_the_seconds(suite):
    cells = _kkt_cells(suite)
    values = {0: 3.0, 1: 4.0, 2: 5.0}   # float32's counts; float64 stays at 4
    records = {}
    for c in cells:
        f32 = c.attack.dtype == "float32"
        records[c.cell_id] = _record(c, suite, values[c.seed] if f32 else 4.0, 1.0, null_mean=2.0 + c.seed,
                                     null_max=5.0 + c.seed, seconds=6.0 if f32 else 10.0)
    groups = ab_groups(records)
    assert [(g.target, g.attack) for g in groups] == sorted((t, a) for a, t in KKT.items())
    g = next(g for g in groups if g.attack == "haim_binary_kkt")
    assert (g.reference.precision, g.other.precision) == ("float64", "float32") and len(g.pairs) == 3
    stat = g.other.stats["reconstructed"]
    half = T_975_2DF * 1.0 / math.sqrt(3)   # sd of (3, 4, 5) is 1
    assert stat.mean == 4.0 and stat.ci95 == pytest.approx((4.0 - half, 4.0 + half), rel=1e-12)
    assert g.reference.stats["reconstructed"].ci95 == (4.0, 4.0)
    null = g.other.nulls["reconstructed"]
    assert null is not None and (null.mean, null.max) == (3.0, 7.0)   # mean of 2, 3, 4; largest of 5, 6, 7
    assert (g.reference.attack_seconds, g.reference.wall_seconds) == (30.0, 36.0)
    assert (g.other.attack_seconds, g.other.wall_seconds, g.other.cpu_seconds) == (18.0, 24.0, 21.0)
    assert g.reference.cpu_seconds == 33.0
    assert g.agree is True and g.verdict == f"{AGREE} (3 of 3 seeds)"
    # one seed's calibrated count drops where its null never reached one: the group disagrees and says in how many
    shifted = next(c for c in cells if c.attack.label == "haim_binary_kkt-f32" and c.seed == 2)
    records[shifted.cell_id] = _record(shifted, suite, 5.0, 0.0)
    g = next(g for g in ab_groups(records) if g.attack == "haim_binary_kkt")
    assert g.agree is False and "1 of 3 seeds" in g.verdict and "differ" in g.verdict


def test_a_group_without_a_null_has_no_verdict(suite):
    cells = [c for c in _kkt_cells(suite) if c.attack.attack == "multiclass_kkt"]
    records = {c.cell_id: cell_record(c, suite, {"pool": selection({"reconstructed": 2, "reconstructed_calibrated": 1})},
                                      dtype=c.attack.dtype or "float64") for c in cells}
    (g,) = ab_groups(records)
    assert g.agree is None and g.verdict.startswith("n/a")
    assert g.other.nulls["reconstructed"] is None and g.other.cpu_seconds is None   # not recorded: not made up


# -- the section on a rendered board ----------------------------------------------------------------------------------
def test_the_board_renders_float32_next_to_float64_per_target_and_attack(suite, tmp_path: Path):
    records = [_record(c, suite, 6.0, 1.0, seconds=6.0 if c.attack.dtype == "float32" else 10.0)
               for c in _kkt_cells(suite)]
    res = write_results(tmp_path / "res", records)
    board_results(suite, res, tmp_path / "lb")
    readme = (tmp_path / "lb" / "README.md").read_text()
    section = readme.split("## Precision A/B", 1)[1].split("\n## ", 1)[0]
    for attack, target in KKT.items():
        rows = [line for line in section.splitlines() if line.startswith(f"| {target} | `{attack}` |")]
        assert [r.split(" | ")[2] for r in rows] == ["float64", "float32"], rows
        assert AGREE in rows[1] and "| 21.0 (0.64x) |" in rows[1] and "| 33.0 | 36.0 / 30.0 |" in rows[0]
    assert "3 of 3 target and attack group(s)" in section and "9 of 9 pair(s) agree" in section
    assert "\n".join(ab_lines({r.cell_id: r for r in records})) in readme


def test_a_draft_a_published_and_a_re_rendered_board_give_the_same_section(suite):
    """The board is drawn from full records, published as slim entries (a null keeps its mean and largest draw) and
    re-rendered by ``--verify`` from those entries expanded: the section must read the same from all three."""
    full = {}
    for c in _kkt_cells(suite):
        f32 = c.attack.dtype == "float32"
        rec = _record(c, suite, 6.0 + (2.5 * c.seed if f32 else 0.0), 1.0, null_min=1.0 + c.seed,
                      null_max=5.0 + c.seed, cal_null_max=1.0)
        raw = rec.to_dict()
        for spread in raw["selections"]["pool"]["null"]["spread"].values():
            spread["draws"] = 5   # as the evaluation writes it: the slim form keeps [mean, largest]
        full[c.cell_id] = raw
    keep = {"reconstructed", "reconstructed_calibrated"}
    slim = {cid: entries.make_entry(raw, keep) for cid, raw in full.items()}
    assert all(isinstance(e["selections"]["pool"]["null"]["spread"]["reconstructed"], list) for e in slim.values())
    forms = [{cid: CellRecord.from_dict(raw) for cid, raw in form.items()}
             for form in (full, slim, {cid: entries.expand(e) for cid, e in slim.items()})]
    draft, published, verified = (ab_lines(f) for f in forms)
    assert draft == published == verified
    assert any("differ beyond" in line for line in draft) and any(AGREE in line for line in draft)

"""A slice's plan prices a cell's evaluation and a target's card from what the probe measured on the device machine's
CPU: the evaluate phase from its ``evaluation`` row (fixed ``min(built-in fixed, s)``, rate ``s / u``), the card
from its ``certificate`` row as a speed ratio against the same certificate timed on the CPU machine (the committed
``probe_cpu_reference.json``). Checked against prices worked out from the rows' numbers; a probe without those rows
(the committed ``probe_h100.json``) keeps the built-in prices. And the evaluation rate a ledger's measured cells
teach a later plan, worked out by hand from two rows."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from reconbench.bench.slice_costs import (
    CERTIFICATE_REFERENCE,
    PRIORS,
    CellWork,
    CostModel,
    card_seconds,
    costs_from_probe,
    measured_evaluation_rate,
    with_measured,
)
from reconbench.records.cost_table import PROBE_FILE
from reconbench.records.measured_rate import MeasuredRate

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "gpu"
H100 = RESULTS / "probe_h100.json"
REFERENCE = RESULTS / "probe_cpu_reference.json"
P = 3072 * 1000 + 1000 * 1000 + 1000   # the paper CIFAR-10 network's weights (3072-1000-1000-1, no biases)
UNITS_4 = 4 * 1000 * 500 * 3072        # a 4-run evaluation of m = 1000 against n = 500 CIFAR-10 images


def h100() -> dict[str, Any]:
    return json.loads(H100.read_text())


def with_rows(evaluation: dict[str, Any] | None = None, certificate: dict[str, Any] | None = None) -> dict[str, Any]:
    data = h100()
    if evaluation is not None:
        data["evaluation"] = evaluation
    if certificate is not None:
        data["certificate"] = certificate
    return data


def evaluation_row(seconds: float, units: float = UNITS_4) -> dict[str, Any]:
    return {"cell": "cifar-binary--haim_binary_kkt--gaussian--s0", "runs": 4, "m": 1000, "n": 500, "pixels": 3072,
            "candidates": 4000, "evaluations": 3, "bars": True, "figures": True, "seconds": seconds,
            "seconds_by_step": {"evaluations": 0.8 * seconds, "calibration_bars": 0.2 * seconds}, "units": units,
            "seconds_per_unit": seconds / units, "torch_threads": 16, "problem_seconds": 0.1,
            "pooled_summary": {"reconstructed_calibrated": 283, "matched_images": 500, "calibrated_threshold": 0.13},
            "case_seconds": seconds + 0.2}


def certificate_row(seconds: float, n: int = 500, layers: tuple[int, ...] = (3072, 1000, 1000, 1)) -> dict[str, Any]:
    return {"n": n, "layers": list(layers), "seconds": seconds, "fit_seconds": seconds, "torch_threads": 16,
            "case_seconds": seconds}


def card_work() -> CellWork:
    """A paper CIFAR-10 binary cell's work as far as its card goes (n x P)."""
    return CellWork(cell_id="c", target_key="k", train=0.0, attack=0.0, evaluate=4.0 * UNITS_4, card=500.0 * P)


def test_a_probe_without_evaluation_and_certificate_rows_keeps_the_built_in_prices():
    table = costs_from_probe(h100(), train_dtype="float32", source=str(H100))
    assert table.evaluate == PRIORS["cuda"].evaluate and table.card == PRIORS["cuda"].card
    assert table.about["from_probe"]["evaluation"]["price"] == "built-in"
    assert table.about["from_probe"]["card"]["price"] == "built-in"


@pytest.mark.parametrize("seconds", [6.0, 40.0])
def test_the_evaluation_row_prices_the_evaluate_phase_never_below_it_at_its_size(seconds):
    """s seconds on u units: fixed min(15, s), rate s / u, and the row's units priced at its s as measured (the
    fixed-plus-rate price would be s + min(15, s)); a 16-run cell of the same sizes (4 u) pays min(15, s) + 4 s."""
    table = costs_from_probe(with_rows(evaluation_row(seconds)), train_dtype="float32")
    fixed = min(15.0, seconds)
    assert PRIORS["cuda"].evaluate.fixed == 15.0
    assert table.evaluate.fixed == fixed
    assert table.evaluate.rate == pytest.approx(seconds / UNITS_4, rel=1e-14)
    model = CostModel(prior=table)
    assert model.phase_seconds("evaluate", UNITS_4) == seconds
    assert table.evaluate.seconds(UNITS_4) == pytest.approx(seconds + fixed, rel=1e-14)
    assert model.phase_seconds("evaluate", 4 * UNITS_4) == pytest.approx(fixed + 4 * seconds, rel=1e-14)
    assert table.about["from_probe"]["evaluation"]["seconds"] == seconds


def test_a_failed_evaluation_row_keeps_the_built_in_price():
    table = costs_from_probe(with_rows({"error": "MemoryError: ", "case_seconds": 1.0}), train_dtype="float32")
    assert table.evaluate == PRIORS["cuda"].evaluate
    assert "failed" in table.about["from_probe"]["evaluation"]["why"]


def test_the_reference_is_the_committed_cpu_run_of_the_probes_certificate_case():
    data = json.loads(REFERENCE.read_text())
    cert = data["certificate"]
    assert data["command"].startswith("python benchmarks/gpu/probe.py") and "--only" in data["command"]
    assert data["conditions"]["device"] == "cpu" and not data["tiny"]
    assert CERTIFICATE_REFERENCE.seconds == cert["seconds"]
    assert (CERTIFICATE_REFERENCE.n, list(CERTIFICATE_REFERENCE.layers)) == (cert["n"], cert["layers"])
    assert PROBE_FILE.read(REFERENCE).certificate is not None   # the probe's record reads it


@pytest.mark.parametrize("device_seconds", [2.0, 25.0])
def test_the_certificate_row_scales_the_card_price_by_the_devices_speed_ratio(device_seconds):
    """ratio = the device's certificate seconds / the reference's (read from the committed JSON): the card's rate
    times the ratio, its fixed 2 s times max(1, ratio); never below ratio x the built-in card's seconds."""
    reference = json.loads(REFERENCE.read_text())["certificate"]["seconds"]
    ratio = device_seconds / reference
    table = costs_from_probe(with_rows(certificate=certificate_row(device_seconds)), train_dtype="float32")
    built_in = PRIORS["cuda"].card
    assert built_in is not None and table.card is not None
    assert (built_in.fixed, built_in.rate) == (2.0, 3.2e-8)
    assert table.card.fixed == pytest.approx(2.0 * max(1.0, ratio), rel=1e-14)
    assert table.card.rate == pytest.approx(3.2e-8 * ratio, rel=1e-14)
    seconds = card_seconds(table, card_work())
    assert seconds == pytest.approx(2.0 * max(1.0, ratio) + 3.2e-8 * ratio * 500 * P, rel=1e-14)
    assert seconds >= ratio * card_seconds(PRIORS["cuda"], card_work()) * (1 - 1e-14)
    assert table.about["from_probe"]["card"]["ratio"] == pytest.approx(ratio, rel=1e-14)


def test_a_certificate_of_another_network_or_a_failed_one_keeps_the_built_in_card():
    tiny = costs_from_probe(with_rows(certificate=certificate_row(0.3, n=12, layers=(48, 16, 16, 1))),
                            train_dtype="float32")
    assert tiny.card == PRIORS["cuda"].card and "n = 12" in tiny.about["from_probe"]["card"]["why"]
    failed = costs_from_probe(with_rows(certificate={"error": "RuntimeError: x"}), train_dtype="float32")
    assert failed.card == PRIORS["cuda"].card


def test_both_rows_together_and_the_readme_probe_unchanged_otherwise():
    plain = costs_from_probe(h100(), train_dtype="float32")
    both = costs_from_probe(with_rows(evaluation_row(6.0), certificate_row(2.0)), train_dtype="float32")
    assert both.train == plain.train and both.attack == plain.attack and both.attack_runs == plain.attack_runs
    assert both.train_targets == plain.train_targets
    assert both.evaluate != plain.evaluate and both.card != plain.card


def measured(cell: str, seconds: float, units: float) -> MeasuredRate:
    return MeasuredRate.from_dict({"cell": cell, "phase": "evaluation", "precision": "", "runs": 0, "m": 0,
                                   "weights": 1, "steps": 0, "seconds": seconds, "device": "NVIDIA H100",
                                   "units": units})


def test_a_small_measured_cell_no_longer_overprices_a_large_one():
    """The cuda table's fixed 15 s; a small cell took 20 s on 1e9 units (2e-8 s per unit, mostly fixed), a large one
    100 s on 1e10 (1e-8). Less the fixed seconds: 5e-9 and 8.5e-9; the least whole rate, 1e-8, is above both: the
    rate is 1e-8 (the slowest whole rate, 2e-8, priced a 4e10-unit cell at 815 s; now 415 s). Re-priced, the two
    cells measured cost what they took on their own units (the rate alone would give 25 s and 115 s)."""
    table = PRIORS["cuda"]
    got = with_measured(table, [measured("small", 20.0, 1e9), measured("large", 100.0, 1e10)], "cuda")
    assert got.evaluate.fixed == 15.0 and got.evaluate.rate == pytest.approx(1e-8, rel=1e-14)
    model = CostModel(prior=got)
    assert model.phase_seconds("evaluate", 4e10) == pytest.approx(415.0, rel=1e-14)
    assert model.phase_seconds("evaluate", 1e9) == 20.0
    assert model.phase_seconds("evaluate", 1e10) == 100.0
    assert got.evaluate.seconds(1e9) == pytest.approx(25.0, rel=1e-14)


def test_the_fixed_seconds_are_subtracted_where_a_cell_costs_more_than_its_fixed_part():
    """Fixed 15 s; one cell 115 s on 1e9 units (less the fixed: 1e-7 s per unit), another 100 s on 1e10 (1e-8 whole):
    the rate is 1e-7 (not 1.15e-7, the slowest whole rate), and the first cell re-priced pays exactly its 115 s.
    A cell under the fixed seconds (10 s on 1e9) counts 0, never less: with it alone beside a 12 s cell on 1e10
    units the rate is the least whole rate, 1.2e-9."""
    assert measured_evaluation_rate(15.0, [(115.0, 1e9), (100.0, 1e10)]) == pytest.approx(1e-7, rel=1e-14)
    assert 15.0 + 1e-7 * 1e9 == pytest.approx(115.0, rel=1e-14)
    assert measured_evaluation_rate(15.0, [(10.0, 1e9), (12.0, 1e10)]) == pytest.approx(1.2e-9, rel=1e-14)


def test_one_measured_cell_alone_prices_its_whole_seconds_as_rate():
    """One row cannot tell its fixed part from its rate: its whole seconds per unit (the least whole rate) stays,
    so a cell four times its size is priced at the fixed seconds plus four times its seconds."""
    got = with_measured(PRIORS["cuda"], [measured("one", 30.0, 1e9)], "cuda")
    assert got.evaluate.rate == pytest.approx(3e-8, rel=1e-14)
    assert CostModel(prior=got).phase_seconds("evaluate", 4e9) == pytest.approx(15.0 + 120.0, rel=1e-14)


def test_the_probes_record_reads_an_old_probe_and_refuses_an_unknown_key_in_the_new_rows():
    old = PROBE_FILE.decode(h100(), str(H100))
    assert old.evaluation is None and old.certificate is None
    bad = copy.deepcopy(with_rows(evaluation_row(6.0)))
    bad["evaluation"]["secs"] = 1.0
    with pytest.raises(Exception, match="secs"):
        PROBE_FILE.decode(bad, "probe.json")


def test_an_attack_precision_the_budget_did_not_reach_is_priced_as_a_slower_one_measured():
    """The float32 attack runs after the evaluation now, so a probe stopped by its budget may lack it: a float32 cell
    is then priced at the float64 rows' rates (run count by run count), never at the faster TF32 flat rate."""
    data = h100()
    data["attack"] = [r for r in data["attack"] if r["precision"] != "float32"]
    table = costs_from_probe(data, train_dtype="float32")
    for runs in (8, 16):
        assert table.phase("attack", "float32", runs) == table.phase("attack", "float64", runs)
    assert table.phase("attack", "float32") == table.phase("attack", "float64")
    assert table.about["from_probe"]["attack"]["priced_as"] == {"float32": "float64"}
    assert "priced_as" not in costs_from_probe(h100(), train_dtype="float32").about["from_probe"]["attack"]


def test_a_what_if_speed_on_a_gpu_keeps_the_evaluation_which_runs_on_the_machines_cpu():
    """``CostTable.scaled(s, evaluation=False)`` divides every device rate by s and keeps the evaluate phase (and the
    card) as they are; the break-even search on a GPU then finds no speed where the evaluation alone passes the
    slice, and the closed form (T + 1.25 A)/s + 1.25 E + 2 <= B where it does not."""
    from reconbench.bench.slice_costs import SAFETY_FACTOR, SAFETY_SECONDS, break_even_speed, evaluates_on_device
    from reconbench.records.cost_table import CostTable

    table = CostTable.of({"train": {"fixed": 0.0, "rate": 1.0}, "attack": {"fixed": 0.0, "rate": 1.0},
                          "evaluate": {"fixed": 0.0, "rate": 1.0}})
    fast = table.scaled(4.0, evaluation=False)
    assert fast.evaluate == table.evaluate and fast.attack.rate == 0.25 and fast.train.rate == 0.25
    assert table.scaled(4.0).evaluate.rate == 0.25
    assert evaluates_on_device("cpu") and not evaluates_on_device("cuda") and not evaluates_on_device("cuda:1")
    t_units, a_units, e_units, budget = 300.0, 160.0, 40.0, 202.0
    work = CellWork("X", "x", train=t_units, attack=a_units, evaluate=e_units, pieces=True, group="g")
    closed = (t_units + SAFETY_FACTOR * a_units) / (budget - SAFETY_SECONDS - SAFETY_FACTOR * e_units)
    assert break_even_speed([work], table, budget, 1, evaluation=False) == pytest.approx(closed, rel=1e-5)
    # the evaluation alone (1.25 x 170 + 2 s) passes a slice of 202 s: no device speed helps
    heavy = CellWork("X", "x", train=t_units, attack=a_units, evaluate=170.0, pieces=True, group="g")
    assert break_even_speed([heavy], table, budget, 1, evaluation=False) is None
    assert break_even_speed([heavy], table, budget, 1) is not None


def test_the_plan_header_says_where_the_evaluation_and_card_prices_came_from():
    """``--plan``'s header lines name the probe's evaluation (its seconds, runs, threads) and the card's ratio when a
    probe priced them, and say nothing of them for a probe without those rows."""
    from reconbench.cli.bench_plan import rates_lines

    table = costs_from_probe(with_rows(evaluation_row(12.5), certificate_row(CERTIFICATE_REFERENCE.seconds / 4)))
    text = "\n".join(rates_lines(table))
    assert "evaluation priced from the probe's (on the device machine's CPU, 16 thread(s)): 12.5s for 4 run(s)" in text
    assert "cards priced from the probe's certificate: 0.250x" in text
    plain = "\n".join(rates_lines(costs_from_probe(h100())))
    assert "evaluation priced from the probe" not in plain and "cards priced from" not in plain

"""The numbers docs/calibration.md states are the ones its sources hold: the chance table is
benchmarks/results/calibration_nulls.json, the membership table benchmarks/results/membership_nulls.json, the
re-scored docs table benchmarks/results/kkt/calibrated.json, and what it says of a published board is that board's
results.json. A number here that no longer matches its source fails with the source named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconbench.leaderboard.results_file import read_results

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "calibration.md").read_text()
FLAT = " ".join(DOC.split())
RESULTS = REPO / "benchmarks" / "results"


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())


def table_rows(first_header_cell: str) -> list[list[str]]:
    """The body rows of the markdown table whose header starts with ``first_header_cell``, as stripped cells."""
    lines = DOC.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header_cell} |"))
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return rows


def draws(values: list[int]) -> str:
    return " / ".join(str(v) for v in values)


def span(values: list[float], fmt: str) -> str:
    return f"{format(min(values), fmt)}-{format(max(values), fmt)}"


# -- the chance table (benchmarks/calibration_nulls.py) ------------------------------------------------------
NULLS = load("calibration_nulls.json")["rows"]


def test_the_chance_table_is_calibration_nulls_json():
    rows = table_rows("set-up")
    assert len(rows) == len(NULLS)
    for row, r in zip(rows, NULLS, strict=True):
        setup, pool, threshold, cal, papers, corr09, precision, truth = row
        assert setup == r["setup"] and int(pool) == r["pool"] and threshold == f"{r['threshold_corr']:.3f}"
        assert cal == draws(r["null_calibrated_per_draw"]) and papers == draws(r["null_papers_per_draw"])
        assert corr09 == draws(r["null_corr09_per_draw"]) and truth == f"{r['gt_calibrated']} of {r['n']}"
        claims = [p for p in r["null_membership_precision"] if p is not None]
        expected = span(claims, ".2f") if len(claims) > 1 else f"{claims[0]:.2f} (one claim)"
        assert precision == expected, r["setup"]


def test_the_sentences_on_the_chance_table_are_its_numbers():
    digit_rows = [r for r in NULLS if r["setup"].startswith(("MNIST", "digits"))]
    assert f"in the {5 * len(NULLS)} reported null draws above it never happened" in FLAT
    assert max(v for r in NULLS for v in r["null_calibrated_per_draw"]) < 2
    most = [max(r["null_corr09_per_draw"]) for r in digit_rows]
    assert f"still passes up to {max(most)} images per draw" in FLAT
    precision = [p for r in digit_rows for p in r["null_membership_precision"] if p is not None]
    assert f"does not reject the null either ({span(precision, '.2f')})" in FLAT
    readme = next(r for r in NULLS if "README default" in r["setup"])
    assert f"the recorded computation's null was {span(readme['null_membership_auc'], '.2f')} over the five" in FLAT


# -- the membership table (benchmarks/membership_nulls.py) ---------------------------------------------------
MEMBERSHIP = load("membership_nulls.json")["rows"]
KINDS = ("held_out", "noise", "informative")


def test_the_membership_table_is_membership_nulls_json():
    rows = table_rows("set-up | offset_removed: held out")
    assert len(rows) == len(MEMBERSHIP)
    for row, r in zip(rows, MEMBERSHIP, strict=True):
        assert row[0] == f"{r['setup']}, m = {r['m']}"
        cells = [f"{r['auc'][f'{method}/{kind}']['mean']:.3f} ± {r['auc'][f'{method}/{kind}']['se']:.3f}"
                 for method in ("offset_removed", "train_centred") for kind in KINDS]
        assert row[1:] == cells, r["setup"]


def test_the_sentences_on_the_membership_table_are_its_numbers():
    def means(method: str, kinds: tuple[str, ...]) -> list[float]:
        return [r["auc"][f"{method}/{k}"]["mean"] for r in MEMBERSHIP for k in kinds]

    assert f"score {span(means('offset_removed', ('held_out', 'noise')), '.3f')} on every data set" in FLAT
    assert f"scored natural candidates {span(means('train_centred', ('held_out',)), '.3f')}" in FLAT
    assert f"scored AUC {span(means('train_centred', ('held_out',)), '.2f')} over random member sets" in FLAT
    first = MEMBERSHIP[0]["auc"]
    assert f"({first['offset_removed/held_out']['mean']:.3f} ± {first['offset_removed/held_out']['se']:.3f} on" in FLAT
    assert f"test fails at {first['train_centred/held_out']['mean']:.3f}" in FLAT
    assert "over 100 shuffled ones" in FLAT and all(r["sets"] == 100 for r in MEMBERSHIP)
    assert (f"{first['train_centred/held_out']['mean']:.3f} ± {first['train_centred/held_out']['se']:.3f} over 100 "
            "shuffled ones") in FLAT
    ten = [r["auc"]["offset_removed/held_out"] for r in MEMBERSHIP if r["n"] == 10]
    lo, hi = min(a["min"] for a in ten), max(a["max"] for a in ten)
    assert f"for n = 10, single held-out sets range over {lo:.2f}-{hi:.2f}" in FLAT
    minutes = sum(r["seconds"] for r in MEMBERSHIP) / 60
    assert f"The run took about {round(minutes)} minutes" in FLAT


# -- the re-scored docs table (benchmarks/rescore_kkt_docs.py) ---------------------------------------------
KKT = load("kkt/calibrated.json")["rows"]


def count(sel: dict[str, Any]) -> str:
    return f"{sel['above']}" + (f" (+{sel['undecided']} undecided)" if sel["undecided"] else "")


def test_the_rescored_docs_table_is_calibrated_json():
    rows = table_rows("experiment")
    assert len(rows) == len(KKT)
    for row, r in zip(rows, KKT, strict=True):
        name, n, m, threshold, pool, null, corr09, single, null_blind = row
        a, b, o = r["all"], r["blind"], r["oracle"]
        assert name == f"`{r['experiment']}`" and int(n) == r["n"] and int(m) == a["candidates"]
        assert threshold == f"{a['threshold']:.3f}" and pool == f"**{count(a)}**"
        assert null == draws(a["null_calibrated_per_draw"]) and int(corr09) == a["corr09"]
        assert single == f"{count(b)} ; {count(o)} ({o['threshold']:.3f})", r["experiment"]
        assert null_blind == draws(b["null_calibrated_per_draw"])


def test_the_sentences_on_the_rescored_table_are_its_numbers():
    cifar = next(r for r in KKT if r["experiment"] == "cifar_binary")
    null = cifar["all"]["null_calibrated_per_draw"]
    assert (f"({cifar['all']['above']} of {cifar['n']} pooled against a null of {min(null)}-{max(null)}, "
            f"{cifar['blind']['above']} and {cifar['oracle']['above']} for the blind and oracle runs") in FLAT
    mnist = [r for r in KKT if r["experiment"].startswith("mnist_binary")]
    corr09 = [r["all"]["corr09"] for r in mnist]
    pooled = [r["all"]["above"] for r in mnist]
    single = [r[s]["above"] for r in mnist for s in ("blind", "oracle")]
    assert f"\"{min(corr09)}-{max(corr09)} of 20 with corr > 0.9\" shrinks to {min(pooled)}-{max(pooled)} of 20" in FLAT
    assert f"({mnist[0]['blind']['threshold']:.3f}) and keep {min(single)}-{max(single)} of 20" in FLAT


# -- what the page says of published boards -----------------------------------------------------------------
CPU_MINI = REPO / "leaderboards" / "cpu-mini"


@pytest.fixture(scope="module")
def cpu_mini() -> dict[str, Any]:
    if not (CPU_MINI / "results.json").exists():
        pytest.skip("leaderboards/cpu-mini is not published")
    return read_results(CPU_MINI)


def test_the_cell_count_quoted_for_cpu_mini_is_the_boards(cpu_mini):
    cells = cpu_mini["header"]["cells"]["planned"]
    expected = f"(about {round(0.05 * cells)} of cpu-mini's {cells} cells, per selection)"
    assert expected in FLAT, f"docs/calibration.md: the cpu-mini board now has {cells} cells: write '{expected}'"


def test_the_membership_numbers_quoted_for_cpu_mini_are_the_boards(cpu_mini):
    rows = [r for r in cpu_mini["tables"]["pool"] if r["init"] == "gaussian"]
    attacks = [r for r in rows if r["attack_name"] in ("haim_binary_kkt", "multiclass_kkt")]
    baseline = [r for r in rows if r["attack_name"] == "weight_rows"]
    assert attacks and baseline

    def spans(rs: list[dict[str, Any]]) -> tuple[str, str, str]:
        auc = [r["metrics"]["membership AUC"] for r in rs]
        cal = [r["metrics"]["reconstructed (calibrated)"]["mean"] for r in rs]
        return span([a["mean"] for a in auc], ".2f"), span([a["null"]["mean"] for a in auc], ".2f"), span(cal, ".1f")

    auc, null, cal = spans(attacks)
    expected = (f"from gaussian starts reach a mean membership AUC of {auc} against held-out nulls of {null} while "
                f"recovering {cal} images under the calibrated headline")
    assert expected in FLAT, f"docs/calibration.md#published-boards: the board now says '{expected}'"
    auc, null, cal = spans(baseline)
    expected = f"reaches {auc} (nulls {null}) while recovering {cal}"
    assert expected in FLAT, f"docs/calibration.md#published-boards: the board now says '{expected}'"

"""The numbers README.md and the docs state (not docs/method/), each against what the code prints or the committed
benchmark JSON it was measured into: generated blocks are compared with what their generator renders from the JSON,
and the other numbers with the record they quote.

Generated: README's quick-start sentences (``benchmarks/results/quick_start.json``, ``readme_table --facts``) and
results table (a fresh run, tests/integration/test_first_hour.py); docs/audit.md's timing table
(``benchmarks/results/audit/audit_default_budget.json``). Tested here: README's null and draw counts against the
protocol's defaults, docs/usage.md's default-run counts against ``benchmarks/results/default_runs/default_runs.json``,
the site summary's file count and size against the files it wrote.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from reconbench.runs.readme_table import (
    QUICK_BEGIN,
    QUICK_END,
    TIMING_BEGIN,
    TIMING_END,
    quick_start_text,
    readme_section,
    timing_text,
)

ROOT = Path(__file__).resolve().parents[2]
QUICK_START = ROOT / "benchmarks" / "results" / "quick_start.json"
AUDIT_TIMES = ROOT / "benchmarks" / "results" / "audit" / "audit_default_budget.json"
DEFAULT_RUNS = ROOT / "benchmarks" / "results" / "default_runs" / "default_runs.json"


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- README ----------------------------------------------------------------------------------------------------------
def test_the_readmes_quick_start_sentences_are_rendered_from_the_measurement() -> None:
    record = json.loads(QUICK_START.read_text())
    text = (ROOT / "README.md").read_text()
    assert readme_section(text, QUICK_BEGIN, QUICK_END) == quick_start_text(record)
    assert readme_section(text, TIMING_BEGIN, TIMING_END) == timing_text(record)


def test_the_measured_quick_start_is_what_run_does_by_default() -> None:
    """The measurement's settings are the attack's defaults and the protocol's (a fresh run's: test_first_hour)."""
    from reconbench import plugins
    from reconbench.evaluation.protocol import Protocol

    facts = json.loads(QUICK_START.read_text())["facts"]
    attack = plugins.attack("multiclass_kkt")
    recipe = attack.default_recipe or {}
    assert facts["widths"] == recipe["model"]["widths"]
    assert facts["n_per_class"] == recipe["problem"]["n_per_class"] and facts["dataset"] == recipe["problem"]["dataset"]
    assert facts["search_runs"] == attack.default_search_runs
    defaults = Protocol()
    assert (facts["calibration_draws"], facts["null_draws"]) == (defaults.calibration_draws, defaults.null_draws)
    assert facts["family_wise_fpr_bound"] == pytest.approx(1 / (defaults.calibration_draws + 1), rel=1e-14)


def test_the_readmes_calibration_sentence_counts_the_protocols_draws() -> None:
    from reconbench.evaluation.protocol import Protocol

    text = _flat(ROOT / "README.md")
    k = Protocol().calibration_draws
    found = re.search(r"better than any random held-out image did in (\d+) calibration draws: a draw of random images "
                      r"passes it with probability at most (\d+)% per evaluation", text)
    assert found, "README.md no longer states the calibration draws"
    assert (int(found[1]), float(found[2]) / 100) == (k, pytest.approx(1 / (k + 1), rel=1e-14))
    papers = re.search(r"The papers' count \(SSIM > ([\d.]+)\)", text)
    assert papers and float(papers[1]) == Protocol().good_threshold


def test_the_progress_interval_the_docs_state_is_the_codes() -> None:
    from reconbench.progress import PLAIN_EVERY_SECONDS

    for page in ("README.md", "docs/usage.md"):
        assert f"a plain line every {PLAIN_EVERY_SECONDS:.0f} s" in _flat(ROOT / page), page


# -- docs/audit.md ---------------------------------------------------------------------------------------------------
def test_the_audit_timing_table_is_rendered_from_the_benchmark() -> None:
    bench = _module(ROOT / "benchmarks" / "audit_default_budget.py")
    data = json.loads(AUDIT_TIMES.read_text())
    text = (ROOT / "docs" / "audit.md").read_text()
    assert readme_section(text, bench.BEGIN, bench.END) == bench.table(data)
    assert [r["model"] for r in data["audits"]] == ["a", "b", "c"]
    for r in data["audits"]:
        assert r["under_limit"] == (r["wall_seconds"] < data["limit_seconds"])


def test_the_audit_docs_state_the_default_budget_the_code_uses() -> None:
    from reconbench.auditing.run import DEFAULT_BUDGET, DEFAULT_SEARCH_RUNS

    text = _flat(ROOT / "docs" / "audit.md")
    found = re.search(r"The default, ([\d,]+), is sized", text)
    assert found and int(found[1].replace(",", "")) == DEFAULT_BUDGET
    assert f"(`--search-runs`, default {DEFAULT_SEARCH_RUNS}," in text
    assert f"the default budget ({DEFAULT_BUDGET:,} steps over {DEFAULT_SEARCH_RUNS} search runs per attack)" in text
    m = re.search(r"Each class therefore needs 2 × max count \+ 10 × its own count images \((\d+) per class for (\d+) "
                  r"training images per class\)", text)
    assert m and int(m[1]) == 2 * int(m[2]) + 10 * int(m[2])


# -- docs/usage.md ---------------------------------------------------------------------------------------------------
def test_the_default_runs_paragraph_quotes_its_json() -> None:
    runs = {r["command"]: r for r in json.loads(DEFAULT_RUNS.read_text())["runs"]}
    text = _flat(ROOT / "docs" / "usage.md")

    def run(cmd: str) -> dict:  # type: ignore[type-arg]
        return runs[f"reconbench run --attack {cmd}"]

    defaults = [run("haim_binary_kkt"), run("general_loss_wd")]
    m = re.search(r"`general_loss_wd` on `digits` reach (\d+) of (\d+) \(null max (\d+), bar corr > ([\d.]+)\)", text)
    assert m, "docs/usage.md no longer quotes the default runs"
    for r in defaults:
        assert (r["reconstructed_calibrated"], r["n_train"], r["null_max"]) == (int(m[1]), int(m[2]), int(m[3]))
        assert round(r["calibrated_threshold_corr"], 3) == float(m[4])
    haim = [r["regime_residual"]["theta"] for c, r in runs.items() if c.startswith("reconbench run --attack haim_binary_kkt")
            and "mnist" not in c]
    m = re.search(r"theta residual stays ([\d.]+)-([\d.]+)", text)
    assert m and (round(min(haim), 2), round(max(haim), 2)) == (float(m[1]), float(m[2]))
    m = re.search(r"regularised residual falls from ([\d.]+) \(3,000 steps\) to ([\d.]+) \(10,000\) and ([\d.]+) \(30,000\)",
                  text)
    assert m
    wd = [run("general_loss_wd"), run("general_loss_wd --steps 10000"), run("general_loss_wd --steps 30000")]
    assert [float(x) for x in m.groups()] == [float(f"{r['regime_residual']['regularised']:.2g}") for r in wd]
    mnist = "haim_binary_kkt --dataset mnist_test --n-per-class 10 --widths 1000 --steps 3000"
    m = re.search(r"reaches (\d+) of (\d+) \(null max (\d+), bar corr > ([\d.]+)\) in (\d+) s wall, and (\d+) of (\d+) "
                  r"with its default (\d+) search runs \((\d+) s wall\)", text)
    assert m
    two, six = run(mnist + " --search-runs 2"), run(mnist)
    assert (two["reconstructed_calibrated"], two["n_train"], two["null_max"]) == (int(m[1]), int(m[2]), int(m[3]))
    assert round(two["calibrated_threshold_corr"], 3) == float(m[4]) and round(two["wall_seconds"]) == int(m[5])
    assert (six["reconstructed_calibrated"], six["n_train"], six["search_runs"]) == (int(m[6]), int(m[7]), int(m[8]))
    assert round(six["wall_seconds"]) == int(m[9])
    m = re.search(r"`general_loss_wd` there reaches (\d+) of (\d+) with (\d+) search runs", text)
    there = run("general_loss_wd --dataset mnist_test --n-per-class 10 --widths 1000 --steps 3000 --search-runs 2")
    assert m and (there["reconstructed_calibrated"], there["n_train"], there["search_runs"]) == tuple(map(int, m.groups()))


def test_the_site_summary_counts_the_files_it_wrote(tmp_path: Path) -> None:
    from _helpers.sitekit import fixture_leaderboards

    from reconbench.leaderboard.site import build_site

    summary = build_site(fixture_leaderboards(tmp_path), tmp_path / "site", images=False)
    files = [p for p in (tmp_path / "site").rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert summary.files == len(files) > summary.cell_pages
    assert summary.bytes == sum(p.stat().st_size for p in files)


# -- docs/records.md -------------------------------------------------------------------------------------------------
def test_the_records_load_table_is_its_json() -> None:
    data = json.loads((ROOT / "benchmarks" / "results" / "records_load.json").read_text())
    text = _flat(ROOT / "docs" / "records.md")
    m = re.search(r"`results.json` of (\d+) kB, (\d+) cell entries", text)
    assert m and (int(m[1]), int(m[2])) == (round(data["results_json_bytes"] / 1000), data["cells"])
    strict = {}
    for key, row in (("read_and_upgrade_seconds", "`read_results`"), ("results_json_decode_seconds",
                                                                      "`BoardResults.from_dict`"),
                     ("cells_seconds", "`CellRecord.from_dict`")):
        found = re.search(re.escape(row) + r"[^|]*\| [\d.]+ s \| ([\d.]+) s \|", text)
        assert found, row
        strict[key] = float(found[1])
    for key, shown in strict.items():
        assert shown == float(f"{data[key]:.2g}") or shown == float(f"{data[key]:.3g}"), (key, shown, data[key])


# -- docs/leaderboard-entries.md -------------------------------------------------------------------------------------
def test_the_board_entry_docs_state_the_code_and_the_ci_board() -> None:
    from reconbench.bench.entries import ROW_DIGITS
    from reconbench.leaderboard.rerun import detection_probability, unstored_cells
    from reconbench.leaderboard.slim import SAMPLE_BYTES, SAMPLE_CELLS, XZ_PRESET, stored_candidate_ids

    text = _flat(ROOT / "docs" / "leaderboard-entries.md")
    assert f"Values are stored to {ROW_DIGITS} significant digits" in text
    words = {1: "1", 2: "2", 3: "3"}
    assert f"at most {words[SAMPLE_CELLS]} cells per board" in text
    assert f"{SAMPLE_BYTES // 1024} KiB before compression" in text and f"preset {XZ_PRESET}" in text
    board = ROOT / "leaderboards" / "ci"
    n = len(unstored_cells(board))
    m = re.search(r"On the ci board \(n = (\d+)\) K = (\d+) catches a single forged cell (\d+)% of the time, K = (\d+) "
                  r"half of the time", text)
    assert m and int(m[1]) == n
    assert round(100 * detection_probability(int(m[2]), n)) == int(m[3])
    assert detection_probability(int(m[4]), n) == pytest.approx(0.5, abs=1e-14)
    m = re.search(r"`checked (\d+) cell\(s\): (\d+) re-scored from stored candidates, (\d+) re-run from their recipe "
                  r"and seed, (\d+) through hashes and seals only`", text)
    cells = len(list((board / "cells").glob("*.json")))
    stored = len(stored_candidate_ids(board))
    assert m and (int(m[1]), int(m[2])) == (cells, stored) and int(m[3]) + int(m[4]) == cells - stored


# -- docs/search.md --------------------------------------------------------------------------------------------------
def _close(shown: str, value: float) -> bool:
    """``shown`` is ``value`` printed to the digits it shows (half a unit of its last digit)."""
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - value) <= 0.5 * 10.0 ** -digits + 1e-12


def _stat_matches(cell: str, stat: dict) -> bool:  # type: ignore[type-arg]
    m = re.fullmatch(r"([+-]?[\d.]+) \[([+-]?[\d.]+), ([+-]?[\d.]+)\]", cell.strip())
    assert m, cell
    return _close(m[1], stat["mean"]) and _close(m[2], stat["ci95"][0]) and _close(m[3], stat["ci95"][1])


def test_the_search_strategy_table_and_costs_are_its_json() -> None:
    data = json.loads((ROOT / "benchmarks" / "results" / "search" / "search_strategies.json").read_text())
    targets = {"MNIST odd/even": "mnist-binary", "MNIST 10 classes": "mnist-multiclass"}
    numbers = {"calibrated headline": "reconstructed_calibrated", "membership AUC": "membership_auc"}
    rows = [line for line in (ROOT / "docs" / "search.md").read_text().splitlines()
            if line.startswith("| MNIST")]
    assert len(rows) == 8
    for line in rows:
        target, selection, number, random, optuna, diff = [c.strip() for c in line.strip("|").split("|")]
        key = f"{selection}.{numbers[number.split(' (')[0]]}"
        stats = data["targets"][targets[target]][key]
        if "(of " in number:
            assert int(number.split("(of ")[1].rstrip(")")) == data["targets"][targets[target]]["n_train"]
        assert _stat_matches(random, stats["random"]) and _stat_matches(optuna, stats["optuna"]), line
        assert _stat_matches(diff, stats["optuna_minus_random"]) or diff == "0 [0, 0]" and \
            stats["optuna_minus_random"]["sd"] == 0, line
    text = _flat(ROOT / "docs" / "search.md")
    m = re.search(r"rank correlation ([\d.]+) \[([\d.]+), ([\d.]+)\] binary, ([\d.]+) \[([\d.]+), ([\d.]+)\] 10-class", text)
    assert m
    for target, (mean, lo, hi) in (("mnist-binary", m.groups()[:3]), ("mnist-multiclass", m.groups()[3:])):
        assert _stat_matches(f"{mean} [{lo}, {hi}]", data["targets"][target]["loss_vs_oracle_spearman"])
    m = re.search(r"the best final loss per cell is (\d+ \[\d+, \d+\]) under both strategies on the binary target, and "
                  r"(\d+ \[\d+, \d+\]) \(random\) against (\d+ \[\d+, \d+\]) \(Optuna\)", text)
    assert m
    binary, multi = (data["targets"][t]["best_final_attack_loss"] for t in ("mnist-binary", "mnist-multiclass"))
    assert _stat_matches(m[1], binary["random"]) and _stat_matches(m[1], binary["optuna"])
    assert _stat_matches(m[2], multi["random"]) and _stat_matches(m[3], multi["optuna"])
    m = re.search(r"Cost: (\d+) s of CPU", text)
    assert m and int(m[1]) == round(data["cpu_seconds_total"])


# -- docs/distributed.md ---------------------------------------------------------------------------------------------
def test_the_ray_wall_times_are_its_json() -> None:
    folder = ROOT / "benchmarks" / "results" / "ray"
    text = _flat(ROOT / "docs" / "distributed.md")

    def walls(name: str, executor: str) -> list[int]:
        runs = json.loads((folder / name).read_text())["runs"]
        return sorted(round(r["process_wall_seconds"]) for r in runs if r["executor"] == executor)

    m = re.search(r"the `ci` suite took (\d+) and (\d+) s serially and (\d+) and (\d+) s on two Ray workers", text)
    assert m and [int(m[1]), int(m[2])] == walls("ci.json", "serial") and [int(m[3]), int(m[4])] == walls("ci.json", "ray")
    m = re.search(r"four `cpu-mini` MNIST cells took (\d+) s serially and (\d+) s on two workers", text)
    mini = json.loads((folder / "cpu-mini-subset.json").read_text())
    assert m and len(mini["only"]) == 4 and mini["cells_identical_across_runs"]
    assert (int(m[1]), int(m[2])) == tuple(round(mini["median_process_wall_seconds"][e]) for e in ("serial", "ray"))


# -- docs/results.md -------------------------------------------------------------------------------------------------
def test_the_results_page_table_is_the_published_boards() -> None:
    from reconbench.leaderboard.results_page import BEGIN, END, board_results_table

    text = (ROOT / "docs" / "results.md").read_text()
    assert readme_section(text, BEGIN, END) == board_results_table(ROOT / "leaderboards")
    outside = text.replace(readme_section(text, BEGIN, END), "")
    assert "25ad81b" not in outside, "docs/results.md quotes numbers of boards that were re-published since"


# -- docs/usage.md: the protocol's settings ----------------------------------------------------------------------------
def test_the_usage_protocol_paragraph_states_the_protocols_defaults() -> None:
    from reconbench.evaluation import ssim
    from reconbench.evaluation.protocol import FAMILY_AVG_THRESHOLD, Protocol, resolve_protocol
    from reconbench.preflight import STEP_OVERHEAD_SECONDS

    text = _flat(ROOT / "docs" / "usage.md")
    m = re.search(r"\(B = ([\d.]+) for `mlp`/`mlp_bias`/`affine`, ([\d.]+) for `conv`\)", text)
    assert m and {FAMILY_AVG_THRESHOLD[f] for f in ("mlp", "mlp_bias", "affine")} == {float(m[1])}
    assert FAMILY_AVG_THRESHOLD["conv"] == float(m[2])
    configs = resolve_protocol(None, "mlp").metric_configs
    m = re.search(r"kornia SSIM \(window (\d+), sigma ([\d.]+), data range (\d+), reflect padding\)", text)
    assert m and (int(m[1]), float(m[2]), float(m[3])) == (configs["ssim"].window_size, ssim.KORNIA_SIGMA,
                                                            configs["ssim"].data_range)
    assert f'"reconstructed" iff SSIM > {Protocol().good_threshold}' in text
    k = Protocol().calibration_draws
    assert f"matched by in {k} null draws" in text and f"with probability at most 1/{k + 1} per evaluation" in text
    assert f"`reconstructed_corr` (corr > {configs['corr'].threshold})" in text
    member = configs["membership_test"]
    assert f"against {member.pool_per_member}n non-members, TPR at {member.fpr:.0%} FPR" in text
    assert f"plus {STEP_OVERHEAD_SECONDS * 1e6:.0f} microseconds per step" in text


# -- docs/architectures.md -------------------------------------------------------------------------------------------
def test_the_architecture_table_states_the_timm_families_settings() -> None:
    pytest.importorskip("timm")
    from reconbench import plugins

    text = _flat(ROOT / "docs" / "architectures.md")
    resnet, vit = plugins.model("timm_resnet"), plugins.model("timm_vit")
    res_kw, kw = getattr(resnet, "kwargs"), getattr(vit, "kwargs")   # the timm families' options  # noqa: B009
    channels = "-".join(str(c) for c in res_kw["channels"])
    blocks = set(res_kw["layers"])
    assert blocks == {1} and f"one basic block per stage, channels {channels}" in text
    assert (f"patch {kw['patch_size']}, {kw['depth']} blocks, {kw['embed_dim']}-dim tokens, {kw['num_heads']} heads"
            in text)


# -- docs/performance.md: float32 beside float64 -----------------------------------------------------------------------
def test_the_float32_table_is_the_precision_cpu_boards() -> None:
    """Each row of docs/performance.md's float32 table against the published board's Precision A/B rows: both
    precisions' CPU seconds, float32's ratio and how many seeds' pairs agree."""
    board: dict[tuple[str, str, str], list[str]] = {}
    for line in (ROOT / "leaderboards" / "precision-cpu" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[2] in ("float64", "float32"):
            board[(cells[0], cells[1].strip("`"), cells[2])] = cells
    text = (ROOT / "docs" / "performance.md").read_text()
    rows = re.findall(r"^\| ([\w-]+), `(\w+)` \| ([\d.]+) / ([\d.]+) \(([\d.]+)x\) \| (\d) \|$", text, re.M)
    assert len(rows) == 3, rows
    for target, attack, f32, f64, ratio, agree in rows:
        b32, b64 = board[(target, attack, "float32")], board[(target, attack, "float64")]
        assert b32[6] == f"{f32} ({ratio}x)" and b64[6] == f64, (target, attack)
        assert f"({agree} of 3 seeds)" in b32[8], (target, attack)

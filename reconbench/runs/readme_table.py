"""The README's table of the default run, rendered from its result.json with the numbers and names that
``reconbench run`` prints (``python -m reconbench.runs.readme_table RESULT.json``; a test compares README.md with a
fresh run), and the README's two sentences on the quick start (what it trains and attacks; its null and how long it
took), rendered from ``benchmarks/results/quick_start.json`` (``benchmarks/quick_start.py`` measures it;
``python -m reconbench.runs.readme_table --facts JSON`` prints them)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reconbench.evaluation import reported
from reconbench.records.recorded_protocol import RecordedProtocol

#: the numbers of the table, as `reconbench run` names them, after the calibrated headline
ROWS = ("reconstructed", "reconstructed_corr", "membership_precision", "membership_auc", "membership_tpr_at_fpr")
#: what each row is, in words
MEANING = {
    "reconstructed": "the papers' protocol: SSIM > 0.4",
    "membership_precision": "of the reconstructed images, the share whose reconstruction is nearer a training image "
                            "than every decoy (decoy pool 2n)",
    "membership_auc": "membership test against 10n held-out non-members: AUC",
    "membership_tpr_at_fpr": "membership test: true-positive rate at 1% false positives",
}
BEGIN, END = "<!-- default-run-table: python -m reconbench.runs.readme_table RESULT.json -->", "<!-- /default-run-table -->"


def _value(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)   # as `reconbench run` prints it


def summary_table(result: dict[str, Any]) -> str:
    """The markdown table (between its markers) of a run's calibrated headline and summary numbers with their
    held-out nulls, formatted as the console prints them."""
    ev = result["evaluation"]
    summary, null = ev["summary"], ev["null"]
    spread, cal = null["spread"], ev["protocol"]["calibration"]
    configs = RecordedProtocol.from_dict(ev["protocol"], "the run's recorded protocol").metric_configs()
    labels = {rep.key: reported.label_of(rep, configs) for rep in reported.console_keys()}
    head = spread["reconstructed_calibrated"]
    lines = [BEGIN,
             f"| `reconbench run` prints | what it is | attack | held-out null over {null['draws']} draws |",
             "|---|---|---|---|",
             f"| **reconstructed (calibrated headline)** | {cal['score']} > {summary['calibrated_threshold']:.3f}, the "
             f"best any of {cal['calibration_draws']} null draws reached | **{summary['reconstructed_calibrated']} of "
             f"{summary['n_train']}** | mean {head['mean']:.2g}, max {head['max']:.0f} |"]
    for key in ROWS:
        name = "reconstructed (papers' protocol)" if key == "reconstructed" else key
        s = spread[key]
        lines.append(f"| {name} | {MEANING.get(key, labels.get(key, key))} | {_value(summary[key])} | "
                     f"{s['mean']:.3g} (sd {s['std']:.2g}) |")
    return "\n".join([*lines, END])


def readme_section(text: str, begin: str = BEGIN, end: str = END) -> str:
    """A generated block as README.md holds it (markers included)."""
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[start:stop]


QUICK_BEGIN = "<!-- quick-start: python -m reconbench.runs.readme_table --facts benchmarks/results/quick_start.json -->"
QUICK_END = "<!-- /quick-start -->"
TIMING_BEGIN = "<!-- quick-start-timing: python -m reconbench.runs.readme_table --facts benchmarks/results/quick_start.json -->"
TIMING_END = "<!-- /quick-start-timing -->"


def quick_start_facts(result: dict[str, Any]) -> dict[str, Any]:
    """What the quick start did, from its result.json: the target, the search, the null."""
    recipe = result["target"]["recipe"]
    ev = result["evaluation"]
    cal = ev["protocol"]["calibration"]
    return {"dataset": recipe["problem"]["dataset"], "widths": list(recipe["model"]["widths"]),
            "n_train": int(result["target"]["n_train"]), "n_per_class": int(recipe["problem"]["n_per_class"]),
            "train_steps": int(recipe["train"]["steps"]), "search_runs": int(result["spec"]["search_runs"]),
            "candidates": int(ev["candidates"]["total"]), "calibration_draws": int(cal["calibration_draws"]),
            "null_draws": int(cal["null_draws"]), "family_wise_fpr_bound": float(cal["family_wise_fpr_bound"])}


def quick_start_text(record: dict[str, Any]) -> str:
    """The README's sentence on what the quick start trains and attacks (between its markers)."""
    f = record["facts"]
    per = "one" if f["n_per_class"] == 1 else str(f["n_per_class"])
    widths = "-".join(str(w) for w in f["widths"])
    return "\n".join([QUICK_BEGIN,
                      f"The second command trains a small target (a width-{widths} MLP on {f['n_train']} images of "
                      f"scikit-learn's embedded `{f['dataset']}`, {per} per class; no download), attacks it with "
                      f"Buzaglo et al.'s multiclass KKT attack ({f['search_runs']} search runs, {f['candidates']} "
                      "candidates), scores the candidates and prints a summary.",
                      QUICK_END])


def timing_text(record: dict[str, Any]) -> str:
    """The README's sentences on the null and on how long the quick start took (between its markers)."""
    f, t = record["facts"], record["timing"]
    draws = f["calibration_draws"] + f["null_draws"]
    return "\n".join([TIMING_BEGIN,
                      f"Every number is printed next to its **held-out null**: the same protocol applied to "
                      f"{f['candidates']} random `{f['dataset']}` images the model never saw, with the same labels "
                      "([docs/calibration.md](docs/calibration.md)). The table is the command's output (rendered "
                      "from its `result.json` by `python -m reconbench.runs.readme_table`; a test compares it with a "
                      f"fresh run). On this repository's {t['cpus']}-core machine it took {t['cpu_seconds']:.1f} s of "
                      f"CPU and {t['wall_seconds']:.1f} s wall (`OMP_NUM_THREADS=1`, from an empty cache, training "
                      f"and the {draws} null draws included, load average {t['load_average']:.1f} from other jobs; "
                      "`python benchmarks/quick_start.py --json benchmarks/results/quick_start.json` measures it):",
                      TIMING_END])


def main(argv: list[str] | None = None) -> None:
    """``python -m reconbench.runs.readme_table RESULT.json`` prints the table; ``--facts JSON`` the sentences."""
    parser = argparse.ArgumentParser(
        prog="python -m reconbench.runs.readme_table",
        description="Print the README's table of a run from its result.json (as `reconbench run` prints it), or "
                    "with --facts the README's quick-start sentences from benchmarks/results/quick_start.json.")
    parser.add_argument("json", metavar="FILE", help="a run's result.json (with --facts: the quick start's JSON)")
    parser.add_argument("--facts", action="store_true", help="FILE is benchmarks/results/quick_start.json")
    args = parser.parse_args(argv)
    try:
        record = json.loads(Path(args.json).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        parser.exit(2, f"error: {args.json}: cannot read it as JSON ({getattr(exc, 'strerror', None) or exc}); pass "
                       f"{'the quick start JSON' if args.facts else 'a result.json written by `reconbench run`'}\n")
    if args.facts:
        print(quick_start_text(record), timing_text(record), sep="\n\n")
    else:
        print(summary_table(record))


if __name__ == "__main__":
    main(sys.argv[1:])

"""The README's table of the default run, rendered from its result.json with the numbers and names that
``reconbench run`` prints (``python -m reconbench.runs.readme_table RESULT.json``; a test compares README.md with a
fresh run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from reconbench.evaluation import reported

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
    configs = {name: m.get("config") or {} for name, m in (ev["protocol"].get("metrics") or {}).items()}
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


def readme_section(text: str) -> str:
    """The table as README.md holds it (markers included)."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


if __name__ == "__main__":
    print(summary_table(json.loads(Path(sys.argv[1]).read_text())))

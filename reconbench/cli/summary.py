"""A run's summary numbers beside their held-out nulls, as rows: printed by `reconbench run` and `evaluate`, and
rendered as the README's table of the quick start's run (one source, so the two cannot say different things)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconbench.evaluation import reported

#: summary keys that are sizes, not numbers with a null
_SIZES = ("n_train", "n_candidates")


@dataclass(frozen=True)
class SummaryRow:
    """One number of a run: the name the console prints, its value, the null beside it, the leakage direction."""

    name: str
    value: str
    null: str = ""          # '' where the number has no null (sizes, init copies)
    direction: str = ""     # 'higher' or 'lower' (= more leakage); '' for sizes


def headline_row(evaluation: dict[str, Any]) -> SummaryRow | None:
    """The calibrated headline with the mean and maximum of the held-out null draws, or None without one."""
    summary, null = evaluation.get("summary", {}), evaluation.get("null") or {}
    if summary.get("reconstructed_calibrated") is None:
        return None
    spread = (null.get("spread") or {}).get("reconstructed_calibrated", {})
    return SummaryRow("reconstructed (calibrated headline)",
                      f"{summary['reconstructed_calibrated']} of {summary.get('n_train')}",
                      f"mean {spread.get('mean', float('nan')):.2g}, max {spread.get('max', float('nan')):.0f} over "
                      f"{null.get('draws', 0)} draws", "higher")


def headline_rule(evaluation: dict[str, Any]) -> str:
    """What the calibrated headline counts, e.g. 'corr > 0.947, the best any of 19 null draws reached'."""
    summary = evaluation.get("summary", {})
    cal = evaluation.get("protocol", {}).get("calibration", {})
    return (f"{cal.get('score')} > {summary['calibrated_threshold']:.3f}, the best any of "
            f"{cal.get('calibration_draws')} null draws reached")


def summary_rows(evaluation: dict[str, Any]) -> list[SummaryRow]:
    """The other numbers the evaluation and the metrics declare for the console, in their declared order."""
    summary = evaluation.get("summary", {})
    nulls = (evaluation.get("null") or {}).get("spread") or {}
    shown = reported.console_keys()
    better = {rep.key: ("higher" if rep.higher_is_better else "lower") for rep in shown if rep.values != "count_unbounded"}
    rows = []
    for key in (rep.key for rep in shown):
        if key not in summary:
            continue
        value = summary[key]
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        if key == "lpips_mean" and value == "unavailable":
            reason = summary.get("lpips_mean_unavailable_reason")
            text += f" ({' '.join(str(reason).split())})" if reason else " (see result.json for the reason)"
        null = (f"{nulls[key]['mean']:.3g} (sd {nulls[key]['std']:.2g})" if key in nulls and key not in _SIZES else "")
        name = "reconstructed (papers' protocol)" if key == "reconstructed" else key
        rows.append(SummaryRow(name, text, null, better.get(key, "")))
    return rows


def headline_lines(evaluation: dict[str, Any]) -> list[str]:
    """The calibrated headline next to the held-out null, then the other summary numbers with their null means."""
    null = evaluation.get("null") or {}
    lines = []
    head = headline_row(evaluation)
    if head is not None:
        lines.append(f"  {head.name}: {head.value}  | held-out null: {head.null}  ({headline_rule(evaluation)})")
    elif null.get("available") is False:
        lines.append(f"  no calibrated headline: {null.get('reason')}")
    lines.append("  (for each number: which direction means more leakage; 'null' is the same number for random held-out "
                 "images)")
    for row in summary_rows(evaluation):
        direction = f" [{row.direction} = more leakage]" if row.direction else ""
        lines.append(f"  {row.name}{direction}: {row.value}" + (f"  | null {row.null}" if row.null else ""))
    return lines


def markdown_table(evaluation: dict[str, Any]) -> str:
    """The rows as the README's Markdown table: the console's names, values and nulls, sizes and unavailable
    metrics left out (the sentence above the table gives the sizes)."""
    lines = ["| number, as `reconbench run` prints it | attack | held-out null | more leakage is |", "|---|---|---|---|"]
    head = headline_row(evaluation)
    if head is not None:
        lines.append(f"| **{head.name}**: {headline_rule(evaluation)} | **{head.value}** | {head.null} | higher |")
    for row in summary_rows(evaluation):
        if row.name in _SIZES or row.value.startswith("unavailable"):
            continue
        lines.append(f"| {row.name} | {row.value} | {row.null or 'n/a'} | {row.direction or 'n/a'} |")
    return "\n".join(lines)

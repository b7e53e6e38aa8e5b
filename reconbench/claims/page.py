"""docs/claims.md: every claim of the claims data file (``benchmarks/claims.toml``), measured from the cells of the
claims suites, with its verdict, the test that decided it and its p-value.

Run ``python -m reconbench.claims`` to write the page, ``--check`` to fail (exit 1) when the committed page differs
from what the cells and the data file give now. Every number on the page is computed here from the cells' records;
nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconbench.bench.suite import Suite, load_suite
from reconbench.claims import records
from reconbench.claims.board_state import BoardState, as_board_grows, board_state
from reconbench.claims.measure import (
    MEASURES,
    SELECTION,
    Companion,
    Point,
    comparison,
    load_all,
    measure_point,
    plans,
    point_specs,
    protocol_options,
    setup_text,
)
from reconbench.claims.records import Claim, ClaimsFile
from reconbench.claims.verdicts import MIN_SEEDS, NOT_RUN, NOT_RUN_YET, RULES, VERDICTS, Decision, decide, fmt_p
from reconbench.records import BOARD_RESULTS_FILE, BoardHeader, CellRecord

DEFAULT_RESULTS = {"claims-a": Path("leaderboards/claims-a"), "claims-b": Path("leaderboards/claims-b"),
                   "claims-c": Path("leaderboards/claims-c"),
                   "threat-models": Path("leaderboards/threat-models")}
#: the suites whose comparison blocks the papers'-sizes suite repeats under the same names (``--gpu``;
#: threat-models has no GPU twin)
GPU_ROUTED = ("claims-a", "claims-b", "claims-c")
DEFAULT_OUT = Path("docs/claims.md")
GPU_SUITE = "claims-gpu"
KIND_NAMES = {"above_null": "above the null", "at_null": "at the null",
              "trend": "trend", "comparison": "comparison", "some_above": "some point above the first",
              "no_change": "no change", "threshold": "threshold", "not_run": "not measured here"}


@dataclass
class ClaimResult:
    claim: Claim
    setup: str
    points: list[Point]
    decision: Decision

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    @property
    def reason(self) -> str:
        return self.decision.reason


def measure_claims(data: ClaimsFile, results: dict[str, Path], route: dict[str, str] | None = None,
                   found: dict[str, dict[str, CellRecord]] | None = None,
                   states: dict[str, BoardState] | None = None) -> list[ClaimResult]:
    """Measure and judge every claim from the cells in ``results`` (suite name -> folder holding ``cells/``).
    ``route`` sends a claim's suite to another with the same comparison names (``claims-gpu``); ``states``: how far
    each suite's board has grown (a claim a partial board has not run yet reads so: ``board_state.py``)."""
    # each claim's suite, sent on where ``route`` says
    suite_of = {c.suite: c.suite for c in data.claims} | (route or {})
    names = sorted({suite_of[c.suite] for c in data.claims if c.measured} | set(results))
    suites: dict[str, Suite] = {name: load_suite(name) for name in names}
    found = load_all(results) if found is None else found
    planned = plans(suites)
    out = []
    for claim in data.claims:
        if not claim.measured:
            out.append(ClaimResult(claim, "-", [], decide(claim, [])))
            continue
        name = suite_of[claim.suite]
        suite = suites[name]
        if not any(c.name == claim.comparison for c in suite.comparisons):
            out.append(ClaimResult(claim, "-", [], Decision(NOT_RUN, f"the {name} suite has no block "
                                                                      f"{claim.comparison!r}")))
            continue
        comp = comparison(suite, claim.comparison)
        specs = point_specs(claim, comp)
        setup = setup_text(claim, suite, comp, specs)
        if name not in results:
            out.append(ClaimResult(claim, setup, [], Decision(NOT_RUN, f"runs only in the {name} suite, whose "
                                                                      "results are not among those read here")))
            continue
        companions = [Companion(suites[other], found[other], planned[other])   # found: every suite of results
                      for other in sorted(results) if other != name]
        points = [measure_point(claim, suite, comp, found[name], planned[name], *s, companions=companions)
                  for s in specs]
        out.append(ClaimResult(claim, setup, points, as_board_grows(decide(claim, points), points,
                                                                     (states or {}).get(name))))
    return out


# -- the page -----------------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def number_text(res: ClaimResult) -> str:
    """Per point: the mean over seeds and every seed's value (and its null where the measure has one)."""
    if not res.points:
        return "-"
    spec = MEASURES[res.claim.measure]
    lines = []
    for p in res.points:
        if not p.seeds:
            lines.append(f"{p.label}: {'attack failed' if p.failed else 'not run'}")
            continue
        mean = sum(s.value for s in p.seeds) / len(p.seeds)
        each = ", ".join(spec.show(s.value) for s in p.seeds)
        text = f"{p.label}: mean {spec.show(mean)} (seeds: {each})"
        nulls = [s.null_mean for s in p.seeds if s.null_mean is not None]
        if nulls:
            text += f"; null mean {spec.show(sum(nulls) / len(nulls))}"
        if spec.null != "none" and p.seeds and all(s.beyond is not None for s in p.seeds):
            text += f"; {sum(1 for s in p.seeds if s.beyond)} of {len(p.seeds)} beyond their null"
        if p.missing or p.failed:
            text += f"; {len(p.missing)} missing, {len(p.failed)} failed"
        still = p.unchanged
        if still is not None and still.seeds and still.suite:   # cells run (a value known by construction has none)
            where = "" if still.suite == p.suite else f" (`{still.suite}`)"
            text += (f"; unchanged start{where}: mean {spec.show(sum(s.value for s in still.seeds) / len(still.seeds))}"
                     f" (seeds: {', '.join(spec.show(s.value) for s in still.seeds)})")
        lines.append(text)
    return "<br>".join(lines)


def _summary_lines(results: list[ClaimResult]) -> list[str]:
    by_verdict = Counter(r.verdict for r in results)
    by_kind = Counter(KIND_NAMES[r.claim.kind] for r in results)
    # from the cells read (their init records is_oracle) and the data file's flag, not from a promise
    from_cells = [r.claim.id for r in results if any(s.oracle for p in r.points for s in p.seeds)]
    flagged = [r.claim.id for r in results if r.claim.oracle and r.claim.id not in from_cells]
    cells_read = sum(len(p.seeds) for r in results for p in r.points)
    not_in_text = [r.claim.id for r in results if not r.claim.in_text]
    lines = [
        f"{len(results)} claims: " + ", ".join(f"{v} {by_verdict[v]}" for v in VERDICTS if by_verdict[v]) + ".",
        "",
        "By kind of test: " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())) + ".",
        "",
        (f"{len(from_cells)} claim(s) read cells that start from the training images themselves "
         f"({', '.join(f'`{c}`' for c in from_cells)}; each cell's init record says whether it does): refused, not "
         "judged (a sanity check of the attack, not evidence about privacy). " if from_cells else
         f"None of the {cells_read} cells read starts from the training images (each cell's init record says "
         "whether it does). ")
        + (f"{len(flagged)} more claim(s) are marked in the data file as starting from them "
           f"({', '.join(f'`{c}`' for c in flagged)}) and would be refused the same way. " if flagged else "")
        + (f"{len(not_in_text)} statement(s) are not in the available text of the papers "
           f"({', '.join(f'`{c}`' for c in not_in_text)}): none of them gets a verdict." if not_in_text else ""),
    ]
    return lines


def prior_bound_text(suites: list[str]) -> str:
    """What each claims board's 5% bound is against, read from its suite's protocol: random held-out draws only
    (``prior_draws`` = 0), or those and the data prior's draws (docs/calibration.md#the-data-prior)."""
    held_only: list[str] = []
    with_prior: list[str] = []
    for name in suites:
        options = protocol_options(load_suite(name).protocol)
        k, j = options.calibration_draws, options.prior_draws
        (with_prior if j and k else held_only).append(f"`{name}` (K = {k}" + (f", J = {j}" if j and k else "") + ")")
    parts = ["**What the calibrated headline's bound is against** (the suites' `prior_draws`; "
             "docs/calibration.md#the-data-prior)."]
    if held_only:
        parts.append(f"{', '.join(held_only)}: calibrated on held-out draws only (`prior_draws` = 0), so the bound "
                     "holds against random held-out images, not against class prototypes or blurred averages of "
                     "held-out images (candidates without member information, which can pass a held-out-only "
                     "calibration more often than 1/(K+1)): a seed that passes there has beaten random held-out images, not "
                     "necessarily the data prior.")
    if with_prior:
        parts.append(f"{', '.join(with_prior)}: calibrated on K held-out and J data-prior draws, so the bound holds "
                     "against both: at most 1/(K+1) for random held-out images and 1/(J+1) for those class "
                     "prototypes and blurred averages.")
    return " ".join(parts)


#: what a text of the papers' folder is, by the last part of its file name (the page names the kind, not the file)
SOURCE_KINDS = {"slides": "the authors' slides", "appendix": "the appendix", "paper": "the paper"}


def source_label(source: str) -> str:
    """How the page names a source text: its kind (``haim2022-slides.txt`` -> "the authors' slides")."""
    kind = source.rsplit(".", 1)[0].rsplit("-", 1)[-1]
    return SOURCE_KINDS.get(kind, "the paper's text")


def partial_lines(states: dict[str, BoardState], results: list[ClaimResult]) -> list[str]:
    """The header's paragraph on boards that are partial or whose cells ran at several commits (slices), with how
    many claims wait on them; none for complete boards of one folder (the page is then as before slices)."""
    said = [line for state in states.values() if (line := state.line())]
    if not said:
        return []
    waiting = sum(1 for r in results if r.verdict == NOT_RUN_YET)
    text = "**How far the boards have grown.** " + " ".join(said)
    if any(s.partial for s in states.values()):
        text += (f" {waiting} claim(s) read *{NOT_RUN_YET}*: every cell they lack is one that board has not run "
                 f"yet, and they get a verdict as it grows; *{NOT_RUN}* is kept for a claim that lacks cells for "
                 "another reason (a failed or stale cell, a suite this page does not read).")
    return [text, ""]


def render(data: ClaimsFile, results: list[ClaimResult], sources: dict[str, Path], root: Path,
           found: dict[str, dict[str, CellRecord]] | None = None,
           states: dict[str, BoardState] | None = None) -> str:
    cells = sum(len(v) for v in (found or {}).values())
    lines = [
        "# The papers' claims, measured",
        "",
        "<!-- generated by `python -m reconbench.claims` from benchmarks/claims.toml and the claims boards; do not "
        "edit by hand -->",
        "",
        "Each row is one claim of " + ", ".join(p.title for p in data.papers.values()) + ": where the paper makes "
        "it, a short fragment of its text (or a note that the statement is not in the text available to us), our "
        "paraphrase, the kind of test, the cells of the claims suites that measure it, every seed's number, and "
        "the verdict with the test and p-value that decided it. The claims are data "
        f"(`{_rel(data.path, root)}`); the set-up is far smaller than the papers' (see "
        "[the suites](../reconbench/bench/suites/README.md)); `claims-gpu.toml` holds the papers' sizes.",
        "",
        f"Selection `{SELECTION}` (all search runs of a cell pooled). Results read from: "
        + ", ".join(f"`{name}` ← `{_rel(path, root)}`" for name, path in sources.items())
        + f" ({cells} cell records).",
        "",
        *partial_lines(states or {}, results),
        "To measure and publish (cost: see the end of the page): `benchmarks/run_claims.sh`. At the papers' sizes: "
        "`reconbench bench claims-gpu --device cuda`, then "
        "`python -m reconbench.claims --gpu runs/bench/claims-gpu --out docs/claims-gpu.md`.",
        "",
        "## Summary",
        "",
        *_summary_lines(results),
        "",
        "## Verdict rules",
        "",
        RULES,
        "",
        prior_bound_text(list(sources)),
        "",
        "## Claims",
        "",
        "| claim | where (paper's text) | our paraphrase (kind of test; measure) | set-up | the paper reports | "
        "reconbench's numbers per point | test, p-value | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        c = res.claim
        where = f"{c.where}; {source_label(c.source)}" + (f": \"{c.quote}\"" if c.quote else "")
        if not c.in_text:
            where += " (the statement is not in the available text)"
        kind = KIND_NAMES[c.kind] + (f", {c.direction}" if c.direction and c.kind != "threshold" else "")
        if c.kind == "threshold" and c.threshold is not None:
            kind += f" {'>' if c.direction == 'up' else '<'} {c.threshold:g}"
        para = f"{c.statement} ({kind}" + (f"; {MEASURES[c.measure].label}" if c.measure else "") + ")"
        if c.note:
            para += f" {c.note}"
        if c.setting:
            para += f" The paper's setting: {c.setting}."
        test = "-" if not res.decision.test else (
            "" if res.decision.p is None else f"**p = {fmt_p(res.decision.p)}**: ") + res.decision.test
        verdict = f"**{res.verdict}**" + (f": {res.reason}" if res.reason else "")
        lines.append("| " + " | ".join(_cell(x) for x in (
            f"`{c.id}`<br>{c.paper.short}", where, para, res.setup, c.paper_number or "-", number_text(res), test,
            verdict)) + " |")
    lines += ["", cost_section(data, sources, found or {})]
    return "\n".join(lines).rstrip() + "\n"


def cost_section(data: ClaimsFile, results: dict[str, Path], found: dict[str, dict[str, CellRecord]]) -> str:
    """Each suite's measured wall time from the header of its published board where it matches the suite, else its
    estimate from the data file."""
    lines = ["## Cost of the suites", ""]
    for part in sorted(data.suites):
        header = BoardHeader()
        board = results.get(part)
        if board is not None and (board / "results.json").exists():
            header = BOARD_RESULTS_FILE.read(board / "results.json").header
        estimate = data.suites[part].cost
        recorded = header.suite_sha256
        current = load_suite(part).text_sha256 if part != GPU_SUITE else None
        if header.wall_seconds and (recorded is None or recorded == current):
            cells = header.cells
            lines.append(f"- `{part}`: measured **{header.wall_seconds / 60:.0f} min** wall for "
                         f"{cells['ok']} of {cells['planned']} cells "
                         f"({'; '.join(header.machines or ['machine not recorded'])}). Estimate: {estimate}.")
        else:
            lines.append(f"- `{part}`: not measured as a whole for this version of the suite; estimate: {estimate}.")
    lines += ["", f"Every measured claim needs {MIN_SEEDS} seeds at each point; the estimates come from single cells "
              "timed on the shared 2-core machine and scaled by the number of cells.", ""]
    return "\n".join(lines)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def generate(results: dict[str, Path] | None = None, root: Path | None = None, *, gpu: bool = False,
             claims_file: Path | None = None) -> str:
    """The page from ``results`` (suite name -> folder; default: the published claims boards under ``root``) and
    the claims data file. ``gpu``: every claim is read from the ``claims-gpu`` suite's folder."""
    root = root or Path.cwd()
    data = records.load(claims_file or root / records.DEFAULT_FILE)
    results = results or {k: root / v for k, v in DEFAULT_RESULTS.items()}
    route = {k: GPU_SUITE for k in GPU_ROUTED} if gpu else None
    found = load_all(results)
    states = {name: board_state(load_suite(name), folder) for name, folder in results.items()}
    measured = measure_claims(data, results, route, found, states)
    return render(data, measured, results, root, found, states)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reconbench.claims", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", action="append", default=[], metavar="SUITE=FOLDER",
                    help="a results or leaderboard folder (holding cells/) of claims-a or claims-b; default: "
                         + ", ".join(f"{k}={v}" for k, v in DEFAULT_RESULTS.items()))
    ap.add_argument("--claims", type=Path, default=records.DEFAULT_FILE,
                    help=f"the claims data file (default {records.DEFAULT_FILE})")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the page to write (default {DEFAULT_OUT})")
    ap.add_argument("--gpu", type=Path, metavar="FOLDER",
                    help=f"read every claim from the results of the {GPU_SUITE} suite in FOLDER instead")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs from --out")
    args = ap.parse_args(argv)
    if args.gpu is not None:
        return _write(args.out, generate({GPU_SUITE: args.gpu}, gpu=True, claims_file=args.claims), args.check)
    results = {k: Path(v) for k, v in DEFAULT_RESULTS.items()}
    for item in args.results:
        name, sep, folder = item.partition("=")
        if not sep or name not in DEFAULT_RESULTS:
            ap.error(f"--results {item!r}: write SUITE=FOLDER with SUITE one of {', '.join(DEFAULT_RESULTS)}")
        results[name] = Path(folder)
    return _write(args.out, generate(results, claims_file=args.claims), args.check)


def _write(out: Path, text: str, check: bool) -> int:
    if check:
        same = out.is_file() and out.read_text() == text
        print(f"{out}: {'up to date' if same else 'differs from the generated page; re-run without --check'}")
        return 0 if same else 1
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What `reconbench bench SUITE --plan --deadline SECONDS` prints: the slices the cells still to run need, on a
bare machine each, from a cost table (the device's built-in one, or ``--costs``: a probe's JSON) and the rates the
slices measured (a ledger's ``measured`` rows, with ``--finished``); the speed at which the plan would take one
slice fewer; and, on a real slice, the plan it follows before its first cell (docs/slices.md)."""

from __future__ import annotations

from pathlib import Path

import click

from reconbench.bench.cells import Cell
from reconbench.bench.slice_costs import (
    BREAK_EVEN_RANGE,
    PRIORS,
    RUN_SECONDS_TARGET,
    CellWork,
    CostModel,
    GroupRules,
    PlannedGroup,
    SlicePlan,
    break_even_budget,
    break_even_speed,
    card_seconds,
    cell_work,
    device_kind,
    evaluates_on_device,
    pairs_seconds,
    plan_slices,
    restore_seconds,
    run_step_seconds,
    stack_size,
    target_training_seconds,
    with_measured,
)
from reconbench.bench.slice_pack import MAX_FILE_BYTES
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.preflight import TargetSize
from reconbench.records.cost_table import CostTable
from reconbench.records.finished_ledger import FINISHED_LEDGER_FILE
from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.record import mapping, number


def default_cross_target(asked: bool | None, deadline: float | None, device: str) -> bool:
    """Whether a slice (or its plan) advances its cells' runs together: as ``--cross-target/--no-cross-target``
    says, else on for a slice on a GPU (a deadline on ``cuda``), where batching runs is what makes them fast."""
    if asked is not None:
        return asked
    return deadline is not None and device.startswith("cuda")


def ledger_measured(ledger: Path) -> list[MeasuredRate]:
    """The rates a ledger's slices measured (its ``measured`` rows; none where it lists none)."""
    return list(FINISHED_LEDGER_FILE.read(ledger).measured)


def plan_table(device: str, table: CostTable | None, measured: list[MeasuredRate]) -> CostTable | None:
    """The cost table a plan or a slice prices with: ``table`` (None: the device's built-in one) with the rates
    the slices measured on this kind of device (:func:`~reconbench.bench.slice_costs.with_measured`)."""
    if not measured:
        return table
    base = table if table is not None else PRIORS[device_kind(device)].updated(about={"built_in": device_kind(device)})
    merged = with_measured(base, measured, device)
    return merged if measured_about(merged) else table


#: the keys of a cost table's ``about`` that list what :func:`with_measured` took from the slices
MEASURED_KEYS = ("measured", "measured_evaluation", "measured_training", "measured_networks", "measured_restores")


def measured_about(table: CostTable) -> bool:
    """Whether ``table`` prices with rates the slices measured (attack, evaluation or training)."""
    return any(table.about.get(k) for k in MEASURED_KEYS)


def rates_lines(table: CostTable) -> list[str]:
    """The training rates by targets stacked the plan prices with, and where the attack's rates by run count come
    from: measured on slices (the ledger) or the cost table's."""
    measured = {(str(m["precision"]), int(m["runs"])): list(m["cells"]) for m in table.about.get("measured", [])}
    lines = []
    if table.train_targets:
        counts = sorted(int(k) for k in table.train_targets)
        base = table.phase("train", targets=counts[0]).rate
        probe = mapping(mapping(mapping(table.about).get("from_probe")).get("train")).get(
            "target_steps_per_second_by_targets")
        per_second = mapping(probe)

        trained = {int(m["targets"]): m for m in table.about.get("measured_training", [])}

        def stack(k: int) -> str:
            rate = table.train_targets[str(k)].rate
            parts = [f"measured on a slice, {trained[k]['pieces']} piece(s)"] if k in trained else \
                [f"{per_second[str(k)]:,.0f} target-steps/s"] if number(per_second.get(str(k))) else []
            if k != counts[0] and rate > 0:
                parts.append(f"{base / rate:.2f}x the {counts[0]}-target rate")
            return f"{k}" + (f" ({', '.join(parts)})" if parts else "")

        fewer = f"; fewer targets than {counts[0]} pay its whole stack step" if counts[0] > 1 else ""
        lines.append(f"  training in pieces priced by targets stacked: {', '.join(stack(k) for k in counts)}; a stack "
                     f"between two sizes at the smaller's rate{fewer}")
    for precision, by_runs in table.attack_runs.items():
        counts = sorted(int(k) for k in by_runs)
        said = ", ".join(f"{n}" + (" (measured on a slice)" if (precision, n) in measured else "") for n in counts)
        below = f"; fewer runs than {counts[0]} pay its whole batched step" if counts[0] > 1 else ""
        lines.append(f"  {precision} attack priced by runs batched: {said}{below}")
    from_probe = mapping(table.about.get("from_probe"))
    probed = mapping(from_probe.get("evaluation"))
    if probed.get("price") == "probe":
        lines.append(f"  evaluation priced from the probe's (on the device machine's CPU, {probed.get('torch_threads')}"
                     f" thread(s)): {number(probed.get('seconds')) or 0.0:.1f}s for {probed.get('runs')} run(s) of m = "
                     f"{probed.get('m')} against n = {probed.get('n')}; fixed {table.evaluate.fixed:g}s, "
                     f"{table.evaluate.rate:.3g} s per unit")
    card = mapping(from_probe.get("card"))
    if card.get("price") == "probe" and table.card is not None:
        lines.append(f"  cards priced from the probe's certificate: {number(card.get('ratio')) or 0.0:.3f}x the CPU "
                     f"machine's time for the same network ({number(card.get('seconds')) or 0.0:.1f}s against "
                     f"{number(card.get('reference_seconds')) or 0.0:.1f}s)")
    evaluation = mapping(table.about.get("measured_evaluation"))
    if evaluation:
        cells = sorted(set(evaluation["cells"]))
        lines.append(f"  evaluation priced at a rate measured on slices (--finished): {table.evaluate.rate:.3g} s per "
                     f"unit (the table's {number(evaluation.get('table_rate')) or 0.0:.3g}), from {len(cells)} cell(s) "
                     f"evaluated whole ({', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''}): each re-priced at "
                     f"its own size above what it took; its fixed {table.evaluate.fixed:g}s the table's")
    networks = table.about.get("measured_networks", [])
    if networks:
        lines.append("  attack steps measured on slices on other networks than the table's (--finished): " + "; ".join(
            f"{n['precision']} {n['runs']} runs of {n['weights']:,} weights {n['rate']:.3g} s per unit" for n in networks)
            + "; a network is priced by the measured step of the nearest one no smaller (proportionally above all)")
    if table.evaluate_at:
        lines.append("  evaluations measured whole, a cell of the same units priced at their seconds: " + ", ".join(
            f"{float(k):.3g} units {v:.1f}s" for k, v in table.evaluate_at.items()))
    if table.card_restore:
        lines.append("  cards restored as measured on slices: " + ", ".join(
            f"{int(k):,} weights {v:.2f}s" for k, v in table.card_restore.items())
            + "; a larger network proportionally more")
    if measured:
        cells = sorted({c for cs in measured.values() for c in cs})
        lines.append(f"  rates measured on slices (--finished): {len(measured)} of precision and run count, from "
                     f"{len(cells)} cell(s): {', '.join(cells[:3])}{', ...' if len(cells) > 3 else ''}; the rest from "
                     "the cost table")
    return lines


#: the most cells whose estimate the plan breaks down into its phases
BREAKDOWN_CELLS = 4


def breakdown_lines(model: CostModel, works: list[CellWork], rules: GroupRules) -> list[str]:
    """Each cell's estimate on a bare machine, whole, by phase (its card restored or rebuilt first where its target
    trained in an earlier slice, its attack, evaluation and figure pairs, and the margin), for at most
    :data:`BREAKDOWN_CELLS` cells: what a cell that splits into groups would need to run whole."""
    if len(works) > BREAKDOWN_CELLS:
        return []
    lines = []
    for w in works:
        attack = model.phase_seconds("attack", w.attack, w.precision, w.runs, weights=w.weights)
        evaluate = model.phase_seconds("evaluate", w.evaluate)
        pairs = pairs_seconds(w)
        whole = model.estimate(w, False)
        card = (restore_seconds(model.prior, w) if w.target_key in rules.travelled_cards
                else card_seconds(model.prior, w)) if w.pieces else 0.0
        step = run_step_seconds(model.prior, w) * w.runs
        lines.append(f"  {w.cell_id} whole: card {card:.1f}s + {model.factor:g} x (attack {attack:.1f}s"
                     + (f" ({step * 1e3:.2f} ms per step of {w.runs} runs)" if w.steps else "")
                     + f" + evaluation {evaluate:.1f}s + figure pairs {pairs:.1f}s) + {model.extra:g}s = "
                     f"{card + whole:.1f}s")
    return lines


def _span(runs: tuple[int, ...]) -> str:
    return f"{runs[0]}-{runs[-1]}" if len(runs) > 1 and list(runs) == list(range(runs[0], runs[-1] + 1)) else \
        ", ".join(str(k) for k in runs)


def _bytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def group_lines(plan: SlicePlan, rules: GroupRules) -> list[str]:
    """Which runs of which cell each slice runs in groups, with the pack bytes their tensors take."""
    lines = []
    for i, groups in enumerate(plan.groups):
        if not groups:
            continue
        room = ("" if rules.run_files is None else
                f" of the {rules.run_files} pack file(s) left to runs and the training states the slice packs")
        total = sum(g.bytes for g in groups)
        lines.append(f"  slice {i + 1} runs in groups ({_bytes(total)}{room}): " + "; ".join(
            f"{g.cell_id} runs {_span(g.runs)} of {g.search_runs} ({_bytes(g.bytes)})" for g in groups))
    return lines


def pooled_lines(plan: SlicePlan) -> list[str]:
    """The batched computations that several cells' runs share in each slice (a cross-target slice): priced once
    at their total run count, each cell (or group of its runs) charged its share."""
    lines = []
    for i, pools in enumerate(plan.pooled):
        for pool in pools:
            lines.append(f"  slice {i + 1} advances {pool.runs} {pool.precision} search runs of {len(pool.members)} "
                         f"cells in one batched computation, priced at {pool.runs} runs: {pool.seconds:.0f}s of attack "
                         "with the margin; charged: " + "; ".join(
                             f"{cid} {runs} runs {sec:.0f}s" for cid, runs, sec in pool.members))
    return lines


def print_plan(suite: Suite, cells: list[Cell], sizes: dict[str, TargetSize], deadline: float, reserve: float,
               device: str, table: CostTable | None,
               progress: dict[str, float] | None = None, dtype: str | None = None, *,
               break_even: bool = True, rules: GroupRules | None = None, carry_starts: bool = False,
               speed: float = 1.0) -> SlicePlan:
    """The slices ``cells`` (those still to run; ``sizes``: their targets') need, as ``--plan`` prints them: a
    slice runs with ``--pack``, so targets the resumable trainer takes train in pieces across slices (``progress``:
    the fraction of its steps each such target's travelling state has done already). ``table``: the cost table
    (None: the device's built-in one), measured rates merged in by :func:`plan_table`; ``break_even``: also the
    speeds at which the plan takes one slice fewer (a search, seconds of CPU). ``rules``: how cells longer than a
    slice run their search runs in groups (the pack files left to runs, ``--runs-per-slice``, the runs merged
    already; ``rules.cross_target``: the runs of cells of one shape share one batched computation, priced once);
    ``carry_starts``: every run carries its start (``--carry-starts``); ``speed``: a device that many
    times as fast per unit as the table (``--speed``: a what-if; fixed seconds and cards unchanged, and on a GPU the
    evaluation, which runs on the machine's CPU)."""
    rules = rules or GroupRules()
    base = CostModel.for_device(device, table).prior   # what the break-even speeds are counted against
    if speed != 1.0:
        table = base.scaled(speed, evaluation=evaluates_on_device(device))
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=dtype or suite.dtype, device=device,
                       carry_starts=carry_starts) for c in cells]
    model = CostModel.for_device(device, table)
    plan = plan_slices(works, model, deadline - reserve, progress=progress, rules=rules)
    names = {c.recipe.key(): c.target for c in cells}
    # each stack by its targets with a cell that fits a slice (the plan trains the others' only where none has one)
    groups: dict[str, list[str]] = {}
    every: dict[str, list[str]] = {}
    for w in works:
        for named, fits in ((every, True), (groups, w.cell_id not in plan.unfit)):
            if w.pieces and fits and names[w.target_key] not in named.setdefault(w.group, []):
                named[w.group].append(names[w.target_key])
    groups = {g: groups.get(g) or targets for g, targets in every.items()}

    def training(i: int) -> str:
        made = plan.training_cards[i]
        parts = [f"{' + '.join(groups[g])} {sec:.0f}s" + (f" (cards {made[g]:.0f}s)" if made.get(g) else "")
                 for g, sec in plan.training[i].items()]
        if plan.cards_restored[i]:
            parts.insert(0, f"{plan.cards_restored[i]} card(s) restored {plan.restored_seconds[i]:.0f}s")
        if plan.cards[i]:
            parts.insert(0, f"{plan.cards[i]} card(s) rebuilt {plan.card_seconds[i]:.0f}s")
        if plan.cards_skipped[i]:
            parts.append(f"{len(plan.cards_skipped[i])} card(s) not made: no cell of their target fits")
        return "; ".join(parts)

    def first(ids: list[str], groups: list[PlannedGroup]) -> str:
        named = ids + [f"{g.cell_id} (runs {_span(g.runs)})" for g in groups]
        return ", ".join(named[:3]) + (", ..." if len(named) > 3 else "")

    rows = [(i + 1, len(ids), f"{sec:.0f}", training(i) or "-", first(ids, plan.groups[i]))
            for i, (ids, sec) in enumerate(zip(plan.slices, plan.seconds, strict=True))]
    source = "built-in cost table" if table is None or "built_in" in table.about else "cost table from --costs"
    click.echo(f"suite {suite.name} on {device}, slices of {deadline:g}s ({reserve:g}s kept for the pack), {source}"
               + (" and the slices' measured rates" if table is not None and measured_about(table) else "")
               + ":")
    if speed != 1.0:
        kept = "fixed seconds and cards" if evaluates_on_device(device) else \
            "fixed seconds, cards and the evaluation (on the machine's CPU)"
        click.echo(f"  every rate {speed:g}x the table's speed (--speed: a what-if; {kept} as they are)")
    for line in rates_lines(model.prior) + breakdown_lines(model, works, rules):
        click.echo(line)
    split = [w for w in works if w.split]
    if split and rules.run_files is not None:
        carried = [w for w in split if len(w.run_bytes) == 4]
        click.echo(f"  groups of search runs take {rules.run_files} pack file(s) of {MAX_FILE_BYTES:,} bytes; "
                   + ("every run carries its start (--carry-starts)" if carry_starts else
                      f"starts drawn again at the merge ({len(split) - len(carried)} cell(s)), carried by "
                      f"{len(carried)}")
                   + (f"; at most {rules.runs_per_slice} run(s) of a cell per slice" if rules.runs_per_slice else ""))
    if rules.cross_target:
        click.echo("  cross-target (the default on cuda; --no-cross-target: each cell alone): the search runs of cells "
                   "that share one batched computation are priced once, at their total run count, each cell charged "
                   "its share")
    if rows:
        from tabulate import tabulate  # only the plan uses it (with wcwidth, about 35 ms of every bench start)

        click.echo(tabulate(rows, headers=["slice", "cells", "estimated s", "training in pieces", "first cells"],
                            tablefmt="github"))
    for line in group_lines(plan, rules):
        click.echo(line)
    for line in pooled_lines(plan):
        click.echo(line)
    for cid, est in plan.unfit.items():
        click.echo(f"  fits no slice: {cid} (estimated {est:.0f}s on a bare machine)"
                   + ("; nor does one group of its runs" if any(w.split for w in works if w.cell_id == cid) else ""))
    by_target: dict[str, list[str]] = {}
    for c in cells:
        by_target.setdefault(c.target, []).append(c.cell_id)
    for target, ids in by_target.items():
        key = next(c.recipe.key() for c in cells if c.target == target)
        end = plan.finished_in(ids)
        trained = plan.trained_in.get(key)
        when = f"trained in pieces by slice {trained + 1}, " if trained is not None else ""
        click.echo(f"  target {target}: {when}" + (f"its {len(ids)} cell(s) done by slice {end + 1}" if end is not None
                                                   else f"{sum(1 for i in ids if i in plan.unfit)} of its cell(s) "
                                                        "fit no slice"))
    grouped = {g.cell_id for groups in plan.groups for g in groups}
    click.echo(f"{sum(len(x) for x in plan.slices) + len(grouped)} cell(s) in {len(plan.slices)} slice(s)"
               + (f" ({len(grouped)} of them in groups of their search runs, each evaluated where its last group is "
                  "merged)" if grouped else "")
               + f", {len(plan.unfit)} that fit none")
    if break_even:
        for line in break_even_lines(works, base, deadline - reserve, reserve, len(plan.slices), progress,
                                     names, rules, evaluation=evaluates_on_device(device)):
            click.echo(line)
    return plan


def break_even_lines(works: list[CellWork], table: CostTable, budget: float, reserve: float, planned: int,
                     progress: dict[str, float] | None, names: dict[str, str],
                     rules: GroupRules | None = None, *, evaluation: bool = True) -> list[str]:
    """What speed of the device the plan's count hangs on: the least speed (times the table's) at which the cells
    fit in one slice fewer than planned, and down to which they still fit in as many; each in the table's own
    terms (a target's training, a search run's step) and as a fraction of peak where the table states its own;
    then the time of one search run against :data:`RUN_SECONDS_TARGET`. ``evaluation``: whether a faster device
    shortens the evaluation too (on a GPU it runs on the machine's CPU: it does not)."""
    first = next((w for w in works if w.pieces), None)
    step = next((w for w in works if w.run_step > 0), None)
    # priced at the size of the stack it trains in, as the plan prices it
    stacked = stack_size(works, first.target_key, progress) if first is not None else 1

    def terms(speed: float) -> str:
        out = []
        if first is not None:
            out.append(f"training {target_training_seconds(table, first, stacked) / speed:.0f}s per target "
                       f"({names[first.target_key]}" + (f", {stacked} stacked" if stacked > 1 else "") + ")")
        if step is not None:
            out.append(f"{run_step_seconds(table, step) / speed * 1e3:.3f} ms per step of one search run "
                       f"({names[step.target_key]}, {step.runs} runs batched: "
                       f"{run_step_seconds(table, step) * step.runs / speed * 1e3:.2f} ms)")
        if table.peak_fraction is not None:
            fraction = table.peak_fraction * speed
            out.append(f"{fraction:.1%} of peak" + (" (past the peak: out of reach)" if fraction > 1 else ""))
        return ", ".join(out)

    lines = []
    counts = {planned - 1, planned}
    if planned == 0 and works:   # nothing fits at this speed: from the fewest slices any speed gives (the pack's
        # room for runs bounds them where cells run in groups)
        fastest = plan_slices(works, CostModel(prior=table.scaled(BREAK_EVEN_RANGE[1], evaluation=evaluation)),
                              budget, progress, rules)
        if not fastest.unfit:
            counts = {len(fastest.slices), len(fastest.slices) + 1}
    for n in sorted(counts - {0}):
        if n < 1 or not works:
            continue
        speed = break_even_speed(works, table, budget, n, progress, rules=rules, evaluation=evaluation)
        if speed is None:
            lines.append(f"break-even: no speed fits these cells in {n} slice(s) of {budget:g}s (fixed seconds, or "
                         "the pack's room for the runs of cells split into groups, or the evaluation on the machine's CPU, alone "
                         "pass it)")
            continue
        lines.append(f"break-even for all {len(works)} cell(s) in {n} slice(s): a device {speed:.3f}x the table's "
                     f"speed per unit (the table: 1x): {terms(speed)}")
        if speed > 1:
            longer = break_even_budget(works, table, n, budget, 2 * budget, progress, rules)
            lines.append(f"  or, at the table's speed, slices of {longer:g}s: --deadline {longer + reserve:g}"
                         if longer is not None else f"  (at the table's speed, no slice up to {2 * budget:g}s does)")
    if step is not None and step.steps:
        run = run_step_seconds(table, step) * step.steps
        need = run / RUN_SECONDS_TARGET   # the least speed at which one run takes the target's seconds
        lines.append(f"one search run of {names[step.target_key]} ({step.steps:,} steps): {run:.1f}s at the "
                     f"table's speed; {RUN_SECONDS_TARGET:g}s asks for at most "
                     f"{RUN_SECONDS_TARGET / step.steps * 1e3:.3f} ms per step, a device {need:.3f}x the table's"
                     + (f" ({table.peak_fraction * need:.1%} of peak)" if table.peak_fraction is not None else ""))
    return lines


def ledger_progress(ledger: Path, cells: list[Cell]) -> dict[str, float]:
    """The fraction of its steps each target's training state that the ledger lists has done (by recipe key)."""
    try:
        training = FINISHED_LEDGER_FILE.read(ledger).training
    except ReconbenchError:
        return {}   # read_ledger has checked the file already; a state it cannot read trains from the start
    steps = {c.recipe.key(): c.recipe.train.steps for c in cells}
    return {k: min(1.0, v.step / steps[k]) for k, v in training.items() if k in steps}

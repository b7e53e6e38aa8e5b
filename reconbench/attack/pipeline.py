"""One attack on one target: init, (random-search) runs written as they finish, pooled evaluation, results.

Layout of a result folder::

    result.json               resolved config, selections, metrics, provenance
    candidates.safetensors    pooled candidates (centred space), their labels and run ids
    runs/run-000.json         one file per search run, written the moment it finishes (resume skips these), with
                              its outcome (ok / diverged / non_finite / stopped_early: reconbench.attack.outcome);
    runs/run-000.safetensors  runs an attack advances together (run_batch) finish with their batch

    figures/*.png
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels, default_m, restrict_knowledge
from reconbench.attack.outcome import derive_run_outcome, outcome_of_runs
from reconbench.config import build_config, config_to_dict
from reconbench.errors import DivergedError, IncompatibleError, ReconbenchError
from reconbench.evaluation import evaluate, oracle_score, resolve_protocol
from reconbench.evaluation.bars import calibration_bars
from reconbench.interfaces import AttackTarget
from reconbench.progress import Progress
from reconbench.provenance import config_hash, portable_path, provenance, write_json
from reconbench.targets.cards import ModelCard
from reconbench.targets.problems import Problem
from reconbench.targets.training import DTYPES


@dataclass
class RunSpec:
    """What to run against a target."""

    attack: str
    attack_config: dict[str, Any] = field(default_factory=dict)
    init: str = "gaussian"
    init_config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    candidates: int | None = None   # m; None: 2n
    search_runs: int = 1            # 1: the given config; >1: random search over the attack's declared space
    dtype: str = "float64"
    device: str = "cpu"
    protocol: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare(card: ModelCard, spec: RunSpec) -> tuple[Any, AttackTarget, torch.Tensor]:
    """Resolve the attack, check it against the target before any work, and fix the candidate labels."""
    attack = plugins.get("attacks", spec.attack)
    if spec.dtype not in DTYPES:
        raise ReconbenchError(f"unknown dtype {spec.dtype!r}; choose one of {', '.join(DTYPES)}")
    knowledge = card.knowledge()
    if knowledge.task not in attack.tasks:
        raise IncompatibleError(
            f"attack {attack.name!r} handles {', '.join(sorted(attack.tasks))} targets, but this target is "
            f"{knowledge.task}. Attacks for {knowledge.task} targets: "
            f"{', '.join(n for n in plugins.names('attacks') if knowledge.task in plugins.get('attacks', n).tasks)}")
    family = plugins.get("models", card.data["family"])
    dtype, device = DTYPES[spec.dtype], torch.device(spec.device)
    target = AttackTarget(model=card.load_model(dtype).to(device), family=family.name,
                          homogeneity_degree=card.data.get("homogeneity_degree"),
                          knowledge=restrict_knowledge(knowledge, attack), dtype=dtype, device=device)
    attack.check(target)
    m = spec.candidates or default_m(knowledge)
    labels = candidate_labels(knowledge.task, knowledge.num_classes, m)
    return attack, target, labels


def sample_configs(attack: Any, spec: RunSpec) -> list[dict[str, Any]]:
    """Run 0..R-1 configs: user overrides are fixed; with R > 1 the rest of the declared space is sampled."""
    if spec.search_runs <= 1:
        return [dict(spec.attack_config)]
    rng = np.random.default_rng(spec.seed)
    space = {k: v for k, v in attack.search_space().items() if k not in spec.attack_config}
    return [{**{k: dist.sample(rng) for k, dist in space.items()}, **spec.attack_config}
            for _ in range(spec.search_runs)]


def init_config_for_run(init: Any, spec: RunSpec, attack: Any, cfg: Any) -> tuple[Any, dict[str, Any]]:
    """The init config of one run: the user's options, plus what the attack's config hands to the init regime.

    An attack may define ``init_overrides(config, init_name) -> dict`` (e.g. the KKT attacks search the
    papers' init scale s_x and pass it as the gaussian regime's ``scale``). Options the user set explicitly
    win; overrides naming options the regime does not have are ignored. Returns the config and the overrides
    actually applied.
    """
    fields = {f.name for f in dataclasses.fields(init.config_cls)}
    overrides = {k: v for k, v in dict(attack.init_overrides(cfg, init.name)).items()
                 if k in fields and k not in spec.init_config}
    return build_config(init.config_cls, {**spec.init_config, **overrides}, f"init {init.name}"), overrides


def run_attack(card: ModelCard, spec: RunSpec, out_dir: str | Path, *, data_root: str | None = None,
               quiet: bool = False, problem: Problem | None = None) -> dict[str, Any]:
    out = Path(out_dir)
    resolve_protocol(spec.protocol, card.data["family"])  # a bad --protocol-set fails before any work
    attack, target, labels = prepare(card, spec)
    init = plugins.get("inits", spec.init)
    init_cfg = build_config(init.config_cls, spec.init_config, f"init {init.name}")
    problem = problem or card.problem(data_root)
    configs = sample_configs(attack, spec)
    runs_dir = out / "runs"
    runs: list[dict[str, Any]] = []
    pending: list[_Pending] = []
    t_all = time.perf_counter()
    with Progress(len(configs), f"{attack.name} runs", quiet=quiet or len(configs) == 1) as outer:
        for k, raw_cfg in enumerate(configs):
            cfg = build_config(attack.config_cls, raw_cfg, f"attack {attack.name}")
            run_init_cfg, init_overrides = init_config_for_run(init, spec, attack, cfg)
            record_path = runs_dir / f"run-{k:03d}.json"
            cfg_dict = config_to_dict(cfg)
            run_key = config_hash({"card": card.data["recipe_key"], "spec": spec.to_dict(), "run": k, "cfg": cfg_dict})
            if record_path.exists():
                old = json.loads(record_path.read_text())
                if old.get("run_key") == run_key and (
                        old.get("stopped") == "failed" or (runs_dir / f"run-{k:03d}.safetensors").exists()):
                    runs.append(old)
                    outer.update(len(runs))
                    continue
            gen = torch.Generator().manual_seed(spec.seed * 100_003 + k)
            x0 = init.make(problem, labels, run_init_cfg, generator=gen, dtype=target.dtype).to(target.device)
            pending.append(_Pending(k, cfg, gen, x0, {"run": k, "run_key": run_key, "config": cfg_dict,
                                                      "init_config": config_to_dict(run_init_cfg),
                                                      "init_overrides": init_overrides}))

        if pending:
            _run_pending(attack, target, labels, pending, runs_dir, problem, runs, outer, quiet)
    runs.sort(key=lambda r: r["run"])
    usable = [r for r in runs if r["stopped"] != "failed"]
    if not usable:
        raise DivergedError(f"all {len(runs)} run(s) of {attack.name} failed; first: {runs[0]['message']}")
    return finish(card, spec, out, problem, runs, time.perf_counter() - t_all,
                  oracle_init=bool(init.is_oracle(init_cfg)), init_config=config_to_dict(init_cfg), quiet=quiet)


@dataclass
class _Pending:
    """A run still to do: its index, config, generator (after the init drew from it), start and record header."""

    k: int
    cfg: Any
    gen: torch.Generator
    x0: torch.Tensor
    rec: dict[str, Any]


def _run_pending(attack: Any, target: AttackTarget, labels: torch.Tensor, pending: list[_Pending], runs_dir: Path,
                 problem: Problem, runs: list[dict[str, Any]], outer: Progress, quiet: bool) -> None:
    """The pending runs through the attack's ``run_batch`` (the KKT attacks advance them together; others run them
    one by one); each run is written the moment ``run_batch`` reports it done. Resume: finished runs are skipped
    and the rest start again from their starts (a run's trajectory does not depend on which runs share its
    batch)."""
    t0 = time.perf_counter()
    ids = ", ".join(str(p.k) for p in pending)

    with Progress(0, f"run(s) {ids}", quiet=quiet) as bar:
        def on_done(i: int, result: Any, batch: dict[str, Any] | None) -> None:
            nonlocal t0
            if batch is not None:
                batch = {**batch, "runs": [pending[j].k for j in batch["runs"]]}
            runs.append(_write_run(runs_dir, problem, pending[i], result, time.perf_counter() - t0, batch))
            if batch is None:   # one run at a time: the next one's clock starts now
                t0 = time.perf_counter()
            outer.update(len(runs))

        attack.run_batch(target, [p.x0 for p in pending], labels.to(target.device), [p.cfg for p in pending],
                         generators=[p.gen for p in pending], progress=bar, on_done=on_done)


def initial_loss(trace: list[dict[str, float]]) -> float | None:
    """The attack's own loss at its start (the first trace entry, step 0), kept in the run record beside
    ``final_loss`` (the trace itself is not); None when the attack recorded no step 0."""
    first = trace[0] if trace else {}
    loss = first.get("loss")
    return float(loss) if first.get("step") == 0 and isinstance(loss, (int, float)) else None


def _write_run(runs_dir: Path, problem: Problem, p: _Pending, result: Any, seconds: float,
               batch: dict[str, Any] | None) -> dict[str, Any]:
    """Write one finished run (record + tensors) the moment it is done; a DivergedError is a failed run."""
    rec = dict(p.rec)
    record_path = runs_dir / f"run-{p.k:03d}.json"
    runs_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(result, Exception):
        rec.update({"final_loss": math.inf, "steps": 0, "stopped": "failed", "message": str(result),
                    "seconds": seconds, "trace": [], "oracle_score": math.inf})
        rec["outcome"] = derive_run_outcome(rec).to_dict()
        write_json(record_path, rec)
        return rec
    cand = result.candidates.detach().to("cpu", torch.float64)
    finite = bool(torch.isfinite(cand).all())
    rec.update({
        "initial_loss": initial_loss(result.trace),
        "final_loss": result.final_loss, "steps": result.steps, "stopped": result.stopped,
        "message": result.message, "seconds": seconds, "trace": result.trace,
        "oracle_score": oracle_score(problem, cand) if finite else math.inf, "candidates_finite": finite,
    })
    rec["outcome"] = derive_run_outcome(rec).to_dict()
    if batch is not None:
        rec["batch"] = batch
    tensors = {"candidates": cand.contiguous(), "labels": result.labels.detach().cpu().long().contiguous(),
               "x0": p.x0.detach().cpu().double().clone()}   # its own storage: an attack may return its start
    if result.multipliers is not None:
        tensors["multipliers"] = result.multipliers.detach().cpu().double().reshape(-1).contiguous()
    save_file(tensors, str(runs_dir / f"run-{p.k:03d}.safetensors"))
    write_json(record_path, rec)
    return rec


def load_pooled(out: Path, runs: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    cands, labels, ids, x0 = [], [], [], []
    for rec in runs:
        t = load_file(str(out / "runs" / f"run-{rec['run']:03d}.safetensors"))
        cands.append(t["candidates"])
        labels.append(t["labels"])
        x0.append(t["x0"])
        ids.append(torch.full((len(t["labels"]),), rec["run"], dtype=torch.long))
    return {"candidates": torch.cat(cands), "labels": torch.cat(labels), "run_ids": torch.cat(ids),
            "x0": torch.cat(x0)}


def select_runs(runs: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """Blind: the lowest final attack loss among runs that completed (else among all with a finite loss).
    Oracle: the lowest extraction score, which reads the training images."""
    finite = [r for r in runs if math.isfinite(r["final_loss"])]
    completed = [r for r in finite if r["stopped"] == "completed"] or finite
    blind = min(completed, key=lambda r: r["final_loss"])["run"] if completed else None
    scored = [r for r in runs if math.isfinite(r["oracle_score"])]
    oracle = min(scored, key=lambda r: r["oracle_score"])["run"] if scored else None
    return blind, oracle


#: the largest attack loss drawn on the log-scale trace plot
LOG_PLOT_MAX = 1e100


def plot_traces(runs: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """One curve of the attack loss per run (log scale); None when no run recorded a trace."""
    rows = [(r["run"], r.get("trace") or []) for r in runs]
    if not any(trace for _, trace in rows):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run, trace in rows:
        # a log axis cannot place ticks for values near the float range's end (a diverging run): leave them out
        points = [(t["step"], t["loss"]) for t in trace if 0 < t.get("loss", math.nan) < LOG_PLOT_MAX]
        if points:
            ax.plot(*zip(*points, strict=True), label=f"run {run}", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("attack loss")
    ax.set_title(title)
    if len(rows) <= 12:
        ax.legend(fontsize=6, ncol=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def finish(card: ModelCard, spec: RunSpec, out: Path, problem: Problem, runs: list[dict[str, Any]],
           wall: float, *, oracle_init: bool, init_config: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """Pool the runs, evaluate, select blind and oracle runs, and write result.json + candidates."""
    usable = [r for r in runs if r["stopped"] != "failed"]
    pooled = load_pooled(out, usable)
    save_file({k: v.contiguous() for k, v in pooled.items()}, str(out / "candidates.safetensors"))
    evaluation = evaluate(problem, pooled["candidates"], family=card.data["family"], protocol=spec.protocol,
                          labels=pooled["labels"], run_ids=pooled["run_ids"], x0=pooled["x0"],
                          card=card, out_dir=out, quiet=quiet)
    blind, oracle = select_runs(runs)
    selected: dict[str, Any] = {}
    if len(usable) > 1:  # the selected run alone, as well as the pool the papers evaluate
        for label, run in (("blind", blind), ("oracle", oracle)):
            if run is not None:
                keep = pooled["run_ids"] == run
                selected[label] = evaluate(problem, pooled["candidates"][keep], family=card.data["family"],
                                           protocol=spec.protocol, labels=pooled["labels"][keep],
                                           run_ids=pooled["run_ids"][keep], x0=pooled["x0"][keep], card=card,
                                           out_dir=None, quiet=True)
    bars = calibration_bars(problem, pooled, family=card.data["family"], protocol=spec.protocol,
                            evaluation=evaluation, blind=blind, oracle=oracle)
    draw = resolve_protocol(spec.protocol, card.data["family"]).base.figures   # figures = false: no PNG at all
    figure = plot_traces(runs, out / "figures" / "attack_loss.png", f"{spec.attack}: attack loss per run") if draw \
        else None
    result = {
        "kind": "reconbench-result/1",
        "attack": spec.attack,
        "init": spec.init,
        "init_config": init_config,
        "init_is_oracle": oracle_init,
        "spec": spec.to_dict(),
        "target": {"card": portable_path(card.path), "recipe": card.data["recipe"], "recipe_key": card.data["recipe_key"],
                   "card_sha256": card.data.get("content_sha256"),
                   "family": card.data["family"], "task": card.task, "n_train": problem.n,
                   "train_metrics": {k: v for k, v in card.data["metrics"].items() if k != "margins"}},
        "selection": {
            "blind": {"run": blind,
                      "rule": "lowest final attack loss among completed runs (reads no training images)"},
            "oracle": {"run": oracle, "rule": "lowest extraction score (mean NCC distance of the 10 best "
                                              "distinct training matches): reads training images"},
        },
        "runs": [{k: v for k, v in r.items() if k != "trace"} for r in runs],
        "failed_runs": [r["run"] for r in runs if r["stopped"] == "failed"],
        "outcome": outcome_of_runs(runs).to_dict(),
        "evaluation": evaluation,
        "evaluation_selected": selected,
        "calibration_bars": bars,
        "figures": [str(figure.relative_to(out))] if figure else [],
        "wall_seconds": wall,
        "provenance": provenance(spec.to_dict(), spec.device, spec.dtype, spec.seed),
    }
    write_json(out / "result.json", result)
    return result

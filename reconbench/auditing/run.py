"""``reconbench.audit``: attack a released model with the owner's data and write a calibrated report.

Everything after the mapping of the model onto a card is the benchmark's own pipeline: ``reconbench.runs`` runs each
attack (search runs, blind selection, result.json and figures, as ``reconbench run``), ``reconbench.evaluation``
scores it with the held-out null and the calibrated headline, ``reconbench.targets.certificate`` measures the regime.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from reconbench import plugins
from reconbench.attack.search import RUN_SEARCH
from reconbench.auditing.card import AuditCard, audit_card
from reconbench.auditing.data import (
    NON_MEMBERS_PER_MEMBER,
    Preprocess,
    build_audit_problem,
    data_sha256,
    input_factor,
    load_data,
    parse_preprocess,
)
from reconbench.auditing.model import (
    check_second_order,
    factory_folder,
    family_and_spec,
    read_state,
    registered_family,
)
from reconbench.auditing.report import write_report
from reconbench.data import Problem
from reconbench.errors import IncompatibleError, ModelCardError, ReconbenchError
from reconbench.nets import TargetNet
from reconbench.provenance import check_writable, portable_path, provenance, write_json
from reconbench.records import RUN_RESULT_FILE, Spread, plain
from reconbench.records.audit import AUDIT_FILE
from reconbench.runs.execute import run_attack
from reconbench.runs.prepare import prepare
from reconbench.runs.spec import RunSpec
from reconbench.targets.certificate import certificate, gate_value
from reconbench.targets.data_files import file_digest
from reconbench.targets.losses import error_rate

#: the attack of each task that the audit runs first (the papers' KKT attacks), and the baseline run beside it
MAIN_ATTACK = {"binary": "haim_binary_kkt", "multiclass": "multiclass_kkt", "regression": "general_loss_wd"}
BASELINES = ("weight_rows",)
#: attack steps per attack, summed over its search runs: 40 s of CPU for a 784-1000-1000-1 MLP with n = 20 on one
#: thread (docs/audit.md#how-long-it-takes)
DEFAULT_BUDGET = 3000
DEFAULT_SEARCH_RUNS = 3
#: the option that counts an attack's steps (the KKT attacks' steps, the bilevel attack's outer steps)
STEP_OPTIONS = ("steps", "outer_steps")
#: the regime gate on the learned part's residual ratio (docs/regime.md#the-gate)
GATE = 0.1
AUDIT_FORMAT = "reconbench-audit/1"


def audit(weights: str | Path, *, family: str, train: str | Path, held_out: str | Path, task: str, out: str | Path,
          model_set: dict[str, Any] | None = None, binary_rule: str | None = None,
          preprocess: dict[str, Any] | Preprocess | None = None, loss: str | None = None,
          init_weights: str | Path | None = None, init_decay: float = 1.0, attacks: list[str] | None = None,
          budget: int = DEFAULT_BUDGET, search_runs: int | None = None, seed: int = 0, device: str = "cpu",
          quiet: bool = True, command: str | None = None) -> dict[str, Any]:
    """Audit released weights for training-data leakage; writes ``out/report.html`` and ``out/audit.json`` and
    returns the JSON record. The command line ``reconbench audit`` calls this with its options."""
    t0 = time.perf_counter()
    if budget < 1:
        raise ReconbenchError(f"--budget {budget}: give a positive number of attack steps")
    check_device(device)
    pre = preprocess if isinstance(preprocess, Preprocess) else parse_preprocess(dict(preprocess or {}))
    data = load_data(train, held_out)
    name, spec = family_and_spec(family, dict(model_set or {}))
    out_dir = Path(out)
    with registered_family(name):
        fam = plugins.get("models", name)  # untyped: timm's family has its own spec()
        full_spec = {**fam.default_spec(), **spec} if name != "timm" else fam.spec(spec)
        state = read_state(weights)
        check_outputs(state, task)
        channels = int(data.train.images.shape[1])
        factor = input_factor(pre, channels)
        problem = build_audit_problem(data, task, binary_rule, pre, num_classes=_out_dim(state, task))
        record = {"family": family, "model_set": dict(model_set or {}), "task": task, "binary_rule": binary_rule,
                  "preprocess": pre.to_dict(), "loss": loss,
                  "train_sha256": data_sha256(train), "held_out_sha256": data_sha256(held_out)}
        card = audit_card(out_dir, name, full_spec, state, problem, factor, loss,
                          file_digest(Path(weights), "sha256"), record)
        model = card.load_model()
        accuracy = _accuracy(model, problem)
        regime = _regime(card, model, problem, init_weights, init_decay)
        chosen, refused = _applicable(card, attacks, task, budget, search_runs, seed, device)
        check_writable(out_dir, "--out")   # every input is checked by now; the attacks write the first files
        results = []
        for spec_run in chosen:
            folder = out_dir / "attacks" / spec_run.attack
            result = run_attack(card, spec_run, folder, problem=problem, quiet=quiet)
            results.append(_attack_record(spec_run, result, folder, out_dir))
    rec: dict[str, Any] = {
        "kind": AUDIT_FORMAT,
        "command": rerunnable(command or python_call(weights, family, train, held_out, task, out, model_set,
                                                     binary_rule, pre, loss, init_weights, init_decay, attacks, budget,
                                                     search_runs, seed, device), family),
        "inputs": {"weights": portable_path(weights), "weights_sha256": file_digest(Path(weights), "sha256"),
                   "family": family, "model_spec": full_spec, "train": portable_path(train),
                   "held_out": portable_path(held_out), **record,
                   "n_train": problem.n, "class_counts": problem.class_counts, "image_shape": list(problem.image_shape),
                   "held_out_images": int(len(data.held_out.labels)), "decoys": int(len(problem.decoy_labels)),
                   "held_out_pool": int(len(problem.held_out_indices)),
                   "init_weights": None if init_weights is None else portable_path(init_weights)},
        "model": {"param_count": card.data["metrics"]["param_count"], "train_loss": card.data["metrics"]["train_loss"],
                  "loss": card.data["metrics"]["loss_name"], **accuracy},
        "regime": regime,
        "attacks": results,
        "refused": refused,
        "headline": headline(results),
        "seconds": time.perf_counter() - t0,
        "provenance": provenance(record, device, "float64", seed),
    }
    audited = AUDIT_FILE.decode(rec, out_dir / "audit.json")  # the report reads the record the JSON file holds
    write_json(out_dir / "audit.json", rec)
    write_report(out_dir, audited)
    return rec


def check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ReconbenchError(f"--device {device!r} is not a torch device; pass cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ReconbenchError(f"--device {device}: no CUDA device is available here; pass --device cpu")


def check_outputs(state: dict[str, torch.Tensor], task: str) -> None:
    """A binary or regression audit needs one output; a two-output classifier is a multiclass model."""
    mats = [v for v in state.values() if v.ndim == 2]
    if task != "multiclass" and mats and int(mats[-1].shape[0]) == 2:
        raise ReconbenchError(f"the weights end in 2 outputs, but a {task} audit needs a model with one output (a "
                              "logit); a two-output classifier trained with cross-entropy is --task multiclass")


def _out_dim(state: dict[str, torch.Tensor], task: str) -> int | None:
    """Multiclass: the class count is the model's output count (the last 2-d weight's rows), when it reads so."""
    if task != "multiclass":
        return None
    mats = [v for v in state.values() if v.ndim == 2]
    return int(mats[-1].shape[0]) if mats else None


def _accuracy(model: TargetNet, problem: Problem) -> dict[str, Any]:
    """Error on the training set and on (up to 2,000 of) the held-out pool: the generalisation gap."""
    with torch.no_grad():
        train_err = error_rate(model(problem.x_train(torch.float64)), torch.as_tensor(problem.train_labels), problem.task)
        pos = torch.arange(min(len(problem.held_out_indices), 2000)).numpy()
        held = problem.centred(problem.held_out_images(pos))
        held_err = error_rate(model(held), torch.as_tensor(problem.held_out_labels[pos]), problem.task)
    return {"train_error": train_err, "held_out_error": held_err, "held_out_scored": int(len(pos))}


def _regime(card: AuditCard, model: TargetNet, problem: Problem, init_weights: str | Path | None,
            init_decay: float) -> dict[str, Any]:
    """The certificate at the training images; the learned-part gate when the initial weights are given."""
    init = None
    if init_weights is not None:
        init_card = dataclasses.replace(card, state=read_state(init_weights))
        try:
            init = init_card.load_model()
        except ModelCardError as exc:
            raise ModelCardError(f"--init-weights: {exc}") from None
    t0 = time.perf_counter()
    cert = certificate(copy.deepcopy(model), problem.x_train(torch.float64), torch.as_tensor(problem.train_labels),
                       problem.task, init=init, init_decay=init_decay)
    learned = gate_value(cert)
    out: dict[str, Any] = {
        "stationarity_ratio": cert["ratio"], "residual_at_train": cert["residual_at_train"],
        "residual_at_random": cert["residual_at_random"], "method": cert["method"],
        "seconds": time.perf_counter() - t0,
        "theta0_available": init is not None,
        "learned_ratio": learned,
        "gate": GATE,
    }
    if learned is None:
        out["gate_verdict"] = "unavailable"
        out["gate_reason"] = ("the initial weights theta0 are not known (pass --init-weights with the weights the "
                              "training started from): the learned-part gate cannot be measured")
    else:
        out["gate_verdict"] = "passes" if learned <= GATE else "fails"
        out["learned_share_of_theta"] = cert["learned"]["share_of_theta"]
    return out


def _applicable(card: AuditCard, names: list[str] | None, task: str, budget: int, search_runs: int | None, seed: int,
                device: str) -> tuple[list[RunSpec], list[dict[str, str]]]:
    """The run specs of the attacks that can handle the model, and each refused one with its one-line reason."""
    wanted = list(names) if names else [MAIN_ATTACK[task], *BASELINES]
    chosen, refused = [], []
    for name in wanted:
        attack = plugins.attack(name)
        fields = {f.name for f in dataclasses.fields(attack.config_cls)}
        step = next((f for f in STEP_OPTIONS if f in fields), None)
        runs = (search_runs or DEFAULT_SEARCH_RUNS) if step else 1   # an attack without steps (weight_rows): once
        cfg = {step: max(1, budget // runs)} if step else {}
        spec = RunSpec(attack=name, attack_config=cfg, seed=seed, search_runs=runs, device=device,
                       search=RUN_SEARCH)   # as `reconbench run` searches: the attack's default first
        try:
            if task not in attack.tasks:
                raise IncompatibleError(f"attack {name!r} handles {', '.join(sorted(attack.tasks))} models, not {task}")
            _, target, _ = prepare(card, spec)
            if name in MAIN_ATTACK.values():
                check_second_order(target.model, tuple(card.data["input_shape"]))  # type: ignore[arg-type]
        except IncompatibleError as exc:
            if names:   # an attack the user asked for: refused with its one line
                raise
            refused.append({"attack": name, "reason": str(exc)})
            continue
        chosen.append(spec)
    if not chosen:
        raise IncompatibleError(f"no attack can handle this model: {refused[0]['reason']}")
    return chosen, refused


def _attack_record(spec: RunSpec, data: dict[str, Any], folder: Path, out: Path) -> dict[str, Any]:
    result = RUN_RESULT_FILE.decode(data, folder / "result.json")
    ev = result.evaluation
    summary, null = ev.numbers, ev.held_out
    figure = (ev.figures or {}).get("reconstructions")
    numbers = {}
    for key in ("reconstructed_calibrated", "reconstructed", "membership_auc", "membership_tpr_at_fpr",
                "membership_precision"):
        s = null.spread_of(key) or Spread()
        numbers[key] = {"value": summary.get(key), "null_mean": s.mean, "null_sd": s.std, "null_max": s.max}
    return {
        "attack": spec.attack, "config": spec.attack_config, "search_runs": spec.search_runs, "seed": spec.seed,
        "result": str((folder / "result.json").relative_to(out)),
        "figure": str((folder / figure).relative_to(out)) if isinstance(figure, str) else None,
        "outcome": plain(result.outcome), "n_train": summary.get("n_train"),
        "calibrated_threshold": summary.get("calibrated_threshold"),
        "calibration": ev.calibration.get("calibration_draws"),
        "null_draws": null.draws, "null_available": bool(null.available),
        "null_reason": null.reason, "numbers": numbers, "wall_seconds": result.wall_seconds,
        "membership_non_members": NON_MEMBERS_PER_MEMBER,
    }


def headline(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest calibrated count over the attacks run, with its attack and null."""
    best = None
    for r in results:
        value = r["numbers"]["reconstructed_calibrated"]["value"]
        if value is not None and (best is None or value > best["numbers"]["reconstructed_calibrated"]["value"]):
            best = r
    if best is None:
        return {"available": False, "reason": "no attack's held-out null could be drawn"}
    n = best["numbers"]["reconstructed_calibrated"]
    auc = best["numbers"]["membership_auc"]
    return {"available": True, "attack": best["attack"], "reconstructed": n["value"], "n_train": best["n_train"],
            "null_mean": n["null_mean"], "null_max": n["null_max"], "threshold": best["calibrated_threshold"],
            "membership_auc": auc["value"], "membership_auc_null_mean": auc["null_mean"]}


def rerunnable(command: str, family: str) -> str:
    """The audit's command as a shell runs it again from the same folder: a ``module:factory`` imported from a folder
    that is not installed is put on ``PYTHONPATH`` in front (``PYTHONPATH=. reconbench audit ...``), since a fresh
    shell would not find it."""
    folder = factory_folder(family) if ":" in family else None
    if folder is None or command.startswith("PYTHONPATH="):
        return command
    cwd, home = Path.cwd().resolve(), Path.home().resolve()
    if folder.is_relative_to(cwd):
        shown = shlex.quote(str(folder.relative_to(cwd)))
    elif folder.is_relative_to(home):   # "$HOME" expands in any shell and keeps the machine's layout out
        shown = '"$HOME"/' + shlex.quote(str(folder.relative_to(home)))
    else:
        shown = shlex.quote(str(folder))
    return f"PYTHONPATH={shown} {command}"


def python_call(weights: object, family: str, train: object, held_out: object, task: str, out: object,
                model_set: dict[str, Any] | None, binary_rule: str | None, pre: Preprocess, loss: str | None,
                init_weights: object, init_decay: float, attacks: Sequence[str] | None, budget: int,
                search_runs: object, seed: int, device: str) -> str:
    """The command line that reproduces an audit made from Python."""
    parts = ["reconbench", "audit", str(weights), "--family", family]
    for k, v in (model_set or {}).items():
        parts += ["--model-set", f"{k}={json.dumps(v) if isinstance(v, (list, tuple, dict)) else v}"]
    parts += ["--train", str(train), "--held-out", str(held_out), "--task", task]
    if binary_rule:
        parts += ["--binary-rule", binary_rule]
    default = Preprocess().to_dict()
    for key, value in pre.to_dict().items():
        if value != default[key]:
            shown = ",".join(str(x) for x in value) if isinstance(value, list) else str(value)
            parts += ["--preprocess", f"{key}={shown}"]
    if loss:
        parts += ["--loss", loss]
    if init_weights is not None:
        parts += ["--init-weights", str(init_weights)]
        if init_decay != 1.0:
            parts += ["--init-decay", repr(init_decay)]
    for a in attacks or []:
        parts += ["--attack", a]
    if budget != DEFAULT_BUDGET:
        parts += ["--budget", str(budget)]
    if search_runs:
        parts += ["--search-runs", str(search_runs)]
    if seed:
        parts += ["--seed", str(seed)]
    if device != "cpu":
        parts += ["--device", device]
    parts += ["--out", str(out)]
    return shlex.join(parts)

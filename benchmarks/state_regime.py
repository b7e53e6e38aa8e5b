"""How far a trained paper-size binary MLP is from a KKT point, measured from its training state alone.

For a finished training state of a 784/3072-1000-1000-1 ReLU MLP (first layer with bias, the `mlp` family) and
the card that travelled beside it, this script checks, on the CPU in about two minutes per target (one thread):

1. that the network the attacks load (the card's weights, re-made from the state as the bench re-makes them) is
   the network the state describes: W1 = scale * W1(0) + coef X recomputed in float64, and the first-layer
   pre-activations the trainer carries (`pre`) against X W1^T;
2. the distance from a KKT point of the max-margin problem by closed forms written here (not the certificate
   code): the non-negative least-squares fit theta ~ sum_i lambda_i y_i grad f(x_i) through the 500 x 500 Gram
   matrix of the per-sample gradients, split by layer, for theta, for the learned part theta - theta0, and for the
   same fit at held-out images (what the attack's loss could reach at images that were never trained on);
3. what float32 does to the last steps: the share of one GD step's update that rounds away when added to the
   float32 weights, and the positive samples whose float32 sigmoid is exactly 1 (zero gradient);
4. the loss over a few hundred more steps of the per-target float32 trainer, against the first-order prediction
   -lr |grad L|^2 per step.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/state_regime.py \\
        --state runs/paper/4eef26d9a3e7ba9d.safetensors --out benchmarks/results/regime/state_regime.json

The state files are not in the repository (8 MB each; the GPU slices bring them back under
runs/bench/paper/training/). The card JSON must lie beside the state (<key>.card.json).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.optimize import nnls

Layers = list[np.ndarray]   # W1 with its bias as the last column, W2, w3 (1 x width)


def per_sample_parts(layers: Layers, x: np.ndarray, alpha: float | None = None) -> dict[str, np.ndarray]:
    """The forward pass of f(x) = w3 relu(W2 relu(W1 x + b1)) and the factors of each sample's gradient:
    grad_w3 f = h2, grad_W2 f = a h1^T with a = w3 * 1[W2 h1 > 0], grad_[W1 b1] f = c [x, 1]^T with
    c = 1[W1 x + b1 > 0] * (W2^T a). With ``alpha`` the backward's step 1[z > 0] is Haim et al.'s surrogate
    sigmoid(alpha z), as the attacks take it (the forward stays ReLU)."""
    w1, w2, w3 = layers
    xt = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    z1 = xt @ w1.T
    h1 = np.maximum(z1, 0.0)
    z2 = h1 @ w2.T
    h2 = np.maximum(z2, 0.0)
    f = h2 @ w3[0]

    def step(z: np.ndarray) -> np.ndarray:
        return (z > 0).astype(z.dtype) if alpha is None else 0.5 * (1.0 + np.tanh(0.5 * alpha * z))

    a = step(z2) * w3[0][None, :]
    c = step(z1) * (a @ w2)
    return {"xt": xt, "h1": h1, "h2": h2, "a": a, "c": c, "f": f}


def gram_by_layer(parts: dict[str, np.ndarray], y: np.ndarray) -> list[np.ndarray]:
    """G_l[i, j] = <y_i grad_l f(x_i), y_j grad_l f(x_j)> for l = first layer (with bias), W2, w3."""
    yy = np.outer(y, y)
    return [yy * (parts["c"] @ parts["c"].T) * (parts["xt"] @ parts["xt"].T),
            yy * (parts["a"] @ parts["a"].T) * (parts["h1"] @ parts["h1"].T),
            yy * (parts["h2"] @ parts["h2"].T)]


def inner_by_layer(parts: dict[str, np.ndarray], y: np.ndarray, v: Layers) -> list[np.ndarray]:
    """b_l[i] = <v_l, y_i grad_l f(x_i)> for a vector v of the network's shape."""
    return [y * np.einsum("ij,jk,ik->i", parts["c"], v[0], parts["xt"]),
            y * np.einsum("ij,jk,ik->i", parts["a"], v[1], parts["h1"]),
            y * (parts["h2"] @ v[2][0])]


def nnls_fit(grams: list[np.ndarray], inners: list[np.ndarray], sq_norms: list[float]) -> dict[str, Any]:
    """min over lambda >= 0 of |v - J^T lambda|^2 = |v|^2 - 2 b^T lambda + lambda^T G lambda, solved as an NNLS
    problem in the factor of G (G = V diag(s) V^T; zero directions dropped); the residual by layer and in all."""
    g, b = np.sum(grams, axis=0), np.sum(inners, axis=0)
    s, vecs = np.linalg.eigh(g)
    keep = s > s.max() * 1e-12
    root = vecs[:, keep] * np.sqrt(s[keep])            # G = root root^T
    target = (vecs[:, keep].T @ b) / np.sqrt(s[keep])   # root^T lambda ~ target
    lam, _ = nnls(root.T, target, maxiter=50 * len(b))
    by_layer = [max(n - 2 * bl @ lam + lam @ gl @ lam, 0.0) for gl, bl, n in zip(grams, inners, sq_norms, strict=True)]
    total = max(sum(sq_norms) - 2 * b @ lam + lam @ g @ lam, 0.0)
    return {"lam": lam, "residual": math.sqrt(total / sum(sq_norms)), "residual_sq": total,
            "residual_by_layer": [math.sqrt(r / n) for r, n in zip(by_layer, sq_norms, strict=True)],
            "unexplained_by_layer": by_layer}


def fit_report(layers: Layers, v: Layers, x: np.ndarray, y: np.ndarray, alpha: float | None = None) -> dict[str, Any]:
    parts = per_sample_parts(layers, x, alpha)
    sq = [float((t * t).sum()) for t in v]
    fit = nnls_fit(gram_by_layer(parts, y), inner_by_layer(parts, y, v), sq)
    lam = fit.pop("lam")
    margins = y * parts["f"]
    on = lam > 0
    return {**fit, "norm_sq_by_layer": sq, "support": int(on.sum()), "n": len(y),
            "lambda_sum": float(lam.sum()), "lambda_median_on_support": float(np.median(lam[on])) if on.any() else 0.0,
            "margin_min": float(margins.min()), "margin_max": float(margins.max()),
            "margin_median": float(np.median(margins)),
            "margin_of_support_max": float(margins[on].max()) if on.any() else None,
            "wrong_sign": int((margins <= 0).sum())}


def engine_check(model: torch.nn.Module, theta: Layers, x: np.ndarray, y: np.ndarray, alpha: float) -> dict[str, Any]:
    """The attacks' own stationarity term (both engines, float64) at the training images with the multipliers of the
    closed-form fit, against the closed form's value: the attack's objective is the function measured here."""
    import copy

    from reconbench.attack.kkt.stationarity import make_engine

    parts = per_sample_parts(theta, x, alpha)
    fit = nnls_fit(gram_by_layer(parts, y), inner_by_layer(parts, y, theta), [float((t * t).sum()) for t in theta])
    out: dict[str, Any] = {"alpha": alpha, "closed_form": fit["residual_sq"]}
    for kind in ("gram", "autograd"):
        net = copy.deepcopy(model).double()
        engine, name = make_engine(net, alpha, "relu", kind)  # type: ignore[arg-type]
        _, residual = engine(torch.from_numpy(x))
        out[name] = float(residual(torch.from_numpy(fit["lam"] * y)[:, None]).detach())
    return out


def layers_of(model: torch.nn.Module) -> Layers:
    chain = model.linear_chain()   # type: ignore[operator]
    w1 = torch.cat([chain[0].weight, chain[0].bias[:, None]], dim=1)
    return [t.detach().double().cpu().numpy() for t in (w1, chain[1].weight, chain[2].weight)]


def lost_share(value32: torch.Tensor, update: torch.Tensor) -> dict[str, float]:
    """Of an update (float64) added to float32 values: the share of entries, and of its squared norm, that the
    float32 sum leaves unchanged (rounded away)."""
    moved = (value32 + update.to(torch.float32)) != value32
    lost = ~moved & (update != 0)
    sq = float((update ** 2).sum())
    return {"entries_lost": float(lost.double().mean()), "norm_sq_lost": float((update[lost] ** 2).sum()) / sq}


def float32_effects(layers64: Layers, model32: torch.nn.Module, x: np.ndarray, y01: np.ndarray, lr: float,
                    coef: torch.Tensor, pre: torch.Tensor, xs: np.ndarray) -> dict[str, Any]:
    """One full-batch BCE step at the released weights, in float64: which part of it float32 keeps."""
    ypm = 2 * y01 - 1
    parts = per_sample_parts(layers64, x)
    z = parts["f"]
    dz = (1.0 / (1.0 + np.exp(-z)) - y01) / len(z)      # dL/dz_i, mean BCE
    grad = [(parts["c"] * dz[:, None]).T @ parts["xt"], (parts["a"] * dz[:, None]).T @ parts["h1"],
            (dz @ parts["h2"])[None, :]]
    chain = model32.linear_chain()   # type: ignore[operator]
    w1b = torch.cat([chain[0].weight, chain[0].bias[:, None]], dim=1).detach()
    out: dict[str, Any] = {}
    for name, val, g in (("W1 and b1", w1b, grad[0]), ("W2", chain[1].weight.detach(), grad[1]),
                         ("w3", chain[2].weight.detach(), grad[2])):
        out[name] = lost_share(val, torch.from_numpy(-lr * g))
    # the trainer's own first-layer state: coef moves by -lr g1 (per sample), pre by -lr X X^T g1
    g1 = parts["c"] * dz[:, None]                        # (n, width): dL/d(pre-activation)
    out["coef"] = lost_share(coef.t(), torch.from_numpy(-lr * g1))
    out["pre"] = lost_share(pre, torch.from_numpy(-lr * (xs @ xs.T) @ g1))
    z32 = torch.from_numpy(z).float()
    positive = torch.from_numpy(ypm > 0)
    sat = positive & (torch.sigmoid(z32) == 1.0)
    grad_sq = sum(float((t * t).sum()) for t in grad)
    grad_norm_by_layer = [float(np.linalg.norm(t)) for t in grad]
    loss = float(np.mean(np.logaddexp(0.0, -ypm * z)))
    return {"update_lost": out, "positive_saturated": int(sat.sum()), "positive": int(positive.sum()),
            "negative_margins_above_16.6": int(((ypm < 0) & (-z > 16.6)).sum()),
            "loss_float64": loss, "grad_norm_sq": grad_sq, "grad_norm_by_layer": grad_norm_by_layer,
            "predicted_drop_per_step": lr * grad_sq}


def analyse(state: Path, card_json: Path, data_root: str | None, steps: int,
            alpha: float | None = None) -> dict[str, Any]:
    from safetensors.torch import load_file

    from reconbench import plugins
    from reconbench.targets.batched_training import from_recipes
    from reconbench.targets.cards import WEIGHTS_FILE, write_card_tensors
    from reconbench.targets.problems import build_problem
    from reconbench.targets.recipe import recorded_recipe
    from reconbench.targets.resumable import LOSS_EVERY, restore_card

    card = json.loads(card_json.read_text())
    recipe = recorded_recipe(card["recipe"])
    problem = build_problem(recipe.problem, data_root)
    t0 = time.perf_counter()
    report: dict[str, Any] = {"recipe_key": recipe.key(), "recipe": card["recipe"], "model_spec": card["model_spec"]}
    # the attack's view: the card re-made from the state as the bench re-makes it
    with tempfile.TemporaryDirectory() as tmp:
        states = Path(tmp) / "states"
        states.mkdir()
        (states / state.name).symlink_to(state.resolve())
        (states / card_json.name).symlink_to(card_json.resolve())
        restored = restore_card(recipe, Path(tmp) / "card", states, data_root=data_root)
        if isinstance(restored, str):
            # the card's weights were made on another machine (its rounding); make them here the same way and
            # load them through the attacks' loader all the same
            report["restore_card"] = f"not bitwise: {restored}; weights re-made on this machine"
            trainer, models = from_recipes([recipe], [problem], "cpu", loss_every=LOSS_EVERY)
            trainer.load(state, target=0)
            trainer.write_into(models)
            write_card_tensors(Path(tmp) / "card", models[0].cpu().eval(), problem)
            # what ModelCard.load_model does with the card's weights file (its sha256 check aside)
            family = plugins.model(card["family"])
            restored_model = family.build(tuple(card["input_shape"]), int(card["out_dim"]), dict(card["model_spec"]))
            restored_model.load_state_dict(load_file(str(Path(tmp) / "card" / WEIGHTS_FILE)))
            attacked32 = restored_model.float().eval()
        else:
            report["restore_card"] = "restored bitwise (weights sha256 equal the card's)"
            attacked32 = restored.load_model(torch.float32)
        seed = torch.Generator().manual_seed(recipe.train.seed)   # the trainer's init (training.build_model)
        init = plugins.model(card["family"]).build(tuple(card["input_shape"]), int(card["out_dim"]),
                                                   dict(card["model_spec"]), generator=seed)
        theta0 = layers_of(init.double())
    theta = layers_of(attacked32)
    # the state's own tensors, in float64
    raw = load_file(str(state))
    x = problem.x_train(torch.float64).flatten(1).numpy()
    y01 = problem.targets(problem.train_labels, torch.float64).numpy().reshape(-1)
    ypm = 2 * y01 - 1
    scale = float(raw["scale"][0])
    coef, pre = raw["coef"][0].double().numpy(), raw["pre"][0].double().numpy()
    w1 = scale * theta0[0][:, :-1] + coef @ x
    report["state"] = {
        "step": int(json.loads(raw_meta(state))["step"]),
        "W1_rel_diff_attack_vs_state": float(np.linalg.norm(theta[0][:, :-1] - w1) / np.linalg.norm(w1)),
        "pre_rel_diff_vs_X_W1T": float(np.linalg.norm(pre - x @ w1.T) / np.linalg.norm(pre)),
        "bias_rel_diff": float(np.linalg.norm(theta[0][:, -1] - raw["bias.0"][0].double().numpy())
                               / np.linalg.norm(theta[0][:, -1])),
        "W2_rel_diff": float(np.linalg.norm(theta[1] - raw["weight.1"][0].double().numpy()) / np.linalg.norm(theta[1])),
    }
    # margins as the trainer computes them (from pre) and as the attack's network computes them
    h1 = np.maximum(pre + raw["bias.0"][0].double().numpy()[None, :], 0)
    z_trainer = np.maximum(h1 @ theta[1].T, 0) @ theta[2][0]
    z_attack = per_sample_parts(theta, x)["f"]
    report["state"]["margin_rel_diff_trainer_vs_attack"] = float(np.abs(z_trainer - z_attack).max()
                                                                 / np.abs(z_attack).max())
    # where the drift lies: its share in the directions where X's singular values are below 1e-3 of the largest
    # (there a float32 X X^T, the Gram the trainer advances `pre` through, has no correct digit)
    u, sv, _ = np.linalg.svd(x, full_matrices=False)
    drift = pre - x @ w1.T
    weak = u[:, sv < 1e-3 * sv[0]]
    report["state"]["drift_share_in_weak_directions"] = float(((weak.T @ drift) ** 2).sum() / (drift ** 2).sum())
    report["state"]["x_singular_values"] = {"largest": float(sv[0]), "smallest_nonzero": float(sv[sv > 1e-10 * sv[0]][-1]),
                                             "below_1e-3_of_largest": int((sv < 1e-3 * sv[0]).sum())}
    # the trainer's own view: the smallest change of [W1 b1] that reproduces `pre` at the training images
    xt = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    dw = np.linalg.lstsq(xt, drift, rcond=None)[0].T
    trainer_view = [theta[0] + dw, theta[1], theta[2]]
    report["state"]["trainer_view_change_of_first_layer"] = float(np.linalg.norm(dw) / np.linalg.norm(theta[0]))
    learned = [t - t0_ for t, t0_ in zip(theta, theta0, strict=True)]
    report["norms"] = {"theta_sq_by_layer": [float((t * t).sum()) for t in theta],
                       "theta0_sq_by_layer": [float((t * t).sum()) for t in theta0],
                       "learned_sq_by_layer": [float((t * t).sum()) for t in learned]}
    # as many held-out images (never trained on) as training images, centred as the training images are
    pos = np.arange(min(len(ypm), len(problem.held_out_labels)))
    xte = problem.centred(problem.held_out_images(pos)).flatten(1).numpy()
    yte = 2.0 * problem.held_out_labels[pos] - 1.0
    report["fit"] = {"theta_at_train": fit_report(theta, theta, x, ypm),
                     "theta_at_heldout": fit_report(theta, theta, xte, yte),
                     "learned_at_train": fit_report(theta, learned, x, ypm),
                     "learned_at_heldout": fit_report(theta, learned, xte, yte),
                     "trainer_view_theta_at_train": fit_report(trainer_view, trainer_view, x, ypm)}
    # with as many images as the attack has candidates (m = 2n): the training set and n held-out images, against
    # 2n held-out images; the attack's final loss is comparable with these squared residuals (its other terms >= 0)
    pos2 = np.arange(min(2 * len(ypm), len(problem.held_out_labels)))
    x2 = problem.centred(problem.held_out_images(pos2)).flatten(1).numpy()
    y2 = 2.0 * problem.held_out_labels[pos2] - 1.0
    report["fit"]["theta_at_train_and_heldout"] = fit_report(theta, theta, np.concatenate([x, xte]),
                                                              np.concatenate([ypm, yte]))
    report["fit"]["theta_at_2n_heldout"] = fit_report(theta, theta, x2, y2)
    if alpha is not None:   # the same with the attack's surrogate backward, at the alpha of its best search run
        report["fit"]["surrogate_alpha"] = alpha
        report["fit"]["surrogate_theta_at_train"] = fit_report(theta, theta, x, ypm, alpha)
        report["fit"]["surrogate_theta_at_train_and_heldout"] = fit_report(
            theta, theta, np.concatenate([x, xte]), np.concatenate([ypm, yte]), alpha)
        report["fit"]["surrogate_theta_at_2n_heldout"] = fit_report(theta, theta, x2, y2, alpha)
        report["attack_engines"] = engine_check(attacked32, theta, x, ypm, alpha)
    model32_layers = theta
    trainer, _ = from_recipes([recipe], [problem], "cpu", loss_every=LOSS_EVERY)
    trainer.load(state, target=0)
    report["float32"] = float32_effects(model32_layers, attacked32, x, y01, recipe.train.lr,
                                        trainer.coef[0], trainer.pre[0], x)
    # a few hundred more steps of the per-target float32 trainer: its float64 loss and how far each layer moved,
    # against the first-order prediction from the float64 gradient at the start
    c0 = time.perf_counter()
    trainer.run(steps)
    seconds = time.perf_counter() - c0
    after_state = trainer.state_dicts()[0]
    after_layers = [torch.cat([after_state["0.weight"], after_state["0.bias"][:, None]], dim=1).double().numpy(),
                    after_state["1.weight"].double().numpy(), after_state["2.weight"].double().numpy()]
    loss_after = float(np.mean(np.logaddexp(0.0, -ypm * per_sample_parts(after_layers, x)["f"])))
    f32 = report["float32"]
    moved = [float(np.linalg.norm(b - a)) for a, b in zip(theta, after_layers, strict=True)]
    report["continued"] = {"steps": steps, "loss_before_float64": f32["loss_float64"],
                           "loss_after_float64": loss_after,
                           "observed_drop": f32["loss_float64"] - loss_after,
                           "predicted_drop_first_order": f32["predicted_drop_per_step"] * steps,
                           "moved_by_layer": moved,
                           "predicted_move_by_layer": [steps * recipe.train.lr * g for g in f32["grad_norm_by_layer"]],
                           "trainer_loss_readings": [float(h["loss"][0]) for h in trainer.history[-(steps // 100):]],
                           "seconds": seconds}
    report["seconds"] = time.perf_counter() - t0
    return report


#: Buzaglo et al.'s random-search ranges (appendix B): learning rate and the candidates' init sigma log-uniform,
#: lambda_min and the smooth ReLU's alpha uniform
PAPER_RANGES = {"lr": (1e-5, 1.0), "init_scale": (1e-6, 0.1), "lambda_min": (0.01, 0.5), "alpha": (10.0, 500.0)}


def cell_ranges(cell: dict[str, Any]) -> dict[str, Any]:
    """Each searched setting's smallest and largest value over the cell's runs, beside the papers' range."""
    runs = cell["runs"]
    out: dict[str, Any] = {"runs": len(runs), "final_loss_min": min(float(r["final_loss"]) for r in runs)}
    for key, (lo, hi) in PAPER_RANGES.items():
        vals = [float(r["config"][key]) for r in runs]
        out[key] = {"min": min(vals), "max": max(vals), "paper": [lo, hi],
                    "inside": all(lo <= v <= hi for v in vals)}
    best = min(runs, key=lambda r: float(r["final_loss"]))
    out["best_run"] = {"run": best["run"], "final_loss": float(best["final_loss"]), "config": best["config"]}
    return out


def raw_meta(state: Path) -> str:
    from safetensors import safe_open
    with safe_open(str(state), "pt") as f:
        return str(f.metadata()["reconbench"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--state", type=Path, action="append", required=True,
                   help="a finished training state (<key>.safetensors with <key>.card.json beside it); repeatable")
    p.add_argument("--out", type=Path, required=True, help="the JSON to write")
    p.add_argument("--steps", type=int, default=200, help="steps to continue the float32 trainer (a multiple of 100)")
    p.add_argument("--cell", type=Path, action="append", default=[],
                   help="a board's cell JSON: the range of each search run's setting is recorded (repeatable)")
    p.add_argument("--data-root", default=None, help="data folder (default: RECONBENCH_DATA)")
    args = p.parse_args(argv)
    if args.steps < 100 or args.steps % 100:
        p.error(f"--steps must be a positive multiple of 100 (the trainer reads its loss every 100 steps), got "
                f"{args.steps}")
    torch.set_num_threads(1)
    out: dict[str, Any] = {"script": "benchmarks/state_regime.py", "torch_threads": 1, "targets": {}}
    cells = [json.loads(cell.read_text()) for cell in args.cell]
    out["cells"] = {str(c["cell_id"]): cell_ranges(c) for c in cells}
    best_alpha = {str(c["target"]["recipe_key"]): float(min(c["runs"], key=lambda r: r["final_loss"])["config"]["alpha"])
                  for c in cells}
    for state in args.state:
        card_json = state.with_name(state.name.replace(".safetensors", ".card.json"))
        if not state.exists() or not card_json.exists():
            p.error(f"{state}: needs the state and its card JSON ({card_json.name}) beside it")
        out["targets"][state.stem] = analyse(state, card_json, args.data_root, args.steps,
                                             best_alpha.get(state.stem))
        print(json.dumps({state.stem: out["targets"][state.stem]["fit"]["theta_at_train"]["residual"]}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

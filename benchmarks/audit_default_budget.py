"""How long `reconbench audit` takes with its default budget on the three kinds of model of its "done means":
(a) a target reconbench trained (the quick start's default ``multiclass_kkt`` digits target), exported;
(b) a network built and trained by a plain PyTorch script (no reconbench code in the training), with its own input
standardisation; (c) a timm ResNet-18 with a small head. Each audit runs in this process, one after another, with
no ``--budget`` and no ``--search-runs`` (the defaults); wall and CPU seconds (``time.process_time``) are recorded
with the headline. The models are the ones tests/unit/auditing/test_audit.py audits with a smaller budget.

    OMP_NUM_THREADS=1 RECONBENCH_DATA=... python benchmarks/audit_default_budget.py --json \
        benchmarks/results/audit/audit_default_budget.json

docs/audit.md's timing table is rendered from the JSON (``python benchmarks/audit_default_budget.py --table
JSON``); tests/published/test_docs_numbers.py compares the two.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LIMIT_SECONDS = 300.0   # the bound for each audit on 2 cores with the default budget
BEGIN = ("<!-- audit-timings: python benchmarks/audit_default_budget.py --table "
         "benchmarks/results/audit/audit_default_budget.json -->")
END = "<!-- /audit-timings -->"


def _train(net: Any, x: Any, y: Any, steps: int, lr: float, loss: str) -> None:
    import torch

    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        out = net(x)
        value = torch.nn.functional.binary_cross_entropy_with_logits(out.reshape(-1), y.double()) if loss == "bce" \
            else torch.nn.functional.cross_entropy(out, y.long())
        value.backward()
        opt.step()


def exported(root: Path) -> dict[str, Any]:
    """(a) the default run's target, trained by reconbench, exported to plain files."""
    from reconbench.auditing.export import export_card
    from reconbench.cli.recipe_options import recipe_from_options
    from reconbench.plugins import attack
    from reconbench.targets.cache import train_target

    recipe = recipe_from_options({}, base=attack("multiclass_kkt").default_recipe)   # as `reconbench run` builds it
    card = train_target(recipe, root / "card", quiet=True)
    made = export_card(card, root / "owner")
    return {"weights": root / "owner" / "weights.safetensors", "family": "mlp",
            "model_set": {"widths": [1000]}, "train": root / "owner" / "train.npz",
            "held_out": root / "owner" / "held.npz", "task": "multiclass", "preprocess": {"mean": "train"},
            "init_weights": root / "owner" / "init.safetensors", "loss": "ce", "_command": made["command"]}


def plain(root: Path) -> dict[str, Any]:
    """(b) a two-layer network trained by a plain PyTorch loop on 10 digits (5 per class), inputs standardised."""
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from _helpers.audit_kit import digits_split, small_mlp

    xtr, ytr, xho, yho = digits_split(5)
    torch.manual_seed(0)
    net = small_mlp((1, 8, 8), 1).double()
    x = (torch.as_tensor(xtr, dtype=torch.float64)[:, None] / 255.0 - 0.3) / 0.35
    _train(net, x, torch.as_tensor(ytr), steps=400, lr=0.2, loss="bce")
    torch.save(net.state_dict(), root / "net.pt")
    np.savez(root / "train.npz", images=xtr, labels=ytr)
    np.savez(root / "held.npz", images=xho, labels=yho)
    return {"weights": root / "net.pt", "family": "_helpers.audit_kit:small_mlp", "train": root / "train.npz",
            "held_out": root / "held.npz", "task": "binary", "preprocess": {"mean": "0.3", "std": 0.35}}


def timm_resnet(root: Path) -> dict[str, Any]:
    """(c) timm's resnet18 (one block per stage, 8-48 channels, a 48-wide head) trained 30 steps on 10 digits."""
    import timm
    import torch
    from safetensors.torch import save_file
    from sklearn.datasets import load_digits

    kwargs = {"layers": [1, 1, 1, 1], "channels": [8, 16, 32, 48]}
    bunch = load_digits()
    images = np.round(bunch.images * 255.0 / 16.0).astype(np.uint8)
    train = np.concatenate([np.flatnonzero(bunch.target == c)[:1] for c in range(10)])
    held = np.setdiff1d(np.arange(len(images)), train)
    torch.manual_seed(0)
    net = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1,
                            **{k: tuple(v) for k, v in kwargs.items()})  # type: ignore[arg-type]
    net.train()
    _train(net.float(), torch.as_tensor(images[train], dtype=torch.float32)[:, None] / 255.0,
           torch.as_tensor(bunch.target[train]), steps=30, lr=0.05, loss="ce")
    net.eval()
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(root / "resnet.safetensors"))
    np.savez(root / "train.npz", images=images[train], labels=bunch.target[train])
    np.savez(root / "held.npz", images=images[held], labels=bunch.target[held])
    return {"weights": root / "resnet.safetensors", "family": "resnet18", "model_set": kwargs,
            "train": root / "train.npz", "held_out": root / "held.npz", "task": "multiclass"}


MODELS: dict[str, tuple[str, Callable[[Path], dict[str, Any]]]] = {
    "a": ("(a) `mlp` 64-1000-10, the quick start's `digits` target, trained by reconbench and exported", exported),
    "b": ("(b) a 64-64-1 network trained by a plain PyTorch script, inputs standardised", plain),
    "c": ("(c) timm `resnet18` (8-48 channels, a 48-wide head), 30 plain training steps", timm_resnet),
}


def measure(key: str) -> dict[str, Any]:
    import reconbench

    what, build = MODELS[key]
    with tempfile.TemporaryDirectory(prefix=f"audit-{key}-") as tmp:
        root = Path(tmp)
        args = build(root)
        args.pop("_command", None)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        rec = reconbench.audit(**args, out=root / "audit", quiet=True)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    head = rec["headline"]
    return {"model": key, "what": what, "wall_seconds": wall, "cpu_seconds": cpu, "under_limit": wall < LIMIT_SECONDS,
            "attacks": [a["attack"] for a in rec["attacks"]], "n_train": head.get("n_train"),
            "reconstructed_calibrated": head.get("reconstructed"), "null_max": head.get("null_max"),
            "membership_auc": head.get("membership_auc")}


def table(data: dict[str, Any]) -> str:
    """docs/audit.md's timing table (between its markers) from the benchmark's JSON."""
    lines = [BEGIN, "| model | attacks | wall | CPU | under 5 min | calibrated headline (null max) | membership AUC |",
             "|---|---|---:|---:|---|---|---|"]
    for r in data["audits"]:
        auc = "n/a" if r["membership_auc"] is None else f"{r['membership_auc']:.2f}"
        lines.append(f"| {r['what']} | {', '.join(f'`{a}`' for a in r['attacks'])} | {r['wall_seconds']:.0f} s | "
                     f"{r['cpu_seconds']:.0f} s | {'yes' if r['under_limit'] else 'no'} | "
                     f"{r['reconstructed_calibrated']} of {r['n_train']} ({r['null_max']:.0f}) | {auc} |")
    return "\n".join([*lines, END])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--only", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    ap.add_argument("--table", type=Path, help="print docs/audit.md's table from this JSON and exit")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    out: dict[str, Any] = {"command": "OMP_NUM_THREADS=1 python benchmarks/audit_default_budget.py " + " ".join(sys.argv[1:]),
           "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                       "load_average_at_start": list(os.getloadavg())},
           "limit_seconds": LIMIT_SECONDS, "audits": []}
    for key in args.only:
        r = measure(key)
        print(json.dumps(r), flush=True)
        out["audits"].append(r)
    out["machine"]["load_average_at_end"] = list(os.getloadavg())
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

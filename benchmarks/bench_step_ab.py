"""The batched KKT attack step of this checkout against another commit's, side by side in one invocation.

    git worktree add ../reconbench-6567deb 6567deb          # the commit to compare against
    OMP_NUM_THREADS=1 python benchmarks/bench_step_ab.py --base ../reconbench-6567deb --repeats 5 \\
        --json benchmarks/results/kkt/bench_step_ab.json

Each measurement is a fresh process that imports ``reconbench`` (and the built-in plugins, which live in
``plugins/`` here and in ``reconbench_plugins/`` in older commits) from one tree only, through a temporary folder
of links put first on PYTHONPATH. The two trees run alternately (the order flips every repeat), so that a machine
whose speed drifts (a shared one) slows both alike; the report gives the median steps per second of each side and
the median of the paired ratios, by wall time (the step loop) and by the process's CPU time (the whole attack
call, which a machine shared with other processes disturbs less).

The workload is the search of a cpu-mini MNIST cell: ``haim_binary_kkt`` on a 784-1000-1000-1 ReLU MLP (random
weights: a step's cost does not depend on them), ``--runs`` search runs advanced together by the batched engine
(the ``run`` path), m candidates each, on one thread. A small lr keeps every run finite so that both sides do the
same steps. Each process also saves its final candidates and multipliers; the report gives the largest
difference between the sides relative to the largest magnitude (0.0: bit-identical).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ((40, "float64"), (40, "float32"), (200, "float64"), (200, "float32"))


def child(m: int, dtype_name: str, runs: int, steps: int, out: str) -> None:
    """One measurement, in the process of the tree on PYTHONPATH: writes seconds per step and the final state."""
    import torch

    from reconbench import plugins
    from reconbench.attack.candidates import candidate_labels
    from reconbench.config import build_config
    from reconbench.interfaces import AttackTarget, Knowledge
    try:
        from reconbench.runs import RunSpec, sample_configs
    except ImportError:   # trees from before the runs package (6567deb): the same names lived in attack/pipeline.py
        from reconbench.attack.pipeline import RunSpec, sample_configs  # type: ignore[no-redef]

    torch.set_num_threads(1)
    dtype = {"float64": torch.float64, "float32": torch.float32}[dtype_name]
    net = plugins.get("models", "mlp").build((1, 28, 28), 1, {"widths": [1000, 1000]},
                                             generator=torch.Generator().manual_seed(0))
    knowledge = Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 28, 28),
                          class_counts=[m // 2, m - m // 2])
    target = AttackTarget(model=net.to(dtype), family="mlp", homogeneity_degree=3, knowledge=knowledge, dtype=dtype,
                          device=torch.device("cpu"))
    attack = plugins.get("attacks", "haim_binary_kkt")
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": steps, "lr": 1e-4, "eval_every": 100},
                   search_runs=max(runs, 2), seed=0)
    configs = [build_config(attack.config_cls, c, "bench") for c in sample_configs(attack, spec)][:runs]
    labels = candidate_labels("binary", 2, m)

    def go() -> tuple[list[Any], float]:
        x0s, gens = [], []
        for k, cfg in enumerate(configs):
            g = torch.Generator().manual_seed(1000 + k)
            x0s.append((torch.randn(m, 1, 28, 28, generator=g, dtype=torch.float64) * cfg.init_scale).to(dtype))
            gens.append(g)
        seconds: list[float] = []
        outs = attack.run_batched(target, x0s, labels, configs, generators=gens,
                                  on_done=lambda i, o, b: seconds.append(float(b["seconds"])))
        return outs, seconds[0]

    go()   # warm-up (allocations, first-call costs)
    cpu0 = time.process_time()
    outs, seconds = go()
    cpu = time.process_time() - cpu0   # the whole call: the step loop, the prologue and the final evaluation
    torch.save({"seconds_per_step": seconds / steps, "cpu_seconds_per_step": cpu / steps, "steps": [o.steps for o in outs],
                "candidates": torch.stack([o.candidates for o in outs]).double(),
                "multipliers": torch.stack([o.multipliers for o in outs]).double()}, out)



def product_floor(m: int, dtype_name: str, runs: int, repeats: int, out: str, form: str = "gram") -> None:
    """The step's unavoidable arithmetic alone, on one thread: its six products by a large weight matrix and the
    Gram products, timed by the process's CPU clock (median of ``repeats``); writes seconds per step.

    One step for 784-1000-1000-1 needs, per run, the forward products x W_0^T and H_1 W_1^T, the deltas' D_1 W_1,
    and their three adjoints (Zbar_1 W_1, (Dbar_0 * S_0) W_1^T, Zbar_0 W_0); each needs the one before, so none can
    be merged or dropped (docs/performance.md). The Gram products are H_k H_k^T, D_k D_k^T, G_k D_k and P_k H_k,
    the engine's default form (``form="gram"``); with ``form="factored"`` the output layer (one output) takes only
    J = H_2^T C, H_2 J and C J^T instead, the engine's opt-in ``layer_form="auto"``. No step of either form can be
    faster than its products at this BLAS's speed.
    """
    import torch

    torch.set_num_threads(1)
    dtype = {"float64": torch.float64, "float32": torch.float32}[dtype_name]
    g = torch.Generator().manual_seed(0)
    d_in, h = 784, 1000
    w0, w1 = torch.randn(h, d_in, generator=g, dtype=dtype), torch.randn(h, h, generator=g, dtype=dtype)
    w0t, w1t = w0.T.contiguous(), w1.T.contiguous()
    x = torch.randn(runs, m, d_in, generator=g, dtype=dtype)
    a = torch.randn(runs, m, h, generator=g, dtype=dtype)
    c = torch.randn(runs, m, 1, generator=g, dtype=dtype)
    grams = (x, a, a) if form == "gram" else (x, a)

    def once() -> None:
        flat = a.flatten(0, 1)
        torch.mm(x.flatten(0, 1), w0t)            # Z_0 = x W_0^T
        torch.mm(flat, w1t)                       # Z_1 = H_1 W_1^T
        torch.mm(flat, w1)                        # D_1 W_1
        torch.mm(flat, w1)                        # Zbar_1 W_1
        torch.mm(flat, w1t)                       # (Dbar_0 * S_0) W_1^T
        torch.mm(flat, w0)                        # Zbar_0 W_0
        for k in grams:                           # G_k = H_k H_k^T
            gk = torch.bmm(k, k.transpose(1, 2))
            torch.bmm(gk, k)                      # P_k H_k (and G_k D_k, same shapes)
        if form != "gram":                        # the output layer: J = H_2^T C, H_2 J, C J^T
            j = torch.bmm(a.transpose(1, 2), c)
            torch.bmm(a, j)
            torch.bmm(c, j.transpose(1, 2))
        for _ in range(2):                        # D_k D_k^T for the two hidden widths
            pk = torch.bmm(a, a.transpose(1, 2))
            torch.bmm(pk, a)

    for _ in range(3):
        once()
    seconds = []
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(10):
            once()
        seconds.append((time.process_time() - t0) / 10)
    torch.save({"floor_seconds_per_step": statistics.median(seconds)}, out)

def import_path(tree: Path, folder: Path) -> str:
    """A folder holding links to the tree's ``reconbench`` and built-in plugins (as ``reconbench_plugins``)."""
    folder.mkdir(parents=True, exist_ok=True)
    plugins_dir = tree / "plugins" if (tree / "plugins" / "kkt_attacks.py").exists() else tree / "reconbench_plugins"
    for name, src in (("reconbench", tree / "reconbench"), ("reconbench_plugins", plugins_dir)):
        if not src.is_dir():
            raise SystemExit(f"{tree} holds no {src.name}/ folder: pass the root of a reconbench checkout")
        (folder / name).symlink_to(src.resolve(), target_is_directory=True)
    return str(folder)


def measure(path: str, m: int, dtype: str, runs: int, steps: int, scratch: Path, tag: str) -> dict[str, Any]:
    import torch

    out = scratch / f"{tag}.pt"
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "child", "--m", str(m), "--dtype", dtype, "--runs",
           str(runs), "--steps", str(steps), "--out", str(out)]
    subprocess.run(cmd, check=True, env=env, cwd=scratch)
    return torch.load(out)


def measure_floor(m: int, dtype: str, runs: int, scratch: Path, form: str = "gram") -> float:
    """Seconds per step of the step's products alone (``product_floor``), in a fresh one-thread process."""
    import torch

    out = scratch / "floor.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "floor", "--m", str(m), "--dtype", dtype, "--runs",
           str(runs), "--out", str(out), "--floor-form", form]
    subprocess.run(cmd, check=True, env=env, cwd=scratch)
    return float(torch.load(out)["floor_seconds_per_step"])


def commit_of(tree: Path) -> str:
    """The commit a tree is checked out at (``+dirty`` when its code differs from it)."""
    sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "reconbench", "plugins",
                            "reconbench_plugins"], capture_output=True, text=True)
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def relative_difference(a: Any, b: Any) -> float:
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-300)
    return float((a - b).abs().max()) / scale


def floor_gflop(m: int, runs: int, form: str = "gram") -> float:
    """Floating-point operations (in units of 1e9) of one ``product_floor`` call: the six weight products and the
    Gram products it times (``form``: as in :func:`product_floor`)."""
    d_in, h = 784, 1000
    weights = 2 * runs * m * (2 * d_in * h + 4 * h * h)
    if form == "gram":
        grams = 4 * runs * m * m * (d_in + 2 * h) + 2 * 4 * runs * m * m * h
    else:
        grams = 4 * runs * m * m * (d_in + h) + 2 * 4 * runs * m * m * h + 3 * 2 * runs * m * h
    return (weights + grams) / 1e9


def blas_record() -> dict[str, Any]:
    """The BLAS of this checkout's process (what `reconbench doctor` measures), as every run records it."""
    from reconbench import blas

    return {**blas.summary(), "line": blas.provenance_line(blas.summary())}


def write_report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    argv = " ".join(sys.argv[1:]).replace(str(args.base), f"<a worktree of {commit_of(args.base)}>")
    report = {"command": "OMP_NUM_THREADS=1 python benchmarks/bench_step_ab.py " + argv,
              "base_commit": commit_of(args.base), "head_commit": commit_of(args.head),
              "workload": "haim_binary_kkt, 784-1000-1000-1 MLP, batched engine, 1 thread",
              "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                          "shared": True}, "blas": blas_record(), "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    # RECONBENCH_FAST_BLAS=1 acts here as in the reconbench command: this process restarts with the shim preloaded,
    # and the measuring children inherit it (without this a plain script ran the stock path whatever the variable)
    from reconbench.fast_blas import reexec_with_shim

    reexec_with_shim()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("child")
    c.add_argument("--m", type=int, required=True)
    c.add_argument("--dtype", required=True)
    c.add_argument("--runs", type=int, required=True)
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--out", required=True)
    f = sub.add_parser("floor")
    f.add_argument("--m", type=int, required=True)
    f.add_argument("--dtype", required=True)
    f.add_argument("--runs", type=int, required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--floor-form", default="gram", choices=["gram", "factored"])
    ap.add_argument("--base", type=Path, help="root of the checkout to compare against (a git worktree)")
    ap.add_argument("--head", type=Path, default=ROOT, help="root of the checkout measured (default: this one)")
    ap.add_argument("--runs", type=int, default=2, help="search runs advanced together (cpu-mini: 2)")
    ap.add_argument("--steps", type=int, default=40, help="attack steps timed per measurement")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shapes", nargs="+", default=[f"{m}:{d}" for m, d in SHAPES],
                    help="m:dtype pairs to measure (default: m = 40 and 200, float64 and float32)")
    ap.add_argument("--json", type=Path, help="report file (rewritten after each shape)")
    ap.add_argument("--floor-form", default="gram", choices=["gram", "factored"],
                    help="the output layer's products in the floor: gram (its Gram matrices, the engine's default) "
                         "or factored (J = H^T C, H J, C J^T: the engine's opt-in layer_form='auto')")
    args = ap.parse_args()
    if args.mode == "child":
        child(args.m, args.dtype, args.runs, args.steps, args.out)
        return
    if args.mode == "floor":
        product_floor(args.m, args.dtype, args.runs, 7, args.out, args.floor_form)
        return
    if args.base is None:
        ap.error("--base: the root of the checkout to compare against is required (e.g. a worktree of 6567deb)")
    with tempfile.TemporaryDirectory(prefix="bench-step-ab-") as tmp:
        scratch = Path(tmp)
        paths = {"base": import_path(args.base, scratch / "base"), "head": import_path(args.head, scratch / "head")}
        rows = []
        for m, dtype in ((int(x.split(":")[0]), x.split(":")[1]) for x in args.shapes):
            per_side: dict[str, list[float]] = {"base": [], "head": []}
            per_side_cpu: dict[str, list[float]] = {"base": [], "head": []}
            last: dict[str, Any] = {}
            floors: list[float] = []
            for rep in range(args.repeats):
                floors.append(measure_floor(m, dtype, args.runs, scratch, args.floor_form))   # between the sides
                order = ("base", "head") if rep % 2 == 0 else ("head", "base")
                for side in order:
                    res = measure(paths[side], m, dtype, args.runs, args.steps, scratch, side)
                    per_side[side].append(1.0 / res["seconds_per_step"])
                    per_side_cpu[side].append(1.0 / res["cpu_seconds_per_step"])
                    last[side] = res
            floor = statistics.median(floors)
            head_cpu = 1.0 / statistics.median(per_side_cpu["head"])
            ratios = [h / b for h, b in zip(per_side["head"], per_side["base"], strict=True)]
            cpu_ratios = [h / b for h, b in zip(per_side_cpu["head"], per_side_cpu["base"], strict=True)]
            row = {"m": m, "dtype": dtype, "runs": args.runs, "steps": args.steps,
                   "steps_per_second": per_side, "median_base": statistics.median(per_side["base"]),
                   "median_head": statistics.median(per_side["head"]), "median_ratio": statistics.median(ratios),
                   "steps_per_cpu_second": per_side_cpu, "median_cpu_ratio": statistics.median(cpu_ratios),
                   "floor_seconds_per_step": floor,
                   "floor_form": args.floor_form, "floor_gflops": floor_gflop(m, args.runs, args.floor_form) / floor,
                   "head_cpu_seconds_per_step": head_cpu,
                   "base_cpu_seconds_per_step": 1.0 / statistics.median(per_side_cpu["base"]),
                   "head_over_floor": head_cpu / floor,
                   "floor_bound_on_cpu_ratio": statistics.median(per_side_cpu["base"]) ** -1 / floor,
                   "same_steps": last["base"]["steps"] == last["head"]["steps"],
                   "candidates_max_rel_diff": relative_difference(last["base"]["candidates"], last["head"]["candidates"]),
                   "multipliers_max_rel_diff": relative_difference(last["base"]["multipliers"],
                                                                   last["head"]["multipliers"])}
            rows.append(row)
            if args.json:
                write_report(args, rows)
            print(f"m={m:4d} {dtype}: base {row['median_base']:.2f} steps/s, head {row['median_head']:.2f} steps/s, "
                  f"median ratio {row['median_ratio']:.2f}x (per CPU second {row['median_cpu_ratio']:.2f}x); "
                  f"max relative difference: candidates "
                  f"{row['candidates_max_rel_diff']:.2g}, multipliers {row['multipliers_max_rel_diff']:.2g}; "
                  f"the products alone {1e3 * floor:.1f} ms/step: no engine can beat the base by more than "
                  f"{row['floor_bound_on_cpu_ratio']:.2f}x per CPU second; head at {row['head_over_floor']:.2f}x the "
                  f"products ({row['floor_gflops']:.0f} GFLOP/s in them)",
                  flush=True)


if __name__ == "__main__":
    main()

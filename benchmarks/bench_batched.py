"""The batched KKT search against today's one-run-after-another loop, side by side in one process.

    # CPU: a cpu-mini CIFAR-10 binary cell (12 runs, m = 40, 3072-1000-1000-1), pairs of (sequential, batched)
    OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 python benchmarks/bench_batched.py cpu --steps 20 --repeats 3 \\
        --json benchmarks/results/kkt/bench_batched_cpu.json
    # GPU: 16 runs x m = 40 CIFAR binary batched (float64 and float32), and the papers' shape (m = 1000,
    # 3072-1000-1000-1, float64) as one run, batched engine vs the sequential loop
    python benchmarks/bench_batched.py gpu --device cuda --steps 400 --json benchmarks/results/kkt/bench_batched_h100.json

Timings are of the attack loop only (the target and the starts are built first). The network has random
weights (as in bench_kkt.py): the cost of a step does not depend on them, and a small lr (1e-3) keeps every
run finite so that both sides do the same number of steps (checked and recorded). The runs differ in the
papers' other sampled options (alpha, lambda_min, init scale).

``cpu`` alternates sequential and batched ``--repeats`` times (pairing keeps the ratio meaningful on a machine
whose speed drifts) and reports the median of each and the median of the pairwise ratios.
``gpu`` reports ms per batched step (a step advances every run of the batch) after a warm-up; the CUDA graph
capture and the checks every ``sync_every`` steps are inside the timed loop's setup and loop respectively.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

import torch

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels
from reconbench.config import build_config
from reconbench.interfaces import AttackTarget, Knowledge
from reconbench.runs import RunSpec, sample_configs

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def make_target(widths: list[int], dtype: torch.dtype, device: str, m: int) -> AttackTarget:
    gen = torch.Generator().manual_seed(0)
    net = plugins.get("models", "mlp").build((3, 32, 32), 1, {"widths": widths}, generator=gen)
    knowledge = Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(3, 32, 32),
                          class_counts=[m // 2, m - m // 2])
    return AttackTarget(model=net.to(dtype).to(device), family="mlp", homogeneity_degree=len(widths) + 1,
                        knowledge=knowledge, dtype=dtype, device=torch.device(device))


def make_runs(runs: int, m: int, steps: int, target: AttackTarget, extra: dict[str, Any]) -> tuple[Any, list[Any]]:
    attack = plugins.get("attacks", "haim_binary_kkt")
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": steps, "lr": 1e-3, "eval_every": 100, **extra},
                   search_runs=runs, seed=0)
    configs = [build_config(attack.config_cls, c, "bench") for c in sample_configs(attack, spec)]
    return attack, configs


def starts(configs: list[Any], m: int, target: AttackTarget) -> tuple[list[torch.Tensor], list[torch.Generator]]:
    x0s, gens = [], []
    for k, cfg in enumerate(configs):
        g = torch.Generator().manual_seed(1000 + k)
        x0s.append((torch.randn(m, 3, 32, 32, generator=g, dtype=torch.float64) * cfg.init_scale)
                   .to(dtype=target.dtype, device=target.device))
        gens.append(g)
    return x0s, gens


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_sequential(attack: Any, target: AttackTarget, labels: torch.Tensor, configs: list[Any], m: int) -> dict[str, Any]:
    x0s, gens = starts(configs, m, target)
    sync(target.device)
    t0, c0 = time.perf_counter(), time.process_time()
    outs = [attack.run(target, x0, labels, c, generator=g) for x0, c, g in zip(x0s, configs, gens, strict=True)]
    sync(target.device)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "steps": [o.steps for o in outs],
            "stopped": [o.stopped for o in outs]}


def time_batched(attack: Any, target: AttackTarget, labels: torch.Tensor, configs: list[Any], m: int) -> dict[str, Any]:
    x0s, gens = starts(configs, m, target)
    infos: list[dict[str, Any]] = []
    sync(target.device)
    t0, c0 = time.perf_counter(), time.process_time()
    outs = attack.run_batched(target, x0s, labels, configs, generators=gens,
                            on_done=lambda i, o, info: infos.append(info))
    sync(target.device)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    loop = sum({json.dumps(i["runs"]): i["seconds"] for i in infos}.values())
    return {"seconds": seconds, "cpu_seconds": cpu, "loop_seconds": loop, "steps": [o.steps for o in outs],
            "stopped": [o.stopped for o in outs], "batch": infos[0] if infos else {}}


def conditions(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(), "device": device,
                            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                            "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
                            "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                            "loadavg_before": os.getloadavg()}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def cpu_cell(args: argparse.Namespace) -> dict[str, Any]:
    before = conditions(args.device)
    dtype = DTYPES[args.dtype]
    target = make_target([1000, 1000], dtype, args.device, args.m)
    attack, configs = make_runs(args.runs, args.m, args.steps, target, {})
    labels = candidate_labels("binary", 2, args.m).to(target.device)
    if args.side != "both":   # one side only, for timing whole processes from outside
        one = (time_sequential if args.side == "sequential" else time_batched)(attack, target, labels, configs, args.m)
        return {"side": args.side, **one, "conditions": before}
    pairs = []
    for _ in range(args.repeats):
        seq = time_sequential(attack, target, labels, configs, args.m)
        bat = time_batched(attack, target, labels, configs, args.m)
        pairs.append({"sequential": seq, "batched": bat, "ratio": seq["seconds"] / bat["seconds"],
                      "cpu_ratio": seq["cpu_seconds"] / bat["cpu_seconds"]})
        print(f"sequential {seq['seconds']:.2f}s (cpu {seq['cpu_seconds']:.2f}s)  batched {bat['seconds']:.2f}s "
              f"(cpu {bat['cpu_seconds']:.2f}s)  ratio {pairs[-1]['ratio']:.2f}", flush=True)
    seq_med = statistics.median(p["sequential"]["seconds"] for p in pairs)
    bat_med = statistics.median(p["batched"]["seconds"] for p in pairs)
    run_steps = args.runs * args.steps
    return {
        "benchmark": "cpu-mini CIFAR-10 binary cell: sequential runs vs one batched computation",
        "shape": {"runs": args.runs, "m": args.m, "layers": [3072, 1000, 1000, 1], "dtype": args.dtype,
                  "steps_per_run": args.steps},
        "conditions": {**before, "loadavg_after": os.getloadavg()},
        "pairs": pairs,
        "median_seconds": {"sequential": seq_med, "batched": bat_med},
        "ms_per_run_step": {"sequential": 1e3 * seq_med / run_steps, "batched": 1e3 * bat_med / run_steps},
        "median_pairwise_speedup": statistics.median(p["ratio"] for p in pairs),
        "median_pairwise_cpu_time_ratio": statistics.median(p["cpu_ratio"] for p in pairs),
        "all_runs_did_every_step": all(s == args.steps for p in pairs for side in ("sequential", "batched")
                                       for s in p[side]["steps"]),
    }


def gpu_bench(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    cases = [("16 runs x m=40 CIFAR binary, batched", 16, 40, "float64", {}, True),
             ("16 runs x m=40 CIFAR binary, batched", 16, 40, "float32", {}, True),
             ("16 runs x m=40 CIFAR binary, batched, TF32 opt-in", 16, 40, "float32", {"tf32": True}, True),
             ("1 run x m=40 CIFAR binary, sequential loop", 1, 40, "float64", {}, False),
             (f"papers' shape, 1 run x m={args.papers_m}, batched engine", 1, args.papers_m, "float64", {}, True),
             (f"papers' shape, 1 run x m={args.papers_m}, sequential loop", 1, args.papers_m, "float64", {}, False)]
    for label, runs, m, dt, extra, batched in cases:
        target = make_target([1000, 1000], DTYPES[dt], args.device, m)
        steps = args.steps if batched else max(args.steps // 4, 1)
        attack, configs = make_runs(runs, m, steps, target, {"sync_every": args.sync_every, **extra})
        labels = candidate_labels("binary", 2, m).to(target.device)
        warm = make_runs(runs, m, args.warmup, target, {"sync_every": args.sync_every, **extra})[1]
        (time_batched if batched else time_sequential)(attack, target, labels, warm, m)   # warm-up (cuBLAS, caches)
        res = (time_batched if batched else time_sequential)(attack, target, labels, configs, m)
        loop = res.get("loop_seconds", res["seconds"])
        row = {"case": label, "runs": runs, "m": m, "dtype": dt, "steps": steps, **res,
               "ms_per_step": 1e3 * loop / steps, "ms_per_run_step": 1e3 * loop / steps / (1 if batched else runs)}
        if not batched:   # the sequential loop advances one run at a time
            row["ms_per_step"] = 1e3 * loop / (steps * runs)
        rows.append(row)
        print(f"{label} {dt}: {row['ms_per_step']:.3f} ms/step", flush=True)
        del target
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return {"benchmark": "batched KKT engine on a GPU: ms per (batched) step", "conditions": conditions(args.device),
            "sync_every": args.sync_every, "rows": rows,
            "targets": {"16x40_float64_ms_per_step": 1.0, "papers_shape_float64_ms_per_step": 1.5}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["cpu", "gpu"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--m", type=int, default=40)
    parser.add_argument("--steps", type=int, default=20, help="steps per run (gpu: batched cases; 200 is a good "
                                                              "figure there)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", choices=["both", "sequential", "batched"], default="both",
                        help="cpu: run one side only (to time whole processes from outside)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32", help="cpu: the cpu-mini suite's float32")
    parser.add_argument("--papers-m", type=int, default=1000, help="gpu: m of the papers' shape (smaller only to "
                                                                    "try the script on a CPU)")
    parser.add_argument("--warmup", type=int, default=20, help="gpu: steps of each case's warm-up call")
    parser.add_argument("--sync-every", type=int, default=100, help="gpu: K, steps between host checks")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = cpu_cell(args) if args.which == "cpu" else gpu_bench(args)
    text = json.dumps(result, indent=1)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("pairs", "rows")}, indent=1))


if __name__ == "__main__":
    main()

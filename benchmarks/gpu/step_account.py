"""Every operation of one batched KKT attack step at the papers' size, with its FLOPs or bytes, and a model of its
time on an H100 (docs/performance.md, "The attack step on a GPU").

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/gpu/step_account.py \\
        benchmarks/results/gpu/step_account.json --m 1000 --runs 4 --check-runs 2

The step is the one benchmarks/gpu/probe.py times on its 'tf32' path (``haim_binary_kkt`` through
``attack.run_batched``, float32, a random 3072-1000-1000-1 network, m candidates per run, ``sync_every`` 100), run
here on the CPU under torch.profiler (record_shapes, profile_memory) with the per-run dot products in the form a
GPU uses by default (a batched 1 x N by N x 1 product: ``StepOptions(dots="bmm")``; the CPU's own default is a
product then a sum). One step's operations are those of a run of S2 steps less those of a run of S1 steps (the
set-up, the first evaluation and the final check cancel), divided by S2 - S1.

Each top-level operation is priced from its recorded shapes: a product (mm, addmm, bmm, baddbmm) by its FLOPs
(2 M N K per product) and by the bytes of its operands and result; anything else by the bytes it reads and writes
(every tensor input read once, the result written once; in place: the first input also written). Every element is
counted at 4 bytes (float32). The model of an H100 takes each operation as one kernel lasting
max(FLOPs / F, bytes / B, floor), with F = 400 TFLOP/s (TF32 products; 60 for float32 without TF32), B = 2.5 TB/s
and a 5 us floor; it is a lower bound for a kernel that reaches these rates and says nothing of one that does not.

The shapes hold the number of runs R as a dimension (R or R m); they are written with R as a symbol, so the same
operations priced at R = 4, 8 and 16 (``--model-runs``) are the step at those batch sizes. ``--check-runs`` profiles a
second R and checks that its operations, so written, are the same list.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the sibling benchmark scripts

from bench_batched import conditions, make_runs, make_target, starts  # noqa: E402

from reconbench.attack.candidates import candidate_labels  # noqa: E402
from reconbench.attack.kkt.batched import StepOptions, step_options  # noqa: E402

#: operations that move no data (views, allocations, metadata) or only launch others
FREE = frozenset({"aten::view", "aten::reshape", "aten::transpose", "aten::as_strided", "aten::flatten", "aten::expand",
                  "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice", "aten::t", "aten::permute",
                  "aten::detach", "aten::alias", "aten::resolve_conj", "aten::resolve_neg", "aten::empty",
                  "aten::empty_like", "aten::empty_strided", "aten::lift_fresh", "aten::_unsafe_view",
                  "aten::numpy_T", "aten::contiguous", "aten::result_type", "aten::to", "aten::view_as",
                  "aten::_reshape_alias", "aten::split", "aten::unbind", "aten::chunk", "aten::narrow"})
PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::baddbmm_"})
REDUCTIONS = frozenset({"aten::sum", "aten::all", "aten::any", "aten::amax", "aten::amin", "aten::max", "aten::min",
                        "aten::mean", "aten::nonzero"})
#: tensor operands of an element-wise operation without ``out=`` (one more tensor input: the last is ``out``)
ARITY = {"aten::mul": 2, "aten::sub": 2, "aten::add": 2, "aten::div": 2, "aten::addcmul": 3, "aten::clamp": 1,
         "aten::clamp_min": 1, "aten::abs": 1, "aten::sigmoid": 1, "aten::where": 3, "aten::minimum": 2,
         "aten::maximum": 2, "aten::neg": 1, "aten::square": 1, "aten::pow": 1, "aten::isfinite": 1,
         "aten::logical_and": 2, "aten::logical_not": 2, "aten::bitwise_not": 1, "aten::exp": 1, "aten::log1p": 1,
         "aten::rsub": 2, "aten::eq": 2, "aten::ne": 2, "aten::stack": 1, "aten::cat": 1}
ITEM = 4   # bytes per element (float32)
H100 = {"tf32_flops": 400e12, "float32_flops": 60e12, "bytes_per_s": 2.5e12, "kernel_floor_s": 5e-6}


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _generalise(shape: list[int], runs: int, m: int) -> list[int | str]:
    """A shape with the batch size written as a symbol: R for a dimension equal to R, Rm for R m."""
    out: list[int | str] = []
    for d in shape:
        out.append("Rm" if d == runs * m else "R" if d == runs else d)
    return out


def _concrete(shape: list[int | str], runs: int, m: int) -> list[int]:
    return [runs * m if d == "Rm" else runs if d == "R" else int(d) for d in shape]


def _top_level(prof: Any) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
    """(name, input shapes) of each operation called from Python (not from inside another aten operation); an
    ``aten::to`` that converts (it calls ``aten::_to_copy``) counts as that conversion."""
    ops = []
    for evt in prof.events():
        parent = evt.cpu_parent
        name = evt.name
        if name == "aten::_to_copy" and parent is not None and parent.name == "aten::to" and (
                parent.cpu_parent is None or not parent.cpu_parent.name.startswith("aten::")):
            ops.append((name, tuple(tuple(s) for s in evt.input_shapes if isinstance(s, list))))
            continue
        if not name.startswith("aten::") or name in FREE:
            continue
        if parent is not None and parent.name.startswith("aten::"):
            continue
        ops.append((name, tuple(tuple(s) for s in evt.input_shapes if isinstance(s, list))))
    return ops


def price(name: str, shapes: list[list[int]]) -> dict[str, Any]:
    """FLOPs (products) and bytes read + written of one operation from its input shapes."""
    tensors = [s for s in shapes if s]   # [] is a number (or a 0-dim tensor: a few bytes)
    flops = 0
    if name in PRODUCTS:
        if name in ("aten::mm",):
            a, b = tensors[0], tensors[1]
            flops = 2 * a[0] * a[1] * b[1]
            moved = _numel(a) + _numel(b) + a[0] * b[1]
        elif name.startswith("aten::addmm"):
            c, a, b = tensors[0], tensors[1], tensors[2]
            flops = 2 * a[0] * a[1] * b[1]
            moved = _numel(c) + _numel(a) + _numel(b) + a[0] * b[1]
        elif name == "aten::bmm":
            a, b = tensors[0], tensors[1]
            flops = 2 * a[0] * a[1] * a[2] * b[2]
            moved = _numel(a) + _numel(b) + a[0] * a[1] * b[2]
        else:   # baddbmm(self, b1, b2)
            c, a, b = tensors[0], tensors[1], tensors[2]
            flops = 2 * a[0] * a[1] * a[2] * b[2]
            moved = _numel(c) + _numel(a) + _numel(b) + a[0] * a[1] * b[2]
        kind = "product"
    elif name == "aten::copy_" or name == "aten::_to_copy":
        moved, kind = 2 * _numel(tensors[-1] if name == "aten::copy_" else tensors[0]), "copy"
    elif name in ("aten::fill_", "aten::zero_", "aten::zeros", "aten::ones", "aten::full", "aten::zeros_like",
                  "aten::ones_like", "aten::full_like"):
        moved, kind = (_numel(tensors[0]) if tensors else 0), "fill"
    elif name in REDUCTIONS:
        moved, kind = _numel(tensors[0]) + (_numel(tensors[-1]) if len(tensors) > 1 else 1), "reduction"
    elif name.endswith("_"):   # in place: every input read, the first written
        moved, kind = sum(_numel(s) for s in tensors) + _numel(tensors[0]), "element-wise"
    else:
        arity = ARITY.get(name, len(tensors))
        inputs, outs = tensors[:arity], tensors[arity:]
        written = _numel(outs[0]) if outs else max((_numel(s) for s in inputs), default=0)
        moved, kind = sum(_numel(s) for s in inputs) + written, "element-wise"
    return {"kind": kind, "flops": flops, "bytes": ITEM * moved}


def model_seconds(row: dict[str, Any], flops_rate: float) -> float:
    return max(row["flops"] / flops_rate, row["bytes"] / H100["bytes_per_s"], H100["kernel_floor_s"])


def profile_ops(runs: int, m: int, steps: int, dots: str,
                layer_form: str = "gram") -> tuple[Counter[Any], dict[str, Any]]:
    """The top-level operations of ``attack.run_batched`` with ``steps`` steps (and the profiler's peak memory)."""
    target = make_target([1000, 1000], torch.float32, "cpu", m)
    attack, configs = make_runs(runs, m, steps, target, {"sync_every": 100, "tf32": True, "cuda_graph": True})
    labels = candidate_labels("binary", 2, m)
    x0s, gens = starts(configs, m, target)
    with step_options(StepOptions(dots=dots, layer_form=layer_form)):   # type: ignore[arg-type]
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
            attack.run_batched(target, x0s, labels, configs, generators=gens)
        seconds = time.perf_counter() - t0
    ops = Counter(_top_level(prof))
    return ops, {"steps": steps, "seconds_profiled": seconds}


def one_step(runs: int, m: int, s1: int, s2: int, dots: str,
             layer_form: str = "gram") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One step's operations (generalised shapes, count per step), in order of first appearance."""
    a, info1 = profile_ops(runs, m, s1, dots, layer_form)
    b, info2 = profile_ops(runs, m, s2, dots, layer_form)
    diff = b.copy()
    diff.subtract(a)
    rows = []
    for (name, shapes), count in diff.items():
        if count == 0:
            continue
        per_step = count / (s2 - s1)
        rows.append({"op": name, "shapes": [_generalise(list(s), runs, m) for s in shapes], "per_step": per_step})
    return rows, {"s1": info1, "s2": info2}


def account(rows: list[dict[str, Any]], runs: int, m: int) -> dict[str, Any]:
    """Every row priced at R = ``runs``, with its modelled H100 time (TF32 and float32 products)."""
    priced = []
    for row in rows:
        shapes = [_concrete(s, runs, m) for s in row["shapes"]]
        p = price(row["op"], shapes)
        n = row["per_step"]
        tf32, f32 = model_seconds(p, H100["tf32_flops"]), model_seconds(p, H100["float32_flops"])
        priced.append({**row, "shapes_at_R": shapes, **p, "flops": n * p["flops"], "bytes": n * p["bytes"],
                       "kernels": n, "h100_tf32_seconds": n * tf32, "h100_float32_seconds": n * f32,
                       "bound": ("floor" if tf32 == H100["kernel_floor_s"] else
                                 "flops" if p["flops"] / H100["tf32_flops"] >= p["bytes"] / H100["bytes_per_s"]
                                 else "bytes")})
    priced.sort(key=lambda r: -r["h100_tf32_seconds"])
    total = {k: sum(r[k] for r in priced) for k in ("flops", "bytes", "kernels", "h100_tf32_seconds",
                                                     "h100_float32_seconds")}
    by_kind: dict[str, dict[str, float]] = {}
    for r in priced:
        slot = by_kind.setdefault(r["kind"], {"kernels": 0.0, "flops": 0.0, "bytes": 0.0, "h100_tf32_seconds": 0.0})
        for k in slot:
            slot[k] += r[k]
    return {"runs": runs, "rows": priced, "total": total, "by_kind": by_kind}


def probe_fit(path: Path, accounts: dict[str, Any]) -> dict[str, Any]:
    """The probe's measured seconds per step at R = 8 and 16 as a line a + b R per precision and graph setting
    (a: what does not grow with the runs), beside the model's line through the same two batch sizes."""
    probe = json.loads(path.read_text())
    rows = {(r["precision"], r["cuda_graph_asked"], r["runs"]): r["seconds_per_step"] for r in probe["attack"]
            if r.get("seconds_per_step")}
    fits: dict[str, Any] = {"source": str(path), "device": probe["conditions"].get("gpu"), "lines": []}
    for precision in ("tf32", "float32", "float64"):
        for graph in (True, False):
            t8, t16 = rows.get((precision, graph, 8)), rows.get((precision, graph, 16))
            if t8 is None or t16 is None:
                continue
            fits["lines"].append({"precision": precision, "cuda_graph": graph, "seconds_at_8": t8,
                                  "seconds_at_16": t16, "per_run_seconds": (t16 - t8) / 8,
                                  "fixed_seconds": 2 * t8 - t16})
    # the per-run dot products as batched 1 x N by N x 1 products: their bytes per run and step, and the rate at which
    # one run's share would have to be read for them to be the part that does not grow with the runs
    rows1 = [r for r in accounts[next(iter(accounts))]["rows"]
             if r["op"] == "aten::bmm" and r["shapes"][0][1:2] == [1] and r["shapes"][1][2:] == [1]]
    elements = sum(r["per_step"] * (_numel(_concrete(r["shapes"][0], 1, 1)) + _numel(_concrete(r["shapes"][1], 1, 1)))
                   for r in rows1)
    fits["dot_products"] = {"kernels_per_step": sum(r["per_step"] for r in rows1),
                            "elements_read_per_run": elements,
                            "implied_gb_per_s_per_run": {
                                line["precision"] + ("_graph" if line["cuda_graph"] else ""):
                                    elements * (8 if line["precision"] == "float64" else 4) / line["fixed_seconds"] / 1e9
                                for line in fits["lines"] if line["fixed_seconds"] > 0}}
    if "8" in accounts and "16" in accounts:
        for key, label in (("h100_tf32_seconds", "tf32"), ("h100_float32_seconds", "float32")):
            m8, m16 = accounts["8"]["total"][key], accounts["16"]["total"][key]
            fits[f"model_{label}"] = {"per_run_seconds": (m16 - m8) / 8, "fixed_seconds": 2 * m8 - m16}
    return fits


def _commit() -> str | None:
    """The commit of this tree (None without git), and whether the tree differs from it."""
    import subprocess

    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).parent).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("+changes" if dirty else "")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where to write the JSON")
    parser.add_argument("--m", type=int, default=1000, help="candidates per run (the papers: 1000)")
    parser.add_argument("--runs", type=int, default=4, help="R profiled (a number that no other dimension of the "
                                                            "step equals, nor R m: 1, 3 and 2 x layers are taken)")
    parser.add_argument("--check-runs", type=int, default=0, help="a second R whose operations must be the same "
                                                                  "list (0: no check)")
    parser.add_argument("--steps", type=int, nargs=2, default=[1, 3], metavar=("S1", "S2"))
    parser.add_argument("--dots", choices=["bmm", "reduce", "auto"], default="bmm",
                        help="the per-run dot products' form (bmm: a GPU's default; auto: this device's default)")
    parser.add_argument("--layer-form", choices=["gram", "auto"], default="gram",
                        help="the layers' terms (auto: the output layer through H^T D; StepOptions)")
    parser.add_argument("--model-runs", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--probe", default=str(Path(__file__).resolve().parent.parent / "results" / "gpu" /
                                               "probe_h100.json"),
                        help="a probe's JSON whose attack rows are fitted beside the model ('' to skip)")
    args = parser.parse_args(argv)
    if args.steps[1] <= args.steps[0]:
        parser.error("--steps S1 S2 needs S2 > S1")
    t0 = time.perf_counter()
    rows, info = one_step(args.runs, args.m, args.steps[0], args.steps[1], args.dots, args.layer_form)
    result: dict[str, Any] = {
        "benchmark": "one batched KKT attack step (probe.py's tf32 path) operation by operation, modelled on an H100",
        "conditions": conditions("cpu"), "m": args.m, "layers": [3072, 1000, 1000, 1], "dtype": "float32",
        "commit": _commit(), "dots": args.dots, "layer_form": args.layer_form, "profiled_runs": args.runs,
        "steps": args.steps, "profile": info, "model": H100,
        "operations": rows}
    if args.check_runs:
        other, _ = one_step(args.check_runs, args.m, args.steps[0], args.steps[1], args.dots, args.layer_form)
        key = [(r["op"], json.dumps(r["shapes"]), r["per_step"]) for r in rows]
        other_key = [(r["op"], json.dumps(r["shapes"]), r["per_step"]) for r in other]
        result["check_runs"] = {"runs": args.check_runs, "same_operations": sorted(key) == sorted(other_key)}
        if sorted(key) != sorted(other_key):
            result["check_runs"]["only_here"] = sorted(set(key) - set(other_key))
            result["check_runs"]["only_there"] = sorted(set(other_key) - set(key))
    result["accounts"] = {str(r): account(rows, r, args.m) for r in args.model_runs}
    if args.probe and Path(args.probe).exists():
        result["probe_fit"] = probe_fit(Path(args.probe), result["accounts"])
        result["probe_fit"]["source"] = Path(args.probe).name
    result["wall_seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for r in args.model_runs:
        tot = result["accounts"][str(r)]["total"]
        print(f"R={r}: {tot['kernels']:.0f} kernels, {tot['flops'] / 1e9:.1f} GFLOP, {tot['bytes'] / 1e9:.2f} GB; "
              f"H100 model {1e3 * tot['h100_tf32_seconds']:.2f} ms (TF32), "
              f"{1e3 * tot['h100_float32_seconds']:.2f} ms (float32)")
    return result


if __name__ == "__main__":
    main()

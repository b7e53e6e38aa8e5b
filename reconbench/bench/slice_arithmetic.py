"""A cost table from arithmetic alone: what an H100 would do at a given fraction of its peak, the stand-in for the
GPU probe until one is committed (benchmarks/gpu/README.md).

FLOPs per unit of ``reconbench.bench.slice_costs``' work:

- train: 6 per unit (the resumable trainer's step is 6 n ``P`` FLOPs, ``P`` counted as that trainer's arithmetic);
  float32 without TF32 (the paper suite's training precision), so the FP32 peak;
- attack: 12 per unit (a batched KKT attack step is about 12 m ``P`` FLOPs per run, e.g. 48.6 GFLOP for m = 1000
  on a 3072-1000-1000-1 network: benchmarks/cell_time_account.py counts its products); TF32 products at the TF32
  tensor-core peak, float32 and float64 at their own;
- fixed seconds and evaluation: the built-in ``cuda`` table's (:data:`~reconbench.bench.slice_costs.PRIORS`).

The peaks are NVIDIA's published dense figures for the H100 SXM5 (sparsity not counted): TF32 tensor core 494.7
TFLOP/s, FP32 66.9 TFLOP/s, FP64 tensor core 66.9 TFLOP/s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reconbench.bench.slice_costs import PRIORS
from reconbench.records.cost_table import COST_TABLE_SCHEMA, CostTable, PhaseCost

#: dense peak FLOP/s of an H100 SXM5 by matrix-product precision
H100_PEAK_FLOPS: dict[str, float] = {"tf32": 494.7e12, "float32": 66.9e12, "float64": 66.9e12}
#: FLOPs per unit of work, by phase
FLOPS_PER_UNIT: dict[str, float] = {"train": 6.0, "attack": 12.0}
#: the fraction of peak the plan in the README assumes until a probe is committed
ASSUMED_PEAK_FRACTION = 0.4


def arithmetic_costs(fraction: float = ASSUMED_PEAK_FRACTION, attack_precision: str = "tf32") -> CostTable:
    """The cost table of an H100 SXM5 achieving ``fraction`` of its peak in every phase: training in float32 at
    the FP32 peak, the attack at the peak of ``attack_precision`` (and ``attack_at`` each precision's)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction of peak {fraction} is not in (0, 1]; pass e.g. 0.4")
    prior = PRIORS["cuda"]

    def attack(precision: str) -> PhaseCost:
        return PhaseCost(fixed=prior.attack.fixed,
                         rate=FLOPS_PER_UNIT["attack"] / (fraction * H100_PEAK_FLOPS[precision]))

    return CostTable.written(   # the fields it prices, no more (no run counts: arithmetic does not see them)
        train=PhaseCost(fixed=prior.train.fixed,
                        rate=FLOPS_PER_UNIT["train"] / (fraction * H100_PEAK_FLOPS["float32"])),
        attack=attack(attack_precision), evaluate=prior.evaluate, format=COST_TABLE_SCHEMA,
        attack_at={p: attack(p) for p in H100_PEAK_FLOPS}, peak_fraction=fraction,
        about={"device": "NVIDIA H100 SXM5, by arithmetic (not measured)",
               "peak_tflops": {p: f / 1e12 for p, f in H100_PEAK_FLOPS.items()},
               "flops_per_unit": FLOPS_PER_UNIT, "written_by": "python -m reconbench.bench.slice_arithmetic"})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where to write the cost table (JSON)")
    parser.add_argument("--fraction", type=float, default=ASSUMED_PEAK_FRACTION, help="achieved fraction of peak")
    args = parser.parse_args(argv)
    Path(args.out).write_text(json.dumps(arithmetic_costs(args.fraction).to_dict(), indent=1) + "\n")


if __name__ == "__main__":
    main()

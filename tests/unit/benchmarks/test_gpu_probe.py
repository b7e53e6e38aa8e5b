"""The GPU probe (benchmarks/gpu/probe.py) at tiny sizes on the CPU: it runs end to end and writes its JSON, and its
FLOP count of a trainer step is what torch's own FLOP counter counts."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
from _helpers.examples import load_module
from torch.utils.flop_counter import FlopCounterMode

from reconbench.bench.slice_costs import PRIORS, probe_card_price, probe_evaluation_price
from reconbench.records.cost_table import PROBE_FILE, PROBE_SCHEMA
from reconbench.targets.batched_training import BatchedChainGD

PROBE = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "probe.py"


def load_probe() -> ModuleType:
    return load_module('gpu_probe', PROBE)


def test_the_probe_runs_tiny_on_the_cpu(tmp_path):
    probe = load_probe()
    out = tmp_path / "probe.json"
    probe.main([str(out), "--tiny", "--device", "cpu", "--train-windows", "1", "--budget", "1e9"])
    data = json.loads(out.read_text())
    assert data["tiny"] and not data["skipped"]
    assert data["trainer_check"]["max_relative_difference_graph_True"] < 1e-12   # the CPU against itself
    assert data["trainer_check"]["mixed_max_relative_difference_graph_True"] < 1e-12
    # every run count the planner prices by, with the graph only (the eager loop is no longer timed); the trainer's
    # 16 cases of shared settings and one stack of the most targets with mixed settings
    assert len(data["trainer"]) == 17 and len(data["attack"]) == 9
    assert [(r["targets"], r["dtype"]) for r in data["trainer"] if r["settings"] == "mixed"] == [(4, "float32")]
    assert sum(r["settings"] == "shared" for r in data["trainer"]) == 16
    assert sorted({r["runs"] for r in data["attack"]}) == [1, 2, 4]
    assert all(r["cuda_graph_asked"] for r in data["attack"])
    # the kernel profile (CPU operators with --tiny): the top operators by self time, and the shares of each kind
    prof = data["profile"]
    assert prof["what"] == "CPU operators" and prof["runs"] == 4 and prof["steps"] == 2
    assert set(prof["kinds"]) == {"gemm", "elementwise", "reduction", "copy", "other"}
    assert sum(prof["kinds"].values()) == pytest.approx(1.0) and prof["kinds"]["gemm"] > 0
    top = prof["top"]
    assert 0 < len(top) <= 20 and [t["total_ms"] for t in top] == sorted((t["total_ms"] for t in top), reverse=True)
    assert sum(t["share"] for t in top) <= 1.0 + 1e-12 and all(t["calls"] >= 1 for t in top)
    assert {"aten::mm", "aten::bmm"} & {t["name"] for t in top}
    assert data["certificate"]["n"] == 12 and data["certificate"]["seconds"] > 0
    # a cell's evaluation on the machine's CPU, on generated images: its units are the planner's (pooled candidates x
    # training images x pixels), its pooled summary scored
    ev = data["evaluation"]
    assert (ev["runs"], ev["m"], ev["n"], ev["pixels"]) == (2, 6, 12, 3 * 8 * 8)
    assert ev["units"] == 2 * 6 * 12 * 192 and ev["candidates"] == 12 and ev["evaluations"] == 3 and ev["bars"]
    assert ev["seconds"] > 0 and ev["seconds"] == pytest.approx(sum(ev["seconds_by_step"].values()), rel=1e-12)
    assert ev["seconds_per_unit"] == pytest.approx(ev["seconds"] / ev["units"], rel=1e-12)
    assert ev["torch_threads"] == torch.get_num_threads() and ev["pooled_summary"]["matched_images"] is not None
    assert all(r["case_seconds"] > 0 for r in [*data["trainer"], *data["attack"], ev, data["certificate"]])
    for row in data["trainer"]:
        assert row["steps_per_second"] > 0 and row["tflops_per_second"] > 0
        assert row["cuda_graph"] is False and row["peak_memory_gib"] is None   # no graph, no CUDA memory on a CPU
        assert not any(row["diverged"])
    for row in data["attack"]:
        assert row["batch"]["engine"] == "gram" and row["batch"]["cuda_graph"] is False
        assert row["batch"]["tf32"] is False   # TF32 is a CUDA opt-in: asked for, not applied on a CPU
    assert {r["precision"] for r in data["attack"]} == {"float64", "float32", "tf32"}
    # the JSON reads strictly through its door (every field the probe writes is one the record names), stamped
    record = PROBE_FILE.read(out)
    assert data["format"] == PROBE_SCHEMA and all(r.measured for r in record.trainer) and len(record.trainer) == 17
    assert all(r.error is None and r.runs and r.m and r.layers for r in record.attack)   # steps may time at 0 here
    assert record.profile is not None and record.profile["kinds"] == prof["kinds"]
    assert record.evaluation is not None and record.evaluation.measured and record.evaluation.units == ev["units"]
    assert record.certificate is not None and record.certificate.measured
    # what a plan makes of it (costs_from_probe's two prices; its attack rows may time at 0 here): the evaluate phase
    # from the evaluation row (fixed min(15 s, s), rate s / u); the tiny certificate is not the reference's
    # network, so the card keeps the built-in price
    evaluate, _ = probe_evaluation_price(record, PRIORS["cuda"].evaluate)
    assert evaluate.fixed == min(15.0, ev["seconds"])
    assert evaluate.rate == pytest.approx(ev["seconds"] / ev["units"], rel=1e-12)
    assert probe_card_price(record, PRIORS["cuda"].card)[0] == PRIORS["cuda"].card


def test_without_tiny_a_cpu_probe_skips_the_profile_with_a_note(tmp_path, monkeypatch):
    probe = load_probe()
    monkeypatch.setitem(probe.SIZES, "paper", probe.SIZES["tiny"])   # paper's options at tiny sizes
    out = tmp_path / "probe.json"
    probe.main([str(out), "--device", "cpu", "--train-windows", "1", "--budget", "0"])
    data = json.loads(out.read_text())
    assert data["profile"] == {"skipped": "on a CPU the kernel profile runs only with --tiny"}
    assert "certificate" not in data and "evaluation" not in data
    # every case skipped, in the order the probe runs them: what a slice's plan reads first (float32 training with
    # the graph, the stack of mixed settings, the TF32 and float64 attack, the certificate, the evaluation), then
    # the float32 attack, training without the graph and float64 training
    order = [(c["kind"], tuple(c["params"])) for c in data["skipped"]]
    first = [("trainer", (t, d, "float32", True)) for t in (1, 4) for d in ("mnist", "cifar10")]
    first += [("trainer", (4, "cifar10", "float32", True, True))]
    first += [("attack", (r, p, True)) for p in ("tf32", "float64") for r in (1, 2, 4)]
    first += [("certificate", ()), ("evaluation", ())]
    assert order[:len(first)] == first
    rest = order[len(first):]
    assert [k for k, _ in rest] == ["attack"] * 3 + ["trainer"] * 12
    assert {p[1] for k, p in rest if k == "attack"} == {"float32"}
    assert [p[2:] for k, p in rest if k == "trainer"] == [("float32", False)] * 4 + [("float64", True)] * 4 + [
        ("float64", False)] * 4


def test_only_runs_the_cases_of_the_kinds_named(tmp_path):
    probe = load_probe()
    out = tmp_path / "probe.json"
    probe.main([str(out), "--tiny", "--device", "cpu", "--only", "evaluation", "certificate", "--budget", "1e9"])
    data = json.loads(out.read_text())
    assert data["trainer"] == [] and data["attack"] == [] and "profile" not in data and not data["skipped"]
    assert data["evaluation"]["units"] > 0 and data["certificate"]["seconds"] > 0
    assert data["command"].endswith("--only evaluation certificate --budget 1e9")


@pytest.mark.parametrize(("name", "kind"), [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x5_nn_align4>(Params)", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >",
     "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)",
     "copy"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>",
     "reduction"),
    ("Memcpy HtoD (Pageable -> Device)", "copy"),
    ("aten::baddbmm_", "gemm"), ("aten::normal_", "elementwise"), ("aten::sum", "reduction"), ("aten::view", "other"),
    ("aten::copy_", "copy"), ("aten::_to_copy", "copy"), ("some_custom_kernel", "other")])
def test_kernel_kinds_by_name(name, kind):
    assert load_probe().kernel_kind(name) == kind


def test_the_trainer_step_flop_count_is_torchs():
    """train_step_flops against torch.utils.flop_counter counting one batched step's products."""
    probe = load_probe()
    gen = torch.Generator().manual_seed(0)
    widths, n, targets = [24, 16], 10, 3
    family = probe.plugins.get("models", "mlp")
    models = [family.build((1, 6, 6), 1, {"widths": widths}, generator=gen).double() for _ in range(targets)]
    xs = [torch.randn(n, 1, 6, 6, generator=gen, dtype=torch.float64) for _ in range(targets)]
    ys = [(torch.arange(n) % 2).double() for _ in range(targets)]
    trainer = BatchedChainGD(models, xs, ys, "bce", lr=0.01)

    def inplace_baddbmm(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
        """torch counts baddbmm but not its in-place form, the weight updates': 2 flops per multiply-add."""
        batch, rows, inner = a_shape
        return 2 * batch * rows * inner * b_shape[2]

    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.baddbmm_: inplace_baddbmm}) as counter:
        trainer._step(False)
    assert counter.get_total_flops() == targets * probe.train_step_flops(n, widths)

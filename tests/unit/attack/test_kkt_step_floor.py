"""benchmarks/bench_step_ab.py's product floor: the operation count it divides by is the count of the products it
times, read by torch's own FLOP counter (an independent count: 2 m n k per product)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[3]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_step_ab", ROOT / "benchmarks" / "bench_step_ab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("form", ["factored", "gram"])
def test_the_floors_flop_count_is_the_count_of_the_products_it_times(tmp_path, form):
    bench = _bench()
    m, runs = 3, 2
    threads = torch.get_num_threads()   # product_floor sets one thread: put back what the test process had
    try:
        with FlopCounterMode(display=False) as counter:
            bench.product_floor(m, "float32", runs, 1, str(tmp_path / "floor.pt"), form)
    finally:
        torch.set_num_threads(threads)
    calls = 3 + 10   # the warm-up calls and one repeat of ten
    assert counter.get_total_flops() == pytest.approx(calls * bench.floor_gflop(m, runs, form) * 1e9, rel=1e-12)


def test_the_factored_floor_has_fewer_operations_than_the_gram_one_at_every_m():
    """The output layer's Gram products (4 m^2 h) against its factored ones (6 m h): fewer for m >= 2."""
    bench = _bench()
    for m in (2, 40, 200):
        assert bench.floor_gflop(m, 2, "factored") < bench.floor_gflop(m, 2, "gram")

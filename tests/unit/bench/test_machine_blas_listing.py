"""The machine record's BLAS listing is read again exactly when the process may have loaded a library (a new import)
or changed torch's threads, and equals a fresh reading."""

from __future__ import annotations

import sys
import types

import pytest
import threadpoolctl
import torch

from reconbench.bench import machine


@pytest.fixture
def counted_reads(monkeypatch):
    calls = []
    real = threadpoolctl.threadpool_info

    def info():
        calls.append(1)
        return real()

    monkeypatch.setattr(threadpoolctl, "threadpool_info", info)
    monkeypatch.setattr(machine, "_LISTED", {})
    return calls


def test_listing_is_reused_until_an_import_or_a_thread_change(counted_reads, monkeypatch):
    first = machine.numpy_blas()
    assert len(counted_reads) == 1
    again = machine.numpy_blas()
    assert again == first and len(counted_reads) == 1
    again[0]["version"] = "edited"                       # a caller's copy: the next reading is not changed
    assert machine.numpy_blas() == first
    monkeypatch.setitem(sys.modules, "a_module_imported_later", types.ModuleType("a_module_imported_later"))
    assert machine.numpy_blas() == first and len(counted_reads) == 2
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(before + 1)
        machine.numpy_blas()
        assert len(counted_reads) == 3
    finally:
        torch.set_num_threads(before)


def test_listing_equals_a_fresh_reading(monkeypatch):
    monkeypatch.setattr(machine, "_LISTED", {})
    keys = ("user_api", "internal_api", "version", "architecture", "threading_layer", "num_threads")
    machine.numpy_blas()
    fresh = [{k: info.get(k) for k in keys} for info in threadpoolctl.threadpool_info()]
    assert machine.numpy_blas() == fresh

"""Atomic writes flush to the disk where a power loss could destroy an existing file, and everywhere on request."""

from __future__ import annotations

import os

import pytest

from reconbench import provenance


@pytest.fixture
def fsyncs(monkeypatch):
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(provenance.os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


def test_a_new_file_is_renamed_into_place_without_a_flush(tmp_path, fsyncs, monkeypatch):
    monkeypatch.setattr(provenance, "_FSYNC_ALWAYS", False)
    target = tmp_path / "sub" / "new.json"
    provenance.write_bytes_atomic(target, b"{}")
    assert target.read_bytes() == b"{}" and fsyncs == []
    assert [p.name for p in target.parent.iterdir()] == ["new.json"]   # no temporary file left


def test_replacing_a_file_flushes_the_file_and_its_folder(tmp_path, fsyncs, monkeypatch):
    monkeypatch.setattr(provenance, "_FSYNC_ALWAYS", False)
    target = tmp_path / "old.json"
    target.write_bytes(b"old")
    provenance.write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert len(fsyncs) == (2 if os.name != "nt" else 1)


def test_reconbench_fsync_flushes_every_write(tmp_path, fsyncs, monkeypatch):
    monkeypatch.setattr(provenance, "_FSYNC_ALWAYS", True)
    provenance.write_bytes_atomic(tmp_path / "new.json", b"{}")
    assert len(fsyncs) >= 1

"""Cells as Ray tasks: ``reconbench bench SUITE --executor ray [--address ADDR]``.

Each cell is one Ray task asking for ``cpus_per_cell`` CPUs, and one GPU on CUDA suites; Ray places them on whatever
nodes have the resources. Ray is the scheduler (placement, queues, retries, cancellation); this module only says what
to run. See docs/distributed.md for running on a multi-node cluster.

- Targets: one task per recipe key trains (or reuses) the target, and every cell of that recipe depends on it, so a
  target is trained once however many cells need it. The weights travel through the target cache folder, which every
  worker must see at the same path (a shared filesystem on a multi-node cluster); the object store carries only the
  small training record. A worker that cannot see the folder records the cell as failed, saying so.
- Results: a worker writes only its cell's ``work/<cell id>/`` folder (in the results folder, which must also be
  shared) and returns the cell's record; this process writes ``cells/`` and ``invocations/``, exactly as the serial
  runner does, so resume rules and ``cell_key``s are the same.
- Same numbers: a task sets torch's thread count to its CPU request, so a cell computes the same way on any worker
  with the same libraries. The serial runner matches when it runs with as many torch threads.
- Faults: a task whose worker dies is retried by Ray ``max_retries`` times (it resumes from its finished search
  runs); after that the cell is reported lost and nothing is written, so ``--resume`` runs it again. A cell that
  raises is recorded as failed, as in the serial runner. Closing the run (Ctrl-C, ``--strict``) ends this process's
  Ray job, which stops every task not yet ended, and stops a local Ray instance started here.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

import torch

from reconbench.bench.cells import Cell
from reconbench.bench.executors import CellJob, Finished, Lost, Outcome, RunContext
from reconbench.bench.runner import Target, failed_record, invocation_path, load_obtained_target, obtain_target, run_cell
from reconbench.bench.suite import SuiteError, display_path
from reconbench.errors import ReconbenchError
from reconbench.targets.cache import cache_dir
from reconbench.targets.data_files import data_root as resolve_data_root

ENV_PREFIX = "RECONBENCH_"  # forwarded to the workers of a cluster this process connects to
PROBE_SECONDS = 3.0  # how long a cluster address may take to accept a connection
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20  # a local instance moves only small records; Ray's default takes 30% of RAM


def head_endpoint(address: str | None) -> tuple[str, int] | None:
    """(host, port) of a cluster address to probe: ``host:port`` (the head's GCS) or ``ray://host[:port]`` (the Ray
    client server, port 10001 by default); None for ``auto``, ``local`` or no address (Ray finds or starts those)."""
    if not address or address in ("auto", "local"):
        return None
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://").split("/", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep:
        host, port = rest, "10001" if client else "6379"
    host = host.strip("[]")  # [::1]:6379
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SuiteError(f"--address {address!r} is not a Ray address; pass HOST:PORT (the head node's GCS, e.g. "
                         "10.0.0.1:6379), ray://HOST:10001, or auto")
    return host, int(port)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise SuiteError("--executor ray needs Ray: pip install 'reconbench[ray]'") from exc
    return ray


def _check_visible(ctx: RunContext) -> None:
    """The results folder must be the driver's: its invocation record is there before any task starts."""
    if not invocation_path(ctx.out, ctx.invocation).exists():
        raise ReconbenchError(
            f"the results folder {ctx.out} is not visible on Ray node {socket.gethostname()}; put --out on a folder "
            "that every node mounts at the same path (see docs/distributed.md)"
        )


def target_task(cell: Cell, ctx: RunContext, threads: int) -> Target:
    """Train or reuse one recipe's target; return what the cells record (the weights stay in the cache folder)."""
    torch.set_num_threads(threads)
    try:
        _check_visible(ctx)
    except ReconbenchError as exc:
        return Target(error=exc)
    t = obtain_target(cell, ctx.out, ctx.cache, ctx.data_root, quiet=True, device=ctx.device)
    return Target(info=t.info, error=t.error)


def cell_task(job: CellJob, ctx: RunContext, obtained: Target, threads: int) -> dict[str, Any]:
    """One cell, on a worker: the same ``run_cell`` as the serial runner, with the target read from the cache."""
    torch.set_num_threads(threads)
    _check_visible(ctx)
    target = load_obtained_target(job.cell, obtained, ctx.cache, ctx.data_root)

    class Obtained:
        def get(self, cell: Cell) -> Target:
            return target

    return run_cell(
        job.cell, ctx.suite, job.spec, ctx.out, Obtained(), invocation=ctx.invocation, data_root=ctx.data_root,
        quiet=True,
    )


class RayExecutor:
    """Run cells as Ray tasks on the cluster at ``address`` (a local instance without one)."""

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, cpus_per_cell: int = 1,
                 max_retries: int = 1) -> None:
        self.address, self.num_cpus, self.cpus_per_cell, self.max_retries = address, num_cpus, cpus_per_cell, max_retries
        self._connected_here = False

    # -- connecting -----------------------------------------------------------------------------------
    def check_address(self) -> None:
        """Refuse an address where nothing listens, in seconds and in one line (Ray itself would retry for minutes
        and log each try)."""
        where = head_endpoint(self.address)
        if where is None:
            return
        try:
            socket.create_connection(where, timeout=PROBE_SECONDS).close()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise SuiteError(
                f"no Ray cluster answers at --address {self.address} ({reason}); start it (`ray start --head` on the "
                "head node), correct the address, or leave out --address for a local instance"
            ) from None

    def _connect(self) -> Any:
        ray = _ray()
        if ray.is_initialized():
            return ray
        if self.address:
            self.check_address()
            env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
            try:
                ray.init(address=self.address, runtime_env={"env_vars": env}, logging_level=logging.WARNING)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise SuiteError(
                    f"cannot connect to the Ray cluster at {self.address!r} ({exc}); check that it runs (`ray status` "
                    "on its head node) and that this machine has its authentication token (see docs/distributed.md), "
                    "or leave out --address for a local instance"
                ) from exc
        else:
            # address="local": a new instance even where `ray start` left a cluster that ray.init would join
            ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, logging_level=logging.WARNING,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES)
        self._connected_here = True
        return ray

    def _disconnect(self, ray: Any) -> None:
        """Leave a connection made here (stopping a local instance started here); keep the caller's."""
        if self._connected_here:
            ray.shutdown()
            self._connected_here = False

    def _resources(self, ctx: RunContext) -> dict[str, Any]:
        gpus = 1 if ctx.device.startswith("cuda") else 0
        return {"num_cpus": self.cpus_per_cell, "num_gpus": gpus, "max_retries": self.max_retries}

    # -- the executor -----------------------------------------------------------------------------------
    @staticmethod
    def check_device(device: str) -> None:
        """Refuse a device Ray cannot honour (before anything is written)."""
        if device.startswith("cuda:"):
            raise SuiteError(
                f"with --executor ray, pass --device cuda, not {device!r}: Ray gives each cell one GPU, which "
                "the cell sees as cuda"
            )

    def check(self, ctx: RunContext) -> None:
        self.check_device(ctx.device)
        ray = self._connect()
        have = ray.cluster_resources()
        need = self._resources(ctx)
        for resource, n in (("CPU", need["num_cpus"]), ("GPU", need["num_gpus"])):
            if n and have.get(resource, 0) < n:
                self._disconnect(ray)
                raise SuiteError(
                    f"each cell of suite {ctx.suite.name!r} asks for {n} {resource}(s), but the Ray cluster has "
                    f"{have.get(resource, 0):g}; "
                    + ("pass --device cpu, or add GPU nodes" if resource == "GPU" else "add nodes with more CPUs")
                )

    def describe(self) -> dict[str, Any]:
        ray = _ray()
        return {
            "name": self.name,
            "address": self.address or "local instance",
            "ray_version": ray.__version__,
            "cluster_resources": ray.cluster_resources() if ray.is_initialized() else None,
            "cpus_per_cell": self.cpus_per_cell,
            "max_retries": self.max_retries,
        }

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        ray = self._connect()
        remote_ctx = replace(
            ctx,
            out=ctx.out.resolve(),
            cache=str(cache_dir(ctx.cache).resolve()),
            data_root=str(resolve_data_root(ctx.data_root).resolve()),
        )
        options = self._resources(ctx)
        threads = self.cpus_per_cell
        targets: dict[str, Any] = {}
        pending: dict[Any, CellJob] = {}
        try:
            ctx_ref = ray.put(remote_ctx)
            train = ray.remote(target_task)
            cell = ray.remote(cell_task)
            for job in jobs:
                key = job.cell.recipe.key()
                if key not in targets:
                    targets[key] = train.options(name=f"target {key}", **options).remote(job.cell, ctx_ref, threads)
                ref = cell.options(name=f"cell {job.cell.cell_id}", **options).remote(job, ctx_ref, targets[key], threads)
                pending[ref] = job
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)  # a timeout keeps Ctrl-C prompt
                for ref in done:
                    yield self._outcome(ray, ref, pending.pop(ref), ctx)
        finally:
            if pending:
                self._stop(ray, [*pending, *targets.values()])
            self._disconnect(ray)

    def _stop(self, ray: Any, refs: list[Any]) -> None:
        """Stop the tasks that have not ended (Ctrl-C, --strict). Connected here, the disconnect that follows does
        it: Ray kills a job's tasks when their owner leaves. Cancelling a task in the instant it completes can crash
        the driver (ray-project/ray#54798 fixed one such race, not all), so a connection made by the caller only gets
        polite cancels (a KeyboardInterrupt inside the task) of tasks not yet ended."""
        if self._connected_here:
            return
        _, not_ended = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in not_ended:
            try:
                ray.cancel(ref, force=False)
            except Exception:  # ended meanwhile, or the cluster is gone: nothing left to stop
                pass

    def _outcome(self, ray: Any, ref: object, job: CellJob, ctx: RunContext) -> Outcome:
        try:
            rec = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # raised outside run_cell, which records its own failures
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            rec = failed_record(job.cell, ctx.suite, job.spec, cause, invocation=ctx.invocation)
        except ray.exceptions.RayError as exc:  # the worker or its node died, or the task was cancelled
            return Lost(job.cell, type(exc).__name__)
        rec["suite_file"] = display_path(ctx.suite.path)  # as this process sees it (a worker's folder differs)
        return Finished(job.cell, rec)

"""A comparison matrix's cells as Ray tasks: ``compare run --ray auto|ADDRESS``.

A cell is one engine start of one column (a backend, a knob variant such as ``vllm[block_size=32]``,
a quantization, a topology: any target of the run) in one repeat. Each cell is a Ray task that asks
for what its engine needs (``num_gpus`` = the devices of its topology when the cluster has GPUs;
else one ``llmc_slot``, the custom resource that stands for "a node's accelerator" on CPU
clusters; else one CPU), starts its engine on the node Ray picks, replays the run's identical
request list and arrival schedule (the whole RunConfig travels to it) through the same
``run_backend`` as a local run, and returns its records, level summaries and engine logs. The
driver writes the one results directory: the same run.json schema and requests.jsonl as without
Ray, plus ``ray`` (where each cell ran, how long it queued and took).

Repeats keep the local rules: every cell starts a fresh engine (a GPU cell in a fresh worker
process, ``max_calls=1``); cells are submitted and merged in the interleaved order A B A B ...; the pooled level rows
are built in that order; a column that fails in one repeat is not measured again (its later cells
are cancelled, and dropped if they already ran), exactly as a local run skips it. Cells of
different columns may run at the same time on different nodes (each with its own accelerators).

Nothing here is imported unless ``--ray`` is given (the CLI imports this module lazily).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.http.urls import redact_url
from backends.logs import LOG_DIR
from compare.running.ray_cluster import SLOT, cluster_section, connect
from core.errors import UserError
from core.records import RequestRecord
from core.results import ResultsWriter

@dataclass(frozen=True)
class ScaleOut:
    """How a run uses a Ray cluster (RunConfig.scaleout)."""

    address: str  # "auto" (the cluster `ray start` left on this machine) or HOST:PORT
    load_shards: int = 0  # >= 2: load-generator actors for an already running endpoint (ray_load.py)
    max_clock_error_ms: float = 5.0  # load shards refused when their clock offset is known less precisely
    omp_threads: str | None = None  # the driver's OMP_NUM_THREADS (None: engines choose)

    async def run(self, cfg: Any, writer: ResultsWriter, progress: Any) -> str:
        return await run_cells(cfg, writer, progress)

    async def run_level(self, cfg: Any, backend: Any, level: Any, writer: ResultsWriter, max_errors: int,
                        on_record: Any) -> Any:
        from compare.running.ray_load import run_level_shards

        return await run_level_shards(cfg, backend, level, writer, max_errors, on_record)


@dataclass
class CellResult:
    """What a cell sends back to the driver."""

    name: str
    repeat: int
    ok: bool
    interrupted: bool
    entry: dict[str, Any]  # the cell's section of run.json for its column
    records: list[RequestRecord]
    wall_ns: dict[str, int] = field(default_factory=dict)  # per level: for the pooled rows
    loop_lag_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # per level: its max and p99
    logs: dict[str, bytes] = field(default_factory=dict)  # logs/<file> -> content
    node: dict[str, Any] = field(default_factory=dict)


def devices_of(target: Any, tensor_parallel: int) -> int:
    """Accelerators one engine start of ``target`` occupies (topologies hold several)."""
    inner = getattr(target, "base", target)  # a knob variant occupies what its base does
    return inner.devices(tensor_parallel) if hasattr(inner, "devices") else tensor_parallel  # a Topology


def cell_options(devices: int, cluster: dict[str, float]) -> dict[str, Any]:
    """The Ray resources a cell asks for (see the module docstring)."""
    if cluster.get("GPU", 0) > 0:
        return {"num_gpus": devices, "num_cpus": 1}
    if cluster.get(SLOT, 0) > 0:
        return {"resources": {SLOT: devices}, "num_cpus": 0}
    return {"num_cpus": 1}


async def run_cells(cfg: Any, writer: ResultsWriter, progress: Any) -> str:
    """Every cell on the cluster, merged into ``writer`` in interleaved order; the run's status."""
    from compare.running.ray_merge import Merger

    so: ScaleOut = cfg.scaleout
    ray = connect(so.address)
    cluster = {k: float(v) for k, v in ray.cluster_resources().items()}
    writer.update(ray=cluster_section(ray, so.address))
    # every cell builds a fresh engine, as every repeat of a local run does; a GPU cell also gets a
    # fresh worker process (CUDA fixes its visible devices at first use), a CPU cell may reuse one
    cell = ray.remote(max_retries=0)(run_cell)
    cfg_ref = ray.put(cfg)
    plan = []
    for rep in range(cfg.repeats):
        for target in cfg.backends:
            opts = cell_options(devices_of(target, cfg.spec_for(str(target)).tensor_parallel), cluster)
            fresh = {"max_calls": 1} if opts.get("num_gpus") else {}
            plan.append((rep, target, opts, cell.options(**opts, **fresh).remote(cfg_ref, target, rep, time.time())))
    merger = Merger(cfg, writer, progress)
    status = "complete"
    try:
        for rep, target, opts, ref in plan:
            name = redact_url(str(target))
            if name in merger.failed:
                ray.cancel(ref)  # a column that failed is not measured again, as in a local run
                continue
            progress.phase(name, f"on the Ray cluster (repeat {rep + 1}/{cfg.repeats})")
            try:
                res = await ref
            except Exception as e:  # the task itself failed (worker died, node lost, cancelled)
                res = _lost_cell(name, rep, e)
            merger.merge(res, opts)
            if not res.ok:  # a cell interrupted on its node alone (not by our stop) fails its column
                status = "partial"
    except (KeyboardInterrupt, asyncio.CancelledError):
        await _stop_cells(ray, plan, merger)
        raise
    return status


async def _stop_cells(ray: Any, plan: list[tuple[Any, ...]], merger: Any) -> None:
    """A stop: every cell still running is interrupted (its engine torn down in the cell, what it
    measured sent back and kept), within a bounded wait."""
    live = [(rep, target, opts, ref) for rep, target, opts, ref in plan
            if (redact_url(str(target)), rep) not in merger.merged]
    for *_, ref in live:
        ray.cancel(ref)
    for rep, target, opts, ref in live:
        try:
            res = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ref.future())), 60)
        except BaseException:  # cancelled before it started, or gone: nothing to keep
            continue
        if res.records or res.entry.get("levels"):
            merger.merge(res, opts)


def _lost_cell(name: str, rep: int, e: BaseException) -> CellResult:
    text = str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__
    return CellResult(name=name, repeat=rep, ok=False, interrupted=False,
                      entry={"status": "failed", "error": f"the Ray task failed: {text}", "levels": {}},
                      records=[])


# ---------------------------------------------------------------- the remote side


def run_cell(cfg: Any, target: Any, rep: int, submitted: float) -> CellResult:
    """One engine start of ``target`` in repeat ``rep``, in a Ray worker on the node Ray picked."""
    from compare.running import aio
    from compare.running.ray_merge import CellWriter
    from compare.quality.deferred import score_quality
    from compare.running.runner import Progress, RepeatPool, run_backend
    from backends import registry
    from compare.running.load import offered_load

    started = time.time()
    # Ray pins OMP_NUM_THREADS to the task's CPUs (1): engines size their own thread pools, as locally
    if cfg.scaleout.omp_threads is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = cfg.scaleout.omp_threads
    os.environ.setdefault("LLM_COMPARE_RUN_ID", cfg.run_id)
    aio.install_signal_policy()  # ray.cancel interrupts the cell like Ctrl-C: engines are torn down
    name = redact_url(str(target))
    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix="llmc-cell-"))
        writer = CellWriter(tmp, "cell", {})
        progress = Progress()  # the driver reports each cell's levels when it merges them
        pool = RepeatPool()
        interrupted = False
        try:
            backend = registry.Builder(offered_load(cfg.levels, cfg.requests))(target, cfg.spec_for(str(target)))
            pending: list[Any] = []  # this cell's engine has stopped once run_backend returns
            ok = aio.run(run_backend(cfg, name, backend, writer, progress, rep, pool, pending))
            aio.run(score_quality(cfg, writer, pending, progress))
        except (KeyboardInterrupt, asyncio.CancelledError):
            ok, interrupted = False, True
        except UserError as e:  # e.g. a spec this node's engine cannot honour
            writer.update_backend(name, status="failed", error=str(e))
            ok = False
        import ray

        ctx = ray.get_runtime_context()
        res = cell_result(name, rep, ok, interrupted, writer, pool)
        res.node = {"node_id": ctx.get_node_id()[:12], "ip": ray.util.get_node_ip_address(),
                    "host": socket.gethostname(), "pid": os.getpid(),
                    "queued_s": round(started - submitted, 3), "wall_s": round(time.time() - started, 3)}
        return res
    finally:
        _remove(tmp)


def cell_result(name: str, rep: int, ok: bool, interrupted: bool, writer: Any, pool: Any) -> CellResult:
    """What a cell sends back once ``run_backend`` returned: its column's section, its records, each
    level's wall time and client lag as the repeat pool holds them (the driver pools them by the
    same rule: ray_merge.py) and its engine logs."""
    logs = {p.name: p.read_bytes() for p in sorted((writer.dir / LOG_DIR).glob("*")) if p.is_file()}
    return CellResult(name=name, repeat=rep, ok=ok, interrupted=interrupted, entry=writer.run["backends"].get(name, {}),
                      records=writer.records, wall_ns={k[1]: v for k, v in pool.wall_ns.items()},
                      loop_lag_ms={k[1]: dict(v) for k, v in pool.lag.items()}, logs=logs)


def _remove(tmp: Path | None) -> None:
    """The cell's scratch directory goes, also when a cancellation (an interrupt) lands mid-removal."""
    for _ in range(3):
        try:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            return
        except KeyboardInterrupt:
            continue

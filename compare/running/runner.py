"""The runner: the identical request list and schedule, replayed on each backend in isolation.

For each backend: build (adapters validate the spec first, before anything starts), start,
warm up, run every load level, stop. Backends run one after another, never at the same time.

With ``repeats`` > 1 the whole start/warm-up/measure/stop cycle is repeated with a fresh engine,
in interleaved order (A B A B ...) so slow drift of the machine hits every backend alike. Each
repeat's level summaries are kept (``backends[name].repeats``) for the statistics
(compare/analysis/stats.py); ``levels`` then holds the summary of all repeats' requests pooled.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from adapters.spec import ServingSpec
from backends import registry
from core.records import GenerationRequest
from core.errors import BackendStartError
from backends.base import Backend
from backends.logs import capture, log_file
from backends.telemetry import LevelTelemetry
from compare.running import aio
from compare.running.executor import LevelInterrupted, LevelOutcome, RunAborted, run_level, run_one
from compare.running.aio import running_loop_name
from compare.running.load import offered_load
from core.hardware import fingerprint
from backends.http.urls import redact_url
from compare.analysis.steady import Trim, measured_ns
from compare.workload.sessions import is_sessions
from compare.quality.deferred import score_quality, unscored
from compare.quality.parity import QualityOptions
from core.slo import SLO
from core.records import RequestRecord
from core.results import LevelSummary, ResultsWriter, new_run_id
from core.results.io import ResultsWriteError
from compare.running.entry import BackendEntry
from compare.running.level_assembly import assemble_interrupted, assemble_level
from compare.running.repeat_pool import RepeatPool
from compare.workload.schedule import LoadLevel
from compare.workload.build import WorkloadSpec
from compare.workload.clock import workload_rows


@dataclass(frozen=True)
class RunConfig:
    backends: list[str | registry.BackendTarget]  # names, or typed targets (str() is the display name)
    spec: ServingSpec
    workload: WorkloadSpec
    requests: list[GenerationRequest]
    levels: list[LoadLevel]
    slo: SLO = SLO()
    warmup: int = 2
    timeout_s: float = 600.0
    max_errors: int | None = None
    out_root: Path = Path("results")
    run_id: str = field(default_factory=new_run_id)
    lag_threshold_ms: float = 50.0
    backend_specs: dict[str, ServingSpec] = field(default_factory=dict)  # per-backend overrides
    repeats: int = 1  # engine restarts per backend, interleaved A B A B
    stream_logs: bool = False  # engine log lines also go to progress.log_line (`-v`)
    client_procs: int | None = 1  # processes sending each level (None: auto; compare/running/multiproc.py)
    scaleout: Any = None  # ray_cells.ScaleOut: the cells run as Ray tasks on a cluster (`--ray`)
    # a further measurement in the same engine start, after the levels: awaited with
    # (cfg, name, backend, entry, repeat, progress); e.g. `--find-max-rate` (compare/tuning/max_rate.py)
    after_levels: Callable[..., Awaitable[None]] | None = None
    # quality vs the float32 reference: probes answered while each engine runs, scored once every
    # engine has stopped (compare/quality/deferred.py)
    quality: QualityOptions = field(default_factory=QualityOptions)

    def spec_for(self, backend: str) -> ServingSpec:
        return self.backend_specs.get(backend, self.spec)


class Progress:
    """Callbacks for the console; a no-op by default (tests)."""

    def backend_start(self, name: str) -> None: ...
    def level_start(self, name: str, level: LoadLevel, n: int) -> None: ...
    def request_done(self, rec: RequestRecord) -> None: ...
    def level_done(self, name: str, level: LoadLevel, summary: LevelSummary) -> None: ...
    def message(self, text: str) -> None: ...
    def note(self, name: str, text: str) -> None: ...  # one finished step's line (e.g. a max-rate probe)
    def phase(self, name: str, what: str, log: Path | None = None) -> None: ...  # starting, warm-up, stopping
    def log_line(self, name: str, line: str) -> None: ...

    def backend_failed(self, name: str, error: str, log: Path | None) -> None:
        self.message(f"[{name}] {error}")


async def run(cfg: RunConfig, progress: Progress | None = None,
              backend_factory: Callable[[str | registry.BackendTarget, ServingSpec], Backend] | None = None,
              extra_header: dict[str, Any] | None = None) -> ResultsWriter:
    progress = progress or Progress()
    # each backend's native plan is resolved once and reused by every repeat and describe()
    factory = backend_factory or registry.Builder(offered_load(cfg.levels, cfg.requests))  # TGI's limits follow it
    # Validate every backend's spec before starting anything: a bad option fails the whole run
    # up front instead of after the first backend has spent minutes.
    built = {redact_url(str(b)): factory(b, cfg.spec_for(str(b))) for b in cfg.backends}
    if cfg.client_procs != 1:
        from compare.running.multiproc import check_procs

        check_procs(cfg.client_procs, built.values())  # one line, before anything starts or is written
    # container labels carry the results' run id (unless the caller set its own label id)
    os.environ.setdefault("LLM_COMPARE_RUN_ID", cfg.run_id)
    writer = ResultsWriter(cfg.out_root, cfg.run_id, {
        "spec": cfg.spec.model_dump(mode="json"),
        "backend_specs": {k: v.model_dump(mode="json") for k, v in cfg.backend_specs.items()},
        "workload": cfg.workload.model_dump(mode="json"),
        "levels": [lv.as_dict() for lv in cfg.levels],
        "slo": cfg.slo.to_json(),
        "warmup_requests": cfg.warmup,
        "repeats": cfg.repeats,
        "hardware": fingerprint(),
        "client": {"event_loop": running_loop_name(), "gc_frozen_during_levels": True,
                   "client_procs": "auto" if cfg.client_procs is None else cfg.client_procs},
        **(extra_header or {}),  # e.g. gpu_hour_price, so reports re-render with it
    })
    writer.write_workload(workload_rows(cfg.requests, cfg.levels))  # with a trace's clock (workload/clock.py)
    status, error = "complete", None
    pool = RepeatPool()
    failed: set[str] = set()
    pending: list[Any] = []  # quality probes answered, to score once every engine has stopped
    try:
        cells = cfg.scaleout is not None and not cfg.scaleout.load_shards
        if cells:  # the same cells, as Ray tasks (compare/running/ray_cells.py)
            status = await cfg.scaleout.run(cfg, writer, progress)
        for rep in range(0 if cells else cfg.repeats):
            for target in cfg.backends:
                name = redact_url(str(target))  # credentials in a URL are never shown or stored
                if name in failed:
                    continue
                aio.check_stop()  # a signal held back by the previous backend's teardown
                # a fresh backend object per repeat: the engine restarts, nothing is reused
                backend = built.pop(name, None) or factory(target, cfg.spec_for(str(target)))
                if not await run_backend(cfg, name, backend, writer, progress, rep, pool, pending):
                    status = "partial"
                    failed.add(name)
        await score_quality(cfg, writer, pending, progress)
    except (KeyboardInterrupt, asyncio.CancelledError):
        unscored(writer, pending, "the run was stopped before the reference scored it")
        sig = aio.stop_signal()
        by = f"stopped by {signal.Signals(sig).name}" if sig else "interrupted"
        writer.finish("interrupted", f"{by}; every finished request is kept and the completed part "
                                     f"of each level summarised (a level cut short is marked aborted)")
        raise
    except BaseException as e:
        unscored(writer, pending, "the run failed before the reference scored it")
        writer.finish("failed", f"{type(e).__name__}: {e}")
        raise
    from compare.analysis import length_match, prompt_parity

    length_match.attach(writer, writer.dir)  # '@k' rows when some backend could not force lengths
    prompt_parity.attach(writer, writer.dir)  # whether every engine saw the same prompt lengths
    if aio.stop_signal() is not None:  # arrived during the last teardown, which was finished
        error = (f"{signal.Signals(aio.stop_signal()).name} arrived during the final teardown; "
                 f"the results are complete")
    writer.finish(status, error)
    return writer


async def run_backend(cfg: RunConfig, name: str, backend: Backend, writer: ResultsWriter,
                      progress: Progress, rep: int = 0, pool: RepeatPool | None = None,
                      pending: list[Any] | None = None) -> bool:
    """One engine start of one backend (its lifecycle and status); its quality probes go to
    ``pending`` (scored by the caller once every engine has stopped: compare/quality/deferred.py)."""
    pool = pool or RepeatPool()
    be = BackendEntry(writer, name, rep, cfg.repeats)
    be.update(capabilities=backend.capabilities)
    progress.backend_start(name if cfg.repeats == 1 else f"{name} (repeat {rep + 1}/{cfg.repeats})")
    log = log_file(writer.dir, name)  # everything the engine prints goes there (backends/logs.py)
    backend.attach_results_dir(log.parent)  # server/container logs are kept with the results
    backend.set_request_timeout(cfg.timeout_s)  # HTTP servers: how long the start-up probe waits
    progress.phase(name, "starting", log)
    t0 = time.perf_counter()
    stopped_in: list[str] = []  # where a stop signal found the backend
    try:
        async with _engine(cfg, name, backend, log, progress):
            start_s = round(time.perf_counter() - t0, 3)
            be.update_repeat(start_s=start_s)
            be.update(describe=backend.describe(), status="running",
                      **({} if "start_s" in be.entry.model_fields_set else {"start_s": start_s}))
            writer.flush()
            if rep == 0:
                await _probe(cfg, name, backend, be, pending)
            progress.phase(name, "warm-up", log)
            await _warmup(cfg, backend)
            for level in cfg.levels:
                await _measure_level(cfg, name, backend, level, be, writer, progress, rep, pool, stopped_in)
            if cfg.after_levels is not None:
                await cfg.after_levels(cfg, name, backend, be, rep, progress)
                writer.flush()
        be.update_repeat(status="complete")
        be.update(status="complete" if rep == cfg.repeats - 1 else "running")
        return True
    except (BackendStartError, RunAborted) as e:
        be.set_status("failed", str(e) if cfg.repeats == 1 else f"repeat {rep + 1}: {e}")
        progress.backend_failed(name, str(e), log)
        return False
    except (KeyboardInterrupt, asyncio.CancelledError):
        sig = aio.stop_signal()
        by = f"stopped by {signal.Signals(sig).name}" if sig else "interrupted"
        where = stopped_in.pop() if stopped_in else "before its levels ran"
        be.set_status("interrupted", f"{by} {where}" if cfg.repeats == 1 else f"repeat {rep + 1}: {by} {where}")
        raise
    finally:
        writer.flush()


async def _probe(cfg: RunConfig, name: str, backend: Backend, be: BackendEntry, pending: list[Any] | None) -> None:
    """Once per backend (its first engine start): loaded vs requested quantization, and the quality
    probes answered now, scored later."""
    from compare.quality.deferred import collect
    from compare.quality.parity import verification

    be.update(quant_verification=verification(cfg.spec_for(name), backend))
    quality, probed = await collect(name, backend, cfg.spec_for(name), cfg.requests, cfg.quality, cfg.timeout_s)
    be.update(quality=quality)
    if probed is not None and pending is not None:
        pending.append(probed)


async def _measure_level(cfg: RunConfig, name: str, backend: Backend, level: LoadLevel, be: BackendEntry,
                         writer: ResultsWriter, progress: Progress, rep: int, pool: RepeatPool,
                         stopped_in: list[str]) -> None:
    """One load level: the backend's hooks and the telemetry around it, its row built by the level
    assembler (level_assembly.py), pooled over the repeats so far; RunAborted when it was cut short."""
    # hooks (no-ops by default): backends with server-side metrics sample them around each level
    await backend.on_level_start(level.label)
    try:
        # CPU per process and GPUs, sampled in a thread (not the loop) while the level runs
        with LevelTelemetry(backend) as tel:
            outcome = await _run_level(cfg, backend, level, writer, progress, rep)
    except LevelInterrupted as stopped:
        o = stopped.outcome
        summary = assemble_interrupted(cfg, o, [replace(r, repeat=rep) for r in o.records])
        be.put_level(o.level.label, summary, show=cfg.repeats == 1)  # pooled rows only pool whole levels
        stopped_in.append(f"in level {level.label} ({summary.aborted})")
        raise
    requests = level.take(cfg.requests)
    # steady state of a time-bounded level: the same marks requests.jsonl got (steady.py)
    trim = Trim(level, requests, cfg.workload.seed)
    records = [replace(trim(r), repeat=rep) for r in outcome.records]
    server_metrics = await backend.on_level_end(level.label)
    summary = assemble_level(cfg, level, requests, records, outcome, telemetry=tel, server_metrics=server_metrics,
                             framework=backend.describe().framework)
    shown = summary
    if cfg.repeats > 1:
        key = (name, level.label)
        pool.add(key, measured_ns(outcome), outcome.loop_lag_ms, records, summary.client_lagged)
        shown = pool.pooled(cfg, key, summary, rep + 1)
    be.put_level(level.label, summary, shown)
    be.update(describe=backend.describe())  # may have learned more (e.g. /metrics)
    writer.flush()
    progress.level_done(name, level, summary)
    if outcome.aborted:
        raise RunAborted(outcome.aborted)


@asynccontextmanager
async def _engine(cfg: RunConfig, name: str, backend: Backend, log: Path, progress: Progress) -> AsyncIterator[None]:
    """The backend's whole life with fds 1/2 in its log file: engines' own output never reaches the
    console, and child processes spawned at start keep writing there."""
    on_line = (lambda line: progress.log_line(name, line)) if cfg.stream_logs else None
    with capture(log, on_line):
        await backend.__aenter__()  # a backend whose start fails (or is cancelled) cleans up itself
        try:
            yield
        finally:
            progress.phase(name, "stopping", log)
            with aio.signals_deferred():  # a stop signal never cuts a teardown short
                await backend.__aexit__(None, None, None)


WARMUP_TIMEOUT_S = 120.0  # per warm-up request (at most 8 tokens), capped by --timeout


async def _warmup(cfg: RunConfig, backend: Backend) -> None:
    """A few requests before measuring (first-call compilation, caches); never recorded."""
    for r in cfg.requests[: cfg.warmup]:
        warm = GenerationRequest(request_id=f"warmup-{r.request_id}", max_tokens=min(r.max_tokens, 8),
                                 prompt_token_ids=r.prompt_token_ids, prompt_text=r.prompt_text,
                                 messages=r.messages, ignore_eos=r.ignore_eos)
        rec = await run_one(backend, warm, "warmup", min(cfg.timeout_s, WARMUP_TIMEOUT_S))
        if not rec.ok:  # a backend that cannot serve 8 tokens is not measured (a hung one fails here, fast)
            raise BackendStartError(f"warm-up request failed ({rec.error_kind}: {rec.error})")


async def _run_level(cfg: RunConfig, backend: Backend, level: LoadLevel, writer: ResultsWriter,
                     progress: Progress, rep: int = 0) -> LevelOutcome:
    requests = level.take(cfg.requests)  # --requests-per-stream: this level's prefix of the workload
    progress.level_start(backend.name, level, len(requests))
    trim = Trim(level, requests, cfg.workload.seed)  # a time-bounded level's steady state (steady.py)

    loop = asyncio.get_running_loop()
    pending: list[RequestRecord] = []
    failed: list[ResultsWriteError] = []  # a failed write, raised once: by the next record or after the level

    def write_pending() -> None:
        batch = pending[:]
        pending.clear()
        try:
            writer.add_records(batch)
        except ResultsWriteError as e:
            failed.append(e)

    def on_record(rec: RequestRecord) -> None:
        # requests.jsonl gets the records that end in one pass of the event loop in one write
        # (its next pass), not a system call each on the client's core in the middle of the level
        if failed:
            raise failed.pop()  # (the writer drops every later record, as it did this one)
        rec = trim(rec)
        if not pending:
            loop.call_soon(write_pending)
        pending.append(replace(rec, repeat=rep) if rep else rec)
        progress.request_done(rec)

    try:
        return await _send_level(cfg, backend, level, requests, writer, on_record)
    finally:
        write_pending()
        if failed:
            raise failed.pop()


async def _send_level(cfg: RunConfig, backend: Backend, level: LoadLevel, requests: list[GenerationRequest],
                      writer: ResultsWriter, on_record: Callable[[RequestRecord], None]) -> LevelOutcome:
    max_errors = cfg.max_errors if cfg.max_errors is not None else max(1, len(requests) // 2)
    if is_sessions(requests):  # a session's turns wait on each other's replies: one client process
        from compare.running.sessions import run_session_level

        return await run_session_level(backend, requests, level, seed=cfg.workload.seed, timeout_s=cfg.timeout_s,
                                       max_errors=max_errors, on_record=on_record)
    if cfg.scaleout is not None and cfg.scaleout.load_shards:  # load generators as Ray actors (ray_load.py)
        return await cfg.scaleout.run_level(cfg, backend, level, writer, max_errors, on_record)
    if cfg.client_procs != 1:
        from compare.running.multiproc import level_procs, run_level_procs

        n = level_procs(cfg.client_procs, backend, level, len(requests))
        if n > 1:
            return await run_level_procs(backend, requests, level, procs=n, seed=cfg.workload.seed,
                                         timeout_s=cfg.timeout_s, max_errors=max_errors, on_record=on_record)
    # run_level keeps the garbage collector out of the level's timing (compare/running/executor.py)
    return await run_level(backend, requests, level, seed=cfg.workload.seed,
                           timeout_s=cfg.timeout_s, max_errors=max_errors, on_record=on_record)

"""One level assembler: the same records give the same run.json levels whether a local run pools
them (runner.run, each repeat added as it ends) or a Ray run's driver does (each cell's
``run_backend`` against a CellWriter, its result merged by ray_merge.Merger). The cells run in this
process (the Ray transport is test_ray_e2e.py's); each level's outcome is canned, so both paths see
identical records, wall times and client lag, and only the pooling can differ."""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from adapters.spec import ServingSpec
from backends import registry
from compare.running import runner
from compare.running.level_assembly import assemble_level
from compare.running.load import offered_load
from compare.running.outcome import LevelOutcome
from compare.running.ray_cells import cell_result
from compare.running.ray_merge import CellWriter, Merger
from compare.running.repeat_pool import RepeatPool
from compare.workload.build import LengthDist, WorkloadSpec
from compare.workload.schedule import LoadLevel
from core.records import GenerationRequest, RequestRecord
from core.results import ResultsWriter

N, TOKENS = 6, 4
LEVELS = [LoadLevel("concurrency", 2), LoadLevel("concurrency", 3)]
MS = 1_000_000


def _records(backend: str, level: LoadLevel, rep: int) -> list[RequestRecord]:
    """A level's records, different per repeat and level (so pooling is not a copy), one failed."""
    out = []
    for i in range(N):
        t0 = 10**12 + (rep * 100 + i * 7) * MS
        step = (2 + rep + level.value) * MS
        if i == N - 1:
            out.append(RequestRecord(request_id=f"r{i}", backend=backend, level=level.label, t_sent_ns=t0,
                                     t_ready_ns=t0, t_end_ns=t0 + 3 * MS, requested_tokens=TOKENS,
                                     error_kind="engine", error="canned failure"))
            continue
        times = tuple(t0 + (5 + rep + i) * MS + k * step for k in range(TOKENS))
        out.append(RequestRecord(request_id=f"r{i}", backend=backend, level=level.label, t_sent_ns=t0,
                                 t_ready_ns=t0, event_times_ns=times, event_token_counts=(1,) * TOKENS,
                                 token_ids=tuple(range(TOKENS)), t_end_ns=times[-1], finish_reason="length",
                                 prompt_tokens=3, usage_completion_tokens=TOKENS, requested_tokens=TOKENS))
    return out


async def _canned_level(cfg, backend, level, writer, progress, rep=0) -> LevelOutcome:
    """runner._run_level with its outcome fixed: records, wall time and client lag per (level, repeat);
    the lag's max is above the 50 ms threshold and its p99 below it (a pooled row judges the p99)."""
    recs = _records(backend.name, level, rep)
    for r in recs:
        writer.add_record(replace(r, repeat=rep) if rep else r)
    t0 = min(r.t_sent_ns for r in recs)
    return LevelOutcome(level=level, records=recs, t_start_ns=t0, t_end_ns=max(r.t_end_ns or 0 for r in recs) + MS,
                        schedule_offsets_ns=None, loop_lag_ms={"max": 60.0 + rep, "p99": 4.0 + rep},
                        planned=len(recs))


class _NoTelemetry:
    """Telemetry samples this machine's CPU: not the same twice, so left out of both paths."""

    def __init__(self, *a, **k) -> None: ...
    def __enter__(self): return self
    def __exit__(self, *exc) -> None: ...
    def summary(self, *a, **k) -> None: return None


def _cfg(tmp: Path, run_id: str, repeats: int) -> runner.RunConfig:
    reqs = [GenerationRequest(f"r{i}", TOKENS, prompt_token_ids=(1, 2, 3)) for i in range(N)]
    wl = WorkloadSpec(num_requests=N, input=LengthDist(dist="fixed", value=3),
                      output=LengthDist(dist="fixed", value=TOKENS), prompt_format="token_ids")
    return runner.RunConfig(backends=["fake@ttft=1ms+itl=1ms"], spec=ServingSpec(model="fake"), workload=wl,
                            requests=reqs, levels=LEVELS, warmup=1, out_root=tmp, run_id=run_id, repeats=repeats)


async def _through_merge(cfg: runner.RunConfig, tmp: Path) -> None:
    """What run_cells does, each cell in this process: run_backend against a CellWriter, its
    cell_result merged by the driver's Merger, in interleaved order."""
    writer = ResultsWriter(cfg.out_root, cfg.run_id, {"repeats": cfg.repeats})
    writer.update(ray={"address": "local", "nodes": [], "cells": [], "load_shards": []})
    merger = Merger(cfg, writer, runner.Progress())
    build = registry.Builder(offered_load(cfg.levels, cfg.requests))
    for rep in range(cfg.repeats):
        for target in cfg.backends:
            name = str(target)
            cw = CellWriter(tmp / f"cell-{rep}", "cell", {})
            pool = RepeatPool()
            ok = await runner.run_backend(cfg, name, build(target, cfg.spec_for(name)), cw, runner.Progress(),
                                          rep, pool, [])
            merger.merge(cell_result(name, rep, ok, False, cw, pool), {})
    writer.finish("complete", None)


@pytest.mark.parametrize("repeats", [1, 3])
def test_local_and_ray_merge_give_identical_levels(tmp_path, monkeypatch, repeats):
    monkeypatch.setattr(runner, "_run_level", _canned_level)
    monkeypatch.setattr(runner, "LevelTelemetry", _NoTelemetry)
    local = _cfg(tmp_path, "local", repeats)
    asyncio.run(runner.run(local))
    asyncio.run(_through_merge(_cfg(tmp_path, "merged", repeats), tmp_path))
    a, b = (json.loads((tmp_path / d / "run.json").read_text())["backends"] for d in ("local", "merged"))
    assert list(a) == list(b) == ["fake@ttft=1ms+itl=1ms"]
    (ea,), (eb,) = a.values(), b.values()
    assert set(ea["levels"]) == {"c2", "c3"}
    assert ea["levels"] == eb["levels"]  # the pooled rows (every repeat), field by field
    # each repeat's own rows (its engine start time is measured, not canned)
    assert [r["levels"] for r in ea.get("repeats") or []] == [r["levels"] for r in eb.get("repeats") or []]
    assert [(r["repeat"], r["status"]) for r in ea.get("repeats") or []] == \
        [(r["repeat"], r["status"]) for r in eb.get("repeats") or []]
    if repeats > 1:
        row = ea["levels"]["c2"]
        assert row["repeats"] == 3 and row["ok"] == 3 * (N - 1) and row["errors"] == {"engine": 3}
        # the pooled lag is the worst of every repeat's, max and p99; its p99 (below 50 ms) judges it
        assert row["loop_lag_ms"]["max"] == 62.0 and row["loop_lag_ms"]["p99"] == 6.0
        assert row["client_lagged"] is False
    la, lb = ((tmp_path / d / "requests.jsonl").read_text().splitlines() for d in ("local", "merged"))
    assert sorted(la) == sorted(lb) and len(la) == repeats * len(LEVELS) * N


def test_the_assembler_is_what_the_runner_writes(tmp_path, monkeypatch):
    """The row run.json holds is assemble_level's over the level's records, nothing added after."""
    monkeypatch.setattr(runner, "_run_level", _canned_level)
    monkeypatch.setattr(runner, "LevelTelemetry", _NoTelemetry)
    cfg = _cfg(tmp_path, "one", 1)
    asyncio.run(runner.run(cfg))
    (entry,) = json.loads((tmp_path / "one" / "run.json").read_text())["backends"].values()
    level = LEVELS[0]
    recs = _records("fake@ttft=1ms+itl=1ms", level, 0)
    o = asyncio.run(_canned_level(cfg, type("B", (), {"name": "fake@ttft=1ms+itl=1ms"})(), level,
                                  type("W", (), {"add_record": lambda self, r: None})(), None))
    row = assemble_level(cfg, level, cfg.requests, recs, o, telemetry=_NoTelemetry(), framework="fake (test instrument)")
    assert entry["levels"][level.label] == json.loads(row.model_dump_json(exclude_unset=True))

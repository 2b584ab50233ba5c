"""Synthetic results for the stats/verdict/gate unit tests: real RequestRecords with integer ns
times (allowed for metric units), summarised by the real compare.analysis.metrics.summarize."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from compare.analysis.metrics import summarize
from core.records import RequestRecord
from core.results import SCHEMA_VERSION

MS = 1_000_000


def records(backend: str, level: str, repeat: int, *, n: int = 16, ttft_ms: float = 20.0,
            tpot_ms: float = 5.0, out: int = 8, noise: float = 0.1, seed: int = 0,
            concurrency: int = 1, gaps_ms: Sequence[float] | None = None) -> list[RequestRecord]:
    """n requests, TTFT/TPOT drawn around the given means (lognormal noise), closed loop.
    ``gaps_ms``: each request's token gaps (out - 1 of them) around these instead of ``tpot_ms``
    each: the same TPOT with a different ITL spread."""
    rng = np.random.default_rng([seed, repeat, sum(map(ord, backend))])
    recs, t = [], 0
    for i in range(n):
        ttft = int(ttft_ms * MS * rng.lognormal(0, noise))
        gaps = [int(g * MS * rng.lognormal(0, noise)) for g in (gaps_ms or [tpot_ms] * (out - 1))]
        ev = [t + ttft]
        for g in gaps:
            ev.append(ev[-1] + g)
        recs.append(RequestRecord(
            request_id=f"req-{i:03d}", backend=backend, level=level, t_sent_ns=t,
            event_times_ns=tuple(ev), event_token_counts=(1,) * out, token_ids=tuple(range(out)),
            t_end_ns=ev[-1] + 1000, finish_reason="length", prompt_tokens=16, requested_tokens=out,
            repeat=repeat))
        if (i + 1) % concurrency == 0:
            t = ev[-1] + 1000
    return recs


def make_run(cells: dict[str, list[list[RequestRecord]]], level: str = "c1",
             workload: dict | None = None, slo: list | None = None,
             spec: dict | None = None) -> tuple[dict, list[RequestRecord]]:
    """run.json-shaped dict + all records; cells: backend -> one record list per repeat."""
    run = {"schema_version": SCHEMA_VERSION, "run_id": "synthetic", "status": "complete",
           "spec": spec or {"model": "tiny", "quantization": "none", "tensor_parallel": 1},
           "backend_specs": {}, "workload": workload or {"name": "w", "seed": 0, "num_requests": 16},
           "levels": [{"kind": "concurrency", "value": 1, "label": level}], "slo": slo or [],
           "repeats": max(len(v) for v in cells.values()), "hardware": {"cpu_model": "x", "packages": {}},
           "backends": {}}
    everything = []
    for name, reps in cells.items():
        entry = {"status": "complete", "capabilities": {"forced_output_length": True},
                 "describe": {"name": name, "framework": name, "version": "1", "native_config": {}, "extra": {}},
                 "levels": {}, "repeats": []}
        for k, recs in enumerate(reps):
            wall = max(r.t_end_ns for r in recs) - min(r.t_sent_ns for r in recs)
            s = summarize(recs, wall).model_dump(exclude_unset=True)
            s["client_lagged"] = False
            entry["repeats"].append({"repeat": k, "status": "complete", "levels": {level: s}})
            everything += recs
        entry["levels"][level] = summarize([r for recs in reps for r in recs],
                                           sum(max(r.t_end_ns for r in x) for x in reps)).model_dump(exclude_unset=True)
        if len(reps) == 1:
            del entry["repeats"]
        run["backends"][name] = entry
    return run, everything

"""Latency/throughput metrics from immutable RequestRecords.

Definitions (all client-side, from perf_counter_ns stamps): TTFT, ITL, TPOT and E2E are defined,
with their extractors, in the metric registry (core/metrics.py; re-exported here).
- Throughput: output tokens of successful requests / level wall time (first send to last end).
- Goodput: requests/s that met every per-request SLO threshold (the SLO's percentiles are
  checked separately as ``slo_met``).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from core.metrics import LEVEL, REGISTRY, TOKEN, Metric, latency
from core.metrics import e2e_ns, itls_ns, tpot_ns, ttft_ns  # noqa: F401  (the extractors' usual import)
from core.records import RequestRecord
from core.results import Dist, LevelSummary
from core.slo import SLO

PERCENTILES = (50, 90, 95, 99)


def queue_delay_ns(r: RequestRecord) -> int | None:
    """How late the client actually sent: vs the schedule (open loop), else vs when it was ready
    to send (closed loop; ``t_ready_ns``). Client overload, not the server's time."""
    due = r.t_scheduled_ns if r.t_scheduled_ns is not None else r.t_ready_ns
    return None if due is None else r.t_sent_ns - due


# send delay p99 above this: the client held back load it was to offer (coordinated omission);
# flagged in the level summary and as a caveat (docs/http-client.md)
COORDINATED_OMISSION_MS = 10.0


def dist(values_ns: Iterable[float], scale: float = 1e-6) -> Dist | None:
    """Summary of values given in ns, reported in ms by default."""
    a = np.asarray([v for v in values_ns if v is not None], dtype=np.float64) * scale
    if a.size == 0:
        return None
    p = np.percentile(a, PERCENTILES)
    p50, p90, p95, p99 = map(float, p)
    return Dist(n=int(a.size), mean=float(a.mean()), p50=p50, p90=p90, p95=p95, p99=p99,
                min=float(a.min()), max=float(a.max()))


# ---------------------------------------------------------------- SLO (core/slo.py)

_BY_KEY = {m.key: m for m in REGISTRY}


def request_meets_slo(r: RequestRecord, slo: SLO) -> bool:
    """Per-request check: each term's limit applied to this request's own value (ms; a token
    metric's series, which the term reduces)."""
    return r.ok and slo.request_met({m: _BY_KEY[m].request_ms(r) for m in slo.metrics})


# ---------------------------------------------------------------- level summary


def summarize(records: Sequence[RequestRecord], wall_ns: int,
              slo: SLO = SLO()) -> LevelSummary:
    """One level's summary. Every key written here is set on the model (a metric without values is
    an explicit null), the engine-side and SLO ones only where they apply: run.json's layout.
    Records trimmed from a time-bounded level's steady state (compare/analysis/steady.py) are left
    out; ``wall_ns`` is then the measured window's."""
    records = [r for r in records if r.trimmed is None]
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    wall_s = max(wall_ns, 1) / 1e9
    dists = {m.summary_key: _latency_dist(m, ok) for m in latency()}
    qd = dist(queue_delay_ns(r) for r in records)
    summary: dict[str, Any] = {
        "requests": len(records),
        "ok": len(ok),
        "failed": len(records) - len(ok),
        "errors": _error_counts(records),
        "wall_s": wall_s,
        "output_tokens": out_tokens,
        "input_tokens": sum(r.prompt_tokens or 0 for r in ok),
        "output_tok_s": out_tokens / wall_s,
        "req_s": len(ok) / wall_s,
        **dists,
        "send_delay_ms": qd,
        "coordinated_omission": bool(qd and qd.p99 > COORDINATED_OMISSION_MS),
        "short_outputs": sum(1 for r in ok if r.requested_tokens and r.output_tokens < r.requested_tokens),
    }
    summary.update(engine_side(records))
    if slo:
        good = sum(1 for r in records if request_meets_slo(r, slo))
        limited = (m for m in REGISTRY if m.slo_stats and m.kind != LEVEL)
        checks = slo.check_level({m.key: d.model_dump() if (d := dists.get(m.summary_key)) else None
                                  for m in limited})
        summary["goodput_req_s"] = good / wall_s
        summary["slo_attainment"] = good / len(records) if records else 0.0
        summary["slo_checks"] = checks
        summary["slo_met"] = all(c["met"] for c in checks.values()) and len(ok) == len(records)
    return LevelSummary.model_validate(summary)


def _latency_dist(m: Metric, ok: Sequence[RequestRecord]) -> Dist | None:
    if m.kind == TOKEN:
        return dist(x for r in ok for x in m.extract_ns(r))  # type: ignore[misc]
    return dist(m.extract_ns(r) for r in ok)  # type: ignore[misc]


def engine_side(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Throughput from the engine's own token stamps, and how late the client saw the tokens.

    Only for backends that report engine-core stamps on the same clock as ours (the in-process
    vLLM backend): ``engine_output_tok_s`` = output tokens / (last token produced by the engine -
    first request sent). Where it exceeds ``output_tok_s``, the gap is delivery (the frontend's
    output processing and our event loop), not the engine. ``delivery_lag_ms``: per request, when
    the client saw its last token minus when the engine produced it.
    """
    ok = [r for r in records if r.ok]
    ends = [r.engine_metrics.get("engine_last_token_ts") for r in ok]
    if not ok or any(e is None for e in ends):
        return {}
    span_s = max(ends) - min(r.t_sent_ns for r in records) / 1e9
    out: dict[str, Any] = {}
    if span_s > 0:
        out["engine_output_tok_s"] = sum(r.output_tokens for r in ok) / span_s
    lag = dist((r.engine_metrics["last_token_delivery_s"] * 1e9 for r in ok
                if "last_token_delivery_s" in r.engine_metrics))
    if lag:
        out["delivery_lag_ms"] = lag
    return out


def _error_counts(records: Sequence[RequestRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        if r.error_kind:
            counts[r.error_kind] = counts.get(r.error_kind, 0) + 1
    return counts

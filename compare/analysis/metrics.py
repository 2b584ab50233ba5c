"""Latency/throughput metrics from immutable RequestRecords.

Definitions (all client-side, from perf_counter_ns stamps):
- TTFT: first event carrying a token - send time.
- ITL: gap between consecutive events, attributed to the first token of the later event; the
  other tokens of a multi-token event get an ITL of 0 (they arrived together). So
  sum(ITL) == last token time - first token time, and an engine that batches tokens into one
  event is not credited with impossibly small per-token gaps on average.
- TPOT: (last token time - first token time) / (output tokens - 1), per request.
- E2E: end of stream - send time.
- Throughput: output tokens of successful requests / level wall time (first send to last end).
- Goodput: requests/s that met every per-request SLO threshold (the SLO's percentiles are
  checked separately as ``slo_met``).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from core.records import RequestRecord
from core.results import Dist, LevelSummary
from core.slo import SLO

PERCENTILES = (50, 90, 95, 99)


def ttft_ns(r: RequestRecord) -> int | None:
    return r.event_times_ns[0] - r.t_sent_ns if r.event_times_ns else None


def e2e_ns(r: RequestRecord) -> int | None:
    return (r.t_end_ns - r.t_sent_ns) if r.t_end_ns is not None and r.ok else None


def itls_ns(r: RequestRecord) -> list[int]:
    out: list[int] = []
    times, counts = r.event_times_ns, r.event_token_counts
    # tokens after the very first one of the stream
    if counts and counts[0] > 1:
        out.extend([0] * (counts[0] - 1))
    for i in range(1, len(times)):
        out.append(times[i] - times[i - 1])
        out.extend([0] * (counts[i] - 1))
    return out


def tpot_ns(r: RequestRecord) -> float | None:
    n = sum(r.event_token_counts)
    if n < 2 or not r.event_times_ns:
        return None
    return (r.event_times_ns[-1] - r.event_times_ns[0]) / (n - 1)


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

# a request's own value of each SLO metric, in ms (ITL: the series; the term reduces it)
_REQUEST_MS = {
    "ttft": lambda r: None if (v := ttft_ns(r)) is None else v / 1e6,
    "tpot": lambda r: None if (v := tpot_ns(r)) is None else v / 1e6,
    "e2e": lambda r: None if (v := e2e_ns(r)) is None else v / 1e6,
    "itl": lambda r: [v / 1e6 for v in itls_ns(r)],
}


def request_meets_slo(r: RequestRecord, slo: SLO) -> bool:
    """Per-request check: each term's limit applied to this request's own value."""
    return r.ok and slo.request_met({m: _REQUEST_MS[m](r) for m in slo.metrics})


# ---------------------------------------------------------------- level summary


def summarize(records: Sequence[RequestRecord], wall_ns: int,
              slo: SLO = SLO()) -> LevelSummary:
    """One level's summary. Every key written here is set on the model (a metric without values is
    an explicit null), the engine-side and SLO ones only where they apply: run.json's layout."""
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    wall_s = max(wall_ns, 1) / 1e9
    ttft = dist(ttft_ns(r) for r in ok)
    tpot = dist(tpot_ns(r) for r in ok)
    itl = dist(x for r in ok for x in itls_ns(r))
    e2e = dist(e2e_ns(r) for r in ok)
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
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "itl_ms": itl,
        "e2e_ms": e2e,
        "send_delay_ms": qd,
        "coordinated_omission": bool(qd and qd.p99 > COORDINATED_OMISSION_MS),
        "short_outputs": sum(1 for r in ok if r.requested_tokens and r.output_tokens < r.requested_tokens),
    }
    summary.update(engine_side(records))
    if slo:
        good = sum(1 for r in records if request_meets_slo(r, slo))
        dists = {"ttft": ttft, "tpot": tpot, "itl": itl, "e2e": e2e}
        checks = slo.check_level({m: d.model_dump() if d else None for m, d in dists.items()})
        summary["goodput_req_s"] = good / wall_s
        summary["slo_attainment"] = good / len(records) if records else 0.0
        summary["slo_checks"] = checks
        summary["slo_met"] = all(c["met"] for c in checks.values()) and len(ok) == len(records)
    return LevelSummary.model_validate(summary)


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

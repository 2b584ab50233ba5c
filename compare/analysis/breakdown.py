"""Where a level's time went, its prefix-cache hit rate, and its server gauges, summarised honestly.

Inputs: the level's request records (client stamps; in-process vLLM also carries the engine's
per-request stamps, backends/vllm/inproc.py ``engine_metrics``) and what the backend reported
around the level (``server_metrics``: a server's scraped Prometheus text, backends/server_metrics.py,
or the in-process engine's scheduler stats, backends/vllm/stats.py).

- Time breakdown (means, ms): queued (engine queue until first scheduled), prefill (scheduled
  until first token), decode (first until last token), and ``outside`` = the client's E2E minus
  the engine's (our client, the API server, HTTP/SSE, tokenisation, IPC to the engine core);
  0 where it is negative by less than the stamps resolve (``OUTSIDE_RESOLUTION_MS``).
  In-process vLLM: from each request's RequestStateStats stamps (exact per request). Servers: the
  histograms' sum/count deltas (exact means; a histogram gives no per-request values).
- Prefix cache: hits / queries in prompt tokens from vLLM's ``vllm:prefix_cache_*`` counter deltas
  (server) or the same SchedulerStats the engine hands its stat loggers (in-process). Engines
  that publish no such counter get "not exposed", never 0.
- Gauges: only samples taken while the client's in-flight count was at the level's target (closed
  loop) or between the first and the last send (open loop); fewer than ``MIN_GAUGE_SAMPLES`` such
  samples and the gauge is "not measured" rather than a number dominated by ramp-up and drain.
"""
from __future__ import annotations

import bisect
import statistics
from typing import Any, Sequence

from core.records import RequestRecord

MIN_GAUGE_SAMPLES = 3
# The engine's E2E starts after the client's bytes arrived (a server: when it took the request in,
# on its own clock; vLLM's input processor) and ends before the last token left; the client's
# send stamp is taken right after its write returned (backends/http/transport.py), so a client
# preempted there stamps late and its E2E comes out short: by up to a few ms on a loaded 2-core
# machine (a level mean of -1.3 ms seen against vLLM's server histograms). A mean "outside" that
# far below zero is not resolved: reported as 0, not as a negative time; one further below is
# kept as measured (a real inconsistency, e.g. the histograms counting other requests).
OUTSIDE_RESOLUTION_MS = 2.0
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "tgi_batch_current_size", "tgi_queue_size")
_QUERIES, _HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"


def level_extras(records: Sequence[RequestRecord], server_metrics: dict[str, Any] | None,
                 concurrency: int | None, framework: str) -> dict[str, Any]:
    """``server_gauges``, ``prefix_cache`` and ``time_breakdown`` for a level summary (plain dicts,
    core/results/models.py validates them)."""
    out: dict[str, Any] = {"prefix_cache": prefix_cache(server_metrics, framework)}
    tb = time_breakdown(records, server_metrics)
    if tb is not None:
        out["time_breakdown"] = tb
    g = gauges(records, server_metrics, concurrency)
    if g:
        out["server_gauges"] = g
    return out


def prefix_cache(sm: dict[str, Any] | None, framework: str) -> dict[str, Any]:
    counters = (sm or {}).get("counters") or {}
    pc = (sm or {}).get("prompt_cache")  # llama-server: each request's cache_n / prompt_n (backends/llamacpp/server.py)
    if _QUERIES not in counters and isinstance(pc, dict) and "cached_tokens" in pc:
        cached, processed = float(pc["cached_tokens"]), float(pc.get("processed_tokens") or 0.0)
        return {"source": "llama-server per-request cached / processed prompt tokens", "queries": cached + processed,
                "hits": cached, "hit_rate": cached / (cached + processed) if cached + processed > 0 else None}
    if _QUERIES not in counters:
        if sm is None:
            return {"source": f"not exposed by {framework}"}
        return {"source": f"no prefix-cache counter in what {framework} reported"}
    q, h = float(counters.get(_QUERIES, 0.0)), float(counters.get(_HITS, 0.0))
    src = ("engine scheduler stats (SchedulerStats.prefix_cache_stats)" if sm and sm.get("kind") == "engine-stats"
           else "vllm:prefix_cache_queries/hits counter deltas")
    if sm and sm.get("enable_prefix_caching") is False:
        src += "; prefix caching off"
    return {"source": src, "queries": q, "hits": h, "hit_rate": h / q if q > 0 else None}


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def time_breakdown(records: Sequence[RequestRecord], sm: dict[str, Any] | None) -> dict[str, Any] | None:
    ok = [r for r in records if r.ok and r.t_end_ns is not None]
    if not ok:
        return None
    client_e2e = _mean([(t_end - r.t_sent_ns) / 1e6 for r in ok if (t_end := r.t_end_ns) is not None])
    client_ttft = _mean([(r.event_times_ns[0] - r.t_sent_ns) / 1e6 for r in ok if r.event_times_ns])
    stamped = [r.engine_metrics for r in ok
               if all(k in r.engine_metrics for k in ("queue_s", "prefill_s", "decode_s"))]
    if stamped:
        q = _mean([m["queue_s"] * 1e3 for m in stamped])
        p = _mean([m["prefill_s"] * 1e3 for m in stamped])
        d = _mean([m["decode_s"] * 1e3 for m in stamped])
        e2e = _mean([(m["queue_s"] + m["prefill_s"] + m["decode_s"]) * 1e3 for m in stamped])
        out = {"source": "engine stamps (per request)", "n": len(stamped), "queued_ms": q, "prefill_ms": p,
               "decode_ms": d, "engine_e2e_ms": e2e, "engine_ttft_ms": (q or 0) + (p or 0)}
    elif (timed := [r.engine_metrics for r in ok if "prefill_s" in r.engine_metrics and "decode_s" in r.engine_metrics]):
        # a server that times each request's prompt and generation but not its wait (llama.cpp's
        # slot timings): the engine's part is prefill + decode; a wait for a free slot stays outside
        p = _mean([m["prefill_s"] * 1e3 for m in timed])
        d = _mean([m["decode_s"] * 1e3 for m in timed])
        out = {"source": "engine timings per request (prefill, decode; no queue time: a wait for a slot "
                         "counts as outside)", "n": len(timed), "queued_ms": None, "prefill_ms": p, "decode_ms": d,
               "engine_e2e_ms": _mean([(m["prefill_s"] + m["decode_s"]) * 1e3 for m in timed]),
               "engine_ttft_ms": None}
    else:
        def hist(key: str) -> float | None:
            h = (sm or {}).get(key)
            return float(h["mean"]) if isinstance(h, dict) and h.get("count") and "mean" in h else None

        e2e = hist("server_e2e_ms")
        if e2e is None:
            return {"source": "client only (the engine exposes no timings)", "n": len(ok),
                    "client_e2e_ms": client_e2e, "client_ttft_ms": client_ttft}
        n = (sm or {}).get("server_e2e_ms", {}).get("count", 0)
        out = {"source": "server histograms (sum/count)", "n": int(n), "queued_ms": hist("server_queue_ms"),
               "prefill_ms": hist("server_prefill_ms"), "decode_ms": hist("server_decode_ms"),
               "engine_e2e_ms": e2e, "engine_ttft_ms": hist("server_ttft_ms")}
        parts = [out[k] for k in ("queued_ms", "prefill_ms", "decode_ms")]
        inference = hist("server_inference_ms")  # TGI: prefill + decode as one duration
        if parts[1] is None and parts[2] is None and inference is not None:
            out["inference_ms"] = inference
            parts = [parts[0], inference]
        if all(v is not None for v in parts):
            out["frontend_ms"] = e2e - sum(parts)
    out.update(client_e2e_ms=client_e2e, client_ttft_ms=client_ttft,
               outside_ms=None if client_e2e is None else outside_ms(client_e2e, out["engine_e2e_ms"]))
    return out


def outside_ms(client_e2e_ms: float, engine_e2e_ms: float) -> float:
    """Client E2E minus engine E2E; 0.0 when below zero by less than OUTSIDE_RESOLUTION_MS."""
    d = client_e2e_ms - engine_e2e_ms
    return 0.0 if -OUTSIDE_RESOLUTION_MS < d < 0 else d


def _in_flight(records: Sequence[RequestRecord]) -> tuple[list[int], list[int]]:
    starts = sorted(r.t_sent_ns for r in records)
    ends = sorted(r.t_end_ns if r.t_end_ns is not None else 2**63 for r in records)
    return starts, ends


def gauges(records: Sequence[RequestRecord], sm: dict[str, Any] | None,
           concurrency: int | None) -> dict[str, Any]:
    samples = [s for s in (sm or {}).get("samples") or [] if isinstance(s.get("t_ns"), int)]
    names = [g for g in GAUGES if any(g in s for s in samples)]
    if not names or not records:
        return {}
    starts, ends = _in_flight(records)

    def client_in_flight(t: int) -> int:
        return bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)

    if concurrency is not None:  # closed loop: the load is at its target while that many are in flight
        target = min(concurrency, len(records))
        kept = [s for s in samples if client_in_flight(s["t_ns"]) >= target]
        why = f"the client had {target} requests in flight"
    else:  # open loop: between the first and the last send
        kept = [s for s in samples if starts[0] <= s["t_ns"] <= starts[-1]]
        why = "requests were still being sent"
    out: dict[str, Any] = {}
    for g in names:
        vals = [float(s[g]) for s in kept if g in s]
        total = sum(1 for s in samples if g in s)
        if len(vals) < MIN_GAUGE_SAMPLES:
            out[g] = {"measured": False, "samples": len(vals), "samples_total": total,
                      "note": f"not measured: {len(vals)} of {total} samples taken while {why} "
                              f"(at least {MIN_GAUGE_SAMPLES} needed; a longer level or a shorter "
                              f"sampling interval gives more)"}
            continue
        ts = [s["t_ns"] for s in kept if g in s]
        out[g] = {"measured": True, "samples": len(vals), "samples_total": total,
                  "window_s": (ts[-1] - ts[0]) / 1e9, "mean": statistics.fmean(vals), "max": max(vals),
                  "client_in_flight_mean": statistics.fmean(client_in_flight(t) for t in ts)}
    return out

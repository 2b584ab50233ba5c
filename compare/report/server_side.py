"""Report tables for what the engines report about themselves: where the time goes, prefix-cache
hits, the running gauge at the target load, and server histograms as exact means with bucket bounds
(compare/analysis/breakdown.py, backends/server_metrics.py). Rows of strings; content.py makes
the sections."""
from __future__ import annotations

from typing import Callable

from core.results.models import LevelSummary, RunResults

HIST_KEYS = ("server_queue_ms", "server_prefill_ms", "server_decode_ms", "server_ttft_ms", "server_itl_ms",
             "server_e2e_ms", "server_inference_ms", "server_tpot_ms")

BREAKDOWN_HEADERS = ["backend", "load", "queued", "prefill", "decode", "frontend", "outside engine", "client E2E",
                     "prefix hit", "running (steady)", "source"]
HIST_HEADERS = ["backend", "load", "histogram", "n", "mean (exact)", "p50", "p95", "p99"]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def prefix_text(s: LevelSummary) -> str:
    pc = s.prefix_cache
    if pc is None or pc.queries is None:
        return "not exposed"
    return "no queries" if pc.hit_rate is None else f"{pc.hit_rate:.0%}"


def running_text(s: LevelSummary) -> str:
    g = (s.server_gauges or {}).get("vllm:num_requests_running") or (s.server_gauges or {}).get(
        "tgi_batch_current_size")
    if g is None:
        return "-"
    if not g.measured:
        return f"not measured ({g.samples}/{g.samples_total} samples)"
    return f"{g.mean:.1f} (max {g.max:g}, client {g.client_in_flight_mean:.1f}, n={g.samples})"


def breakdown_rows(run: RunResults, backends: list[str], name: Callable[[str], str]) -> list[list[str]]:
    rows = []
    for n in backends:
        for label, s in run.backends[n].levels.items():
            tb = s.time_breakdown
            if tb is None:
                continue
            decode = _ms(tb.decode_ms) if tb.inference_ms is None else f"{tb.inference_ms:.1f} (prefill+decode)"
            rows.append([name(n), label, _ms(tb.queued_ms), _ms(tb.prefill_ms), decode,
                         _ms(tb.frontend_ms), _ms(tb.outside_ms), _ms(tb.client_e2e_ms), prefix_text(s),
                         running_text(s), tb.source])
    return rows


def histogram_rows(run: RunResults, backends: list[str], name: Callable[[str], str]) -> list[list[str]]:
    rows = []
    for n in backends:
        for label, s in run.backends[n].levels.items():
            for key in HIST_KEYS:
                h = s.server_histogram(key)
                if h is None:
                    continue
                q = [h.quantiles[p].text() if p in h.quantiles else "-" for p in ("p50", "p95", "p99")]
                rows.append([name(n), label, key.removesuffix("_ms"), f"{h.count:g}", f"{h.mean:.1f}", *q])
    return rows


BREAKDOWN_NOTE = ("means in ms per request. queued, prefill, decode: the engine's own (in-process vLLM: each "
                  "request's engine stamps; servers: histogram sum/count, exact means). frontend: a server's own "
                  "E2E beyond those three (tokenisation, IPC to the engine core). outside engine: the client's "
                  "E2E minus the engine's (client, HTTP, network; in-process: AsyncLLM's frontend too). prefix hit: "
                  "cached prompt tokens / prompt tokens looked up. running: the engine's running-requests "
                  "gauge while the client held the level's target load (client: its in-flight count then).")
HIST_NOTE = ("server histograms: the mean is exact (sum/count); a quantile is known only to its bucket, "
             "shown as '<= hi' or '(lo, hi]' ms, never interpolated inside it.")

"""Server-side metrics around each load level: Prometheus text (vLLM ``vllm:*``, TGI ``tgi_*``,
TensorRT-LLM ``trtllm_*``) or TensorRT-LLM's JSON iteration stats.

Prometheus: scraped before the level, sampled every ``interval_s`` during it, and after it;
parsed with prometheus_client's text parser. Counters and histograms are reported as deltas
(after - before, i.e. exactly this level's work). A histogram's mean is exact (sum/count deltas);
its quantiles are only known to their bucket, so they are stored as bounds (``lo < q <= hi``,
ms), never interpolated: with vLLM's queue-time buckets (0.3, 0.5, 0.8, 1, 2.5, ... s) an
interpolated p50 of a level whose requests all queued ~4 ms reads 150 ms. ``server_ttft_ms`` is
the engine's own TTFT; client TTFT minus it is queueing in the API server + network + HTTP/SSE
overhead.

Gauges (``vllm:num_requests_running`` ...) are kept as raw samples stamped on the client's clock
(``t_ns``, perf_counter_ns); compare/analysis/breakdown.py summarises only the samples taken while
the level's load was at its target. Why: vLLM sets the gauge in the API server process from the
SchedulerStats of each engine step (``len(scheduler.running)`` after that step's finished
requests left), so it is fresh only while the engine steps and is a snapshot, not an average. A
sampler running from before the first request to after the last sees the ramp-up, the drain and
the idle engine (a stale last value) as often as the steady state: on a short level most samples
are not the load being measured, and their mean reads far below the concurrency. Requests the
client counts as in flight but that are still in the client, the API server or the tokenizer are
not "running" either, so the engine's count can honestly sit below the client's (the summary
shows both). With ``--api-server-count`` > 1 vLLM disables its stats logging to avoid incomplete
stats, and gauges are per-process ``mostrecent`` values.

TensorRT-LLM ``trtllm-serve`` ``GET /metrics``: a JSON list of per-iteration stats that the server
DROPS once read (needs ``enable_iter_perf_stats``); we poll it during the level and store every
entry we got (``iterations``), plus a short summary.
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.errors import UserError

KEEP_PREFIXES = ("vllm:", "tgi_", "trtllm_", "llamacpp:")
# histogram families -> summary key (seconds in, ms out)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "server_ttft_ms",
    "vllm:inter_token_latency_seconds": "server_itl_ms",
    "vllm:request_queue_time_seconds": "server_queue_ms",
    "vllm:request_prefill_time_seconds": "server_prefill_ms",
    "vllm:request_decode_time_seconds": "server_decode_ms",
    "vllm:e2e_request_latency_seconds": "server_e2e_ms",
    "tgi_request_queue_duration": "server_queue_ms",
    "tgi_request_inference_duration": "server_inference_ms",
    "tgi_request_mean_time_per_token_duration": "server_tpot_ms",
    "tgi_request_duration": "server_e2e_ms",
    "trtllm_time_to_first_token_seconds": "server_ttft_ms",
    "trtllm_e2e_request_latency_seconds": "server_e2e_ms",
}
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "tgi_queue_size", "tgi_batch_current_size", "trtllm_kv_cache_utilization",
          # llama-server --metrics (llama.cpp b11434): busy slots, requests waiting for a slot, and its
          # own throughput gauges (not counters: a delta of them means nothing)
          "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode",
          "llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds")
MAX_ITERATIONS_KEPT = 20000  # TRT-LLM iteration stats per level (one per engine step)


def parse_prometheus(text: str) -> dict[str, float]:
    """Exposition text -> {sample key: value} for the families we keep, summed over label sets
    except ``le`` (engines, models and finish reasons are aggregated)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(KEEP_PREFIXES):
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):  # prometheus_client's creation timestamps: not data
                continue
            key = s.name + (f"{{le={s.labels['le']}}}" if "le" in s.labels else "")
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


def parse_gauges(text: str, names: tuple[str, ...] = GAUGES) -> dict[str, float]:
    """Only ``names`` from exposition text, each summed over its label sets as parse_prometheus
    does, by finding their lines: a vLLM page is ~90 KB, which the full parser takes ~20 ms of
    the event loop to read (a lag spike at every sample, in the middle of the level being
    measured); this takes microseconds."""
    out: dict[str, float] = {}
    for name in names:
        for i in _line_starts(text, name):
            end = text.find("\n", i)
            line = text[i + len(name):] if end < 0 else text[i + len(name):end]
            if line[:1] not in ("{", " "):
                continue  # a longer name that begins with this one
            value = line[line.rfind("}") + 1:] if line[:1] == "{" else line
            try:
                out[name] = out.get(name, 0.0) + float(value.split()[0])
            except (ValueError, IndexError):
                continue
    return out


def _line_starts(text: str, name: str):
    if text.startswith(name):
        yield 0
    k = text.find("\n" + name)
    while k >= 0:
        yield k + 1
        k = text.find("\n" + name, k + 1)


def histogram_delta(before: dict[str, float], after: dict[str, float], family: str) -> dict[str, float] | None:
    """Distribution of one histogram's observations between two scrapes (ms)."""
    n = after.get(family + "_count", 0.0) - before.get(family + "_count", 0.0)
    if n <= 0:
        return None
    total = after.get(family + "_sum", 0.0) - before.get(family + "_sum", 0.0)
    prefix = family + "_bucket{le="
    buckets = []
    for k, v in after.items():
        if k.startswith(prefix):
            le = float(k[len(prefix):-1])
            buckets.append((le, v - before.get(k, 0.0)))
    buckets.sort()
    out: dict[str, Any] = {"count": n, "mean": total / n * 1e3}
    out["quantiles"] = {f"p{q}": _bucket_bound(buckets, n * q / 100) for q in (50, 95, 99)}
    # the resolution behind those bounds: cumulative counts per upper bound (ms; None = +Inf)
    out["buckets_ms"] = [[None if le == float("inf") else le * 1e3, c] for le, c in buckets]
    return out


def _bucket_bound(buckets: list[tuple[float, float]], rank: float) -> dict[str, float | None]:
    """The bucket holding the observation of rank ``rank``: {"lo": ms, "hi": ms or None (+Inf)}.
    Where inside the bucket it lies is unknown, so no number inside it is claimed."""
    prev_le = 0.0
    for le, c in buckets:
        if c >= rank and c > 0:
            return {"lo": prev_le * 1e3, "hi": None if le == float("inf") else le * 1e3}
        prev_le = le
    return {"lo": prev_le * 1e3, "hi": None}


def summarize(before: dict[str, float], after: dict[str, float],
              samples: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fam, key in HISTOGRAMS.items():
        d = histogram_delta(before, after, fam)
        if d is not None:
            out[key] = d
    counters = {}
    for k, v in after.items():
        if "{" in k or k.endswith(("_sum", "_count")) or any(k.startswith(g) for g in GAUGES):
            continue
        delta = v - before.get(k, 0.0)
        if delta or "prefix_cache" in k:  # a prefix-cache counter that stayed put is a measured 0
            counters[k] = delta
    out["counters"] = counters
    # gauges: the raw samples only (see the module docstring); compare/analysis/breakdown.py
    # summarises those taken while the load was at its target
    out["gauge_samples"] = len(samples)
    return out


class MetricsScraper:
    """Samples one server's metrics around a level; ``kind``: "prometheus" or "trtllm-json"."""

    def __init__(self, client: httpx.AsyncClient, kind: str = "prometheus", path: str = "/metrics",
                 interval_s: float | None = None) -> None:
        if kind not in ("prometheus", "trtllm-json"):
            raise ValueError(f"metrics kind {kind!r}: use prometheus or trtllm-json")
        if interval_s is None:  # a short level needs a short interval for its gauges to be measured
            raw = os.environ.get("LLM_COMPARE_METRICS_INTERVAL_S", "0.5")
            try:
                interval_s = float(raw)
            except ValueError:
                interval_s = -1.0
            if not 0.01 <= interval_s <= 60:
                raise UserError(f"LLM_COMPARE_METRICS_INTERVAL_S={raw!r}: expected seconds between 0.01 and 60")
        self.client, self.kind, self.path, self.interval_s = client, kind, path, interval_s
        self._task: asyncio.Task | None = None
        self._before: dict[str, float] = {}
        self._samples: list[tuple[int, dict[str, float]]] = []  # (perf_counter_ns, gauges)
        self._iterations: list[Any] = []
        self._errors: list[str] = []
        self._t0 = 0.0
        self.available: bool | None = None  # learnt on the first scrape

    async def _scrape(self, gauges_only: bool = False) -> dict[str, float] | None:
        try:
            r = await self.client.get(self.path, timeout=5.0)
        except httpx.HTTPError as e:
            self._errors.append(f"{type(e).__name__}")
            return None
        if r.status_code != 200:
            self.available = False if self.available is None else self.available
            self._errors.append(f"HTTP {r.status_code}")
            return None
        self.available = True
        if self.kind == "trtllm-json":
            try:
                data = r.json()
            except ValueError:
                self._errors.append("not JSON")
                return None
            if isinstance(data, list):
                room = MAX_ITERATIONS_KEPT - len(self._iterations)
                self._iterations.extend(data[:max(room, 0)])
            return {}
        try:
            return parse_gauges(r.text) if gauges_only else parse_prometheus(r.text)
        except ValueError as e:  # the parser raises ValueError on malformed exposition text
            self._errors.append(f"unparseable metrics: {str(e)[:100]}")
            return None

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            t0 = time.perf_counter_ns()
            s = await self._scrape(gauges_only=True)
            if s is not None and self.kind == "prometheus":
                # stamped mid-request: the server rendered the values somewhere in between
                t = (t0 + time.perf_counter_ns()) // 2
                self._samples.append((t, {g: s[g] for g in GAUGES if g in s}))

    async def start(self, label: str) -> None:
        self._samples, self._iterations, self._errors = [], [], []
        self._t0 = time.perf_counter()
        if self.available is False:
            return
        self._before = await self._scrape() or {}
        if self.available:
            self._task = asyncio.get_running_loop().create_task(self._sample_loop())

    async def stop(self, label: str) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if not self.available:
            return {"available": False, "errors": self._errors[:5]}
        after = await self._scrape() or {}
        out: dict[str, Any] = {"available": True, "kind": self.kind, "path": self.path,
                               "scrapes": len(self._samples) + 2}
        if self.kind == "trtllm-json":
            out["iterations"] = self._iterations
            out["summary"] = _trtllm_summary(self._iterations)
        else:
            out.update(summarize(self._before, after, self._samples))
            t0 = int(self._t0 * 1e9)
            out["samples"] = [{"t_s": round((t - t0) / 1e9, 3), "t_ns": t, **s} for t, s in self._samples]
        if self._errors:
            out["errors"] = self._errors[:5]
        return out

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


def _trtllm_summary(its: list[Any]) -> dict[str, Any]:
    """A few fields of TensorRT-LLM IterationStats (names as trtllm-serve emits them)."""
    def vals(key: str) -> list[float]:
        return [float(i[key]) for i in its if isinstance(i, dict) and isinstance(i.get(key), (int, float))]
    out: dict[str, Any] = {"iterations": len(its)}
    if not its:  # trtllm-serve's /metrics is [] unless LlmArgs enable_iter_perf_stats is true
        out["empty"] = ("trtllm-serve returned no iteration stats: it records them only with LlmArgs "
                        "enable_iter_perf_stats: true")
    for key in ("iterLatencyMS", "numActiveRequests", "numQueuedRequests"):
        v = vals(key)
        if v:
            out[key] = {"mean": sum(v) / len(v), "max": max(v)}
    return out

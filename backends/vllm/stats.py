"""The in-process vLLM engine's own scheduler statistics, per load level.

AsyncLLM hands every engine step's ``SchedulerStats`` to its stat loggers in the frontend's event
loop (the same records vLLM's Prometheus logger turns into ``vllm:num_requests_running`` and the
``vllm:prefix_cache_*`` counters in ``vllm serve``). ``EngineStats.factory`` is passed as a custom
stat logger; ``level_start``/``level_end`` turn what it saw into the same layout
backends/server_metrics.py produces for a server (counter deltas under the server's sample names,
gauge samples stamped with perf_counter_ns), so compare/analysis/breakdown.py reads both alike.

The stats are SchedulerStats, which vLLM calls not a stable interface: a field that is missing
is skipped, never guessed.
"""
from __future__ import annotations

import time
from typing import Any

MIN_SAMPLE_SPACING_NS = 20_000_000  # one gauge sample per 20 ms at most (engine steps are ~ms on a GPU)
MAX_SAMPLES = 20_000


class EngineStats:
    def __init__(self) -> None:
        self.queries = self.hits = 0.0
        self.steps = 0
        self.samples: list[dict[str, Any]] = []
        self._last_ns = 0

    def factory(self, vllm_config: Any, engine_index: int = 0) -> Any:
        """A per-engine StatLoggerFactory (``AsyncLLM(stat_loggers=[...])``)."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        stats = self

        class _Logger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                self.engine_index = engine_index

            def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                       engine_idx: int = 0) -> None:
                if scheduler_stats is not None:
                    stats.observe(scheduler_stats)

            def log_engine_initialized(self) -> None:
                pass

        return _Logger(vllm_config, engine_index)

    def observe(self, s: Any) -> None:
        self.steps += 1
        pc = getattr(s, "prefix_cache_stats", None)
        if pc is not None:  # new requests only, as vLLM's own prefix_cache_* counters
            self.queries += float(getattr(pc, "queries", 0) or 0)
            self.hits += float(getattr(pc, "hits", 0) or 0)
        now = time.perf_counter_ns()
        if now - self._last_ns >= MIN_SAMPLE_SPACING_NS and len(self.samples) < MAX_SAMPLES:
            self._last_ns = now
            self.samples.append({"t_ns": now, "vllm:num_requests_running": float(s.num_running_reqs),
                                 "vllm:num_requests_waiting": float(s.num_waiting_reqs),
                                 "vllm:kv_cache_usage_perc": float(getattr(s, "kv_cache_usage", 0.0))})

    def level_start(self) -> None:
        self.queries = self.hits = 0.0
        self.steps = 0
        self.samples = []
        self._last_ns = 0

    def level_end(self, prefix_caching: bool | None) -> dict[str, Any]:
        out: dict[str, Any] = {"available": True, "kind": "engine-stats", "engine_steps": self.steps,
                               "counters": {"vllm:prefix_cache_queries_total": self.queries,
                                            "vllm:prefix_cache_hits_total": self.hits},
                               "samples": self.samples, "gauge_samples": len(self.samples)}
        if prefix_caching is not None:
            out["enable_prefix_caching"] = prefix_caching
        return out

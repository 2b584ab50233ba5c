"""The SLO as pass/fail: ``compare run --slo ... --require-slo`` and ``compare report DIR --require-slo``.

What a deployment guard needs: the loads a run measures are the loads the deployment must
sustain, so EVERY backend (each knob variant is one) must meet EVERY term of the SLO at EVERY
measured load level, with no failed request there (a dropped request is not served within any
limit). To guard only the load the deployment will see, measure only that level. A level a
backend never reached (it failed before) is a miss too.

Judged from the results files alone (run.json for the levels and backends, requests.jsonl for
the values), every repeat pooled, so old runs can be re-checked against another SLO.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from compare.analysis.metrics import summarize
from core.errors import RunFailed, UserError
from core.records import RequestRecord
from core.results import RunResults
from core.slo import SLO


class SLOMissed(RunFailed):
    """Some backend missed the required SLO at some level (exit 1; the results are kept)."""


@dataclass(frozen=True)
class Miss:
    backend: str
    level: str
    term: str | None = None  # e.g. "ttft_p95"; None: failed requests or no measurement
    value_ms: float = math.nan
    limit_ms: float = math.nan
    failed: int = 0
    requests: int = 0

    def line(self) -> str:
        """``vllm[max_num_seqs=4] c16: ttft_p95 2.61 s > 2 s (+31%)``."""
        head = f"{self.backend} {self.level}:"
        if self.term is None:
            if not self.requests:
                return f"{head} not measured (the backend did not reach this level)"
            return f"{head} {self.failed} of {self.requests} requests failed (a failed request misses every limit)"
        if not math.isfinite(self.value_ms):
            return f"{head} {self.term} has no value (no request succeeded) > {ms_text(self.limit_ms)}"
        ratio = self.value_ms / self.limit_ms if self.limit_ms > 0 else math.inf
        over = (f" (+{(ratio - 1) * 100:.0f}%)" if ratio < 10 else
                f" ({ratio:,.{1 if ratio < 100 else 0}f}x the limit)" if math.isfinite(ratio) else "")
        return f"{head} {self.term} {ms_text(self.value_ms)} > {ms_text(self.limit_ms)}{over}"


def ms_text(v: float) -> str:
    """2610.0 -> '2.61 s', 48.2 -> '48.2 ms', 0.5 -> '500 us'."""
    if v >= 1000:
        return f"{v / 1000:.3g} s"
    if v >= 1 or v == 0:
        return f"{v:.3g} ms"
    return f"{v * 1000:.3g} us"


def slo_misses(run: RunResults, records: Iterable[RequestRecord], slo: SLO) -> list[Miss]:
    """Every (backend, level, term) where ``slo`` is not met, in run order."""
    by: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        by.setdefault((r.backend, r.level), []).append(r)
    out: list[Miss] = []
    for name in run.backends:
        for level in run.level_labels:
            recs = by.get((name, level), [])
            if not recs:
                out.append(Miss(name, level))
                continue
            s = summarize(recs, 1, slo)  # the limits only need the latencies, not the wall time
            for key, c in (s.slo_checks or {}).items():
                if not c.met:
                    out.append(Miss(name, level, key, math.nan if c.value_ms is None else c.value_ms, c.limit_ms))
            if s.failed:
                out.append(Miss(name, level, failed=s.failed, requests=len(recs)))
    return out


def require_slo_met(results_dir: Path, slo: SLO | None = None) -> None:
    """Raise :class:`SLOMissed` (exit 1) listing one miss per line unless ``slo`` (default: the
    run's own) is met everywhere; a UserError when there is no SLO to require."""
    from core.results import load_results

    run, records = load_results(results_dir)
    slo = slo if slo is not None else SLO.from_json([t.model_dump() for t in run.slo])
    if not slo:
        raise UserError(f"{results_dir} was measured without an SLO: pass the one to require, "
                        f"e.g. --require-slo ttft_p95=2s,tpot_p95=100ms")
    misses = slo_misses(run, records, slo)
    if misses:
        lines = "\n".join(f"  {m.line()}" for m in misses)
        raise SLOMissed(f"SLO not met ({slo.describe()}): {len(misses)} miss(es); results kept in "
                        f"{results_dir}\n{lines}")

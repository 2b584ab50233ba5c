"""Everything a report shows, computed once from the results files."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.records import RequestRecord
from core.results import RunResults
from compare.analysis.stats import LevelSample, collect
from compare.analysis.verdict import Verdict, build_verdict


@dataclass
class ReportData:
    path: Path
    run: RunResults
    records: list[RequestRecord]
    samples: dict[tuple[str, str], LevelSample]
    verdict: Verdict

    @property
    def backends(self) -> list[str]:
        return list(self.run.backends)

    @property
    def levels(self) -> list[str]:
        return self.run.level_labels

    @property
    def labels(self) -> dict[str, str]:
        """Short labels for long backend names (compare/report/labels.py)."""
        from compare.report.labels import short_labels

        return short_labels(self.backends)

    def label(self, name: str) -> str:
        return self.labels.get(name, name)


def load_report_data(path: Path, gpu_hour_price: float | None = None,
                     margin: float | None = None) -> ReportData:
    """Raises UserError (via load_results) for a missing or foreign results directory."""
    from core.results import load_results

    run, records = load_results(Path(path))
    samples = collect(run, records)
    price = gpu_hour_price if gpu_hour_price is not None else run.gpu_hour_price
    verdict = build_verdict(run, records, gpu_hour_price=price, margin=margin, samples=samples)
    return ReportData(Path(path), run, records, samples, verdict)


def server_ttft_ms(server_metrics: Any) -> float | None:
    """Mean server-side TTFT from a level's scraped ``server_metrics``, whatever its layout:
    a histogram delta ``{"sum": s, "count": n}``, a ``{"mean": x}`` or a number, under a key
    naming time-to-first-token (``vllm:time_to_first_token_seconds``, ``ttft_ms``, ...).
    Keys ending in ``seconds``/``_s`` are in seconds, others in ms."""
    def walk(obj: Any, key: str = "", scale: float | None = None) -> float | None:
        k = key.lower()
        if scale is None and ("time_to_first_token" in k or "ttft" in k):
            scale = 1e3 if (k.endswith("seconds") or k.endswith("_s")) else 1.0
        if scale is not None:  # inside a TTFT entry
            named = "time_to_first_token" in k or "ttft" in k or k in ("mean", "avg", "value")
            if named and isinstance(obj, (int, float)) and not isinstance(obj, bool):
                return float(obj) * scale
            if isinstance(obj, dict):
                if obj.get("count") and isinstance(obj.get("sum"), (int, float)):
                    return float(obj["sum"]) / float(obj["count"]) * scale
                if isinstance(obj.get("mean"), (int, float)):
                    return float(obj["mean"]) * scale
        if isinstance(obj, dict):
            for kk, v in obj.items():
                found = walk(v, str(kk), scale)
                if found is not None and math.isfinite(found):
                    return found
        return None

    return walk(server_metrics) if server_metrics else None

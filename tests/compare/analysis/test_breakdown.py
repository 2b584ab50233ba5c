"""compare/analysis/breakdown.py on hand-made stamps: which gauge samples count, when a gauge is
"not measured", and engines without prefix-cache counters."""
from __future__ import annotations

import pytest

from compare.analysis.breakdown import gauges, level_extras, prefix_cache
from core.records import RequestRecord
from core.results.models import LevelSummary

MS = 1_000_000


def _rec(i: int, sent_ms: int, end_ms: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", backend="b", level="c2", t_sent_ns=sent_ms * MS,
                         event_times_ns=(sent_ms * MS + MS,), event_token_counts=(1,), token_ids=(5,),
                         t_end_ns=end_ms * MS)


def _samples(values: dict[int, float]) -> dict:
    return {"samples": [{"t_ns": t * MS, "vllm:num_requests_running": v} for t, v in values.items()]}


def test_only_samples_at_the_target_load_count():
    # closed loop at 2: two in flight from 10 ms to 100 ms, one during the drain until 150 ms
    recs = [_rec(0, 0, 50), _rec(1, 10, 100), _rec(2, 50, 150)]
    sm = _samples({5: 0.0, 20: 2.0, 40: 2.0, 60: 2.0, 80: 2.0, 120: 1.0, 140: 1.0, 170: 0.0})
    g = gauges(recs, sm, concurrency=2)["vllm:num_requests_running"]
    assert g["measured"] and g["samples"] == 4 and g["samples_total"] == 8
    assert g["mean"] == 2.0 and g["client_in_flight_mean"] == 2.0  # all 8: 1.25, diluted by ramp and drain


def test_too_few_samples_is_not_measured_rather_than_a_number():
    recs = [_rec(0, 0, 50), _rec(1, 10, 60)]
    g = gauges(recs, _samples({5: 0.0, 30: 2.0, 70: 0.0}), concurrency=2)["vllm:num_requests_running"]
    assert g == {"measured": False, "samples": 1, "samples_total": 3, "note": g["note"]}
    assert g["note"].startswith("not measured: 1 of 3 samples")
    summary = LevelSummary(requests=2, ok=2, wall_s=0.1, output_tokens=2, input_tokens=2, output_tok_s=1.0,
                           req_s=1.0, server_gauges={"vllm:num_requests_running": g})
    assert summary.server_gauges["vllm:num_requests_running"].mean is None


def test_prefix_cache_not_exposed_and_measured_zero_differ():
    assert prefix_cache(None, "openvino-genai") == {"source": "not exposed by openvino-genai"}
    zero = prefix_cache({"counters": {"vllm:prefix_cache_queries_total": 480.0,
                                      "vllm:prefix_cache_hits_total": 0.0}}, "vllm")
    assert zero["hit_rate"] == 0.0 and zero["queries"] == 480.0
    # client-only breakdown for an engine that reports no timings
    extras = level_extras([_rec(0, 0, 50)], None, 1, "transformers")
    assert extras["time_breakdown"]["source"].startswith("client only") and "server_gauges" not in extras


def test_tgi_reports_prefill_and_decode_as_one_duration():
    from compare.analysis.breakdown import time_breakdown

    sm = {"server_queue_ms": {"count": 1, "mean": 5.0}, "server_inference_ms": {"count": 1, "mean": 40.0},
          "server_e2e_ms": {"count": 1, "mean": 48.0}}
    tb = time_breakdown([_rec(0, 0, 50)], sm)
    assert tb["inference_ms"] == 40.0 and tb["prefill_ms"] is None and tb["decode_ms"] is None
    assert tb["frontend_ms"] == 3.0 and tb["outside_ms"] == 2.0  # 48 - 5 - 40; client 50 - engine 48


def test_per_request_prefill_and_decode_without_a_queue_time():
    """llama.cpp times each request's prompt and generation (its slot timings) but not the wait for
    a slot: the engine part is prefill + decode, the wait stays in "outside"."""
    from dataclasses import replace

    from compare.analysis.breakdown import time_breakdown

    recs = [replace(_rec(i, 0, 100), engine_metrics={"prefill_s": 0.010, "decode_s": 0.060 + i * 0.010})
            for i in range(2)]
    tb = time_breakdown(recs, None)
    assert tb["source"].startswith("engine timings per request") and tb["queued_ms"] is None
    assert (tb["prefill_ms"], tb["decode_ms"], tb["engine_e2e_ms"]) == pytest.approx((10.0, 65.0, 75.0))
    assert tb["outside_ms"] == pytest.approx(25.0) and tb["engine_ttft_ms"] is None  # 100 ms at the client


def test_outside_within_the_stamps_resolution_is_zero_not_a_negative_time():
    from compare.analysis.breakdown import OUTSIDE_RESOLUTION_MS, time_breakdown

    def outside(engine_e2e: float) -> float:
        return time_breakdown([_rec(0, 0, 50)], {"server_e2e_ms": {"count": 1, "mean": engine_e2e}})["outside_ms"]

    assert outside(48.0) == 2.0
    assert outside(50.0 + OUTSIDE_RESOLUTION_MS / 2) == 0.0  # a late send stamp: not resolved
    assert outside(50.0 + OUTSIDE_RESOLUTION_MS) == -OUTSIDE_RESOLUTION_MS  # beyond it: kept, visible
    assert outside(55.0) == -5.0

"""Metric units on synthetic integer timestamps (ns)."""

import pytest

from compare.analysis.metrics import (
    e2e_ns, itls_ns, request_meets_slo, summarize, tpot_ns, ttft_ns,
)
from core.records import RequestRecord
from core.slo import SLO


MS = 1_000_000


def rec(sent, events, counts=None, end=None, rid="r", **kw):
    counts = counts or [1] * len(events)
    ids = tuple(range(sum(counts)))
    return RequestRecord(request_id=rid, backend="b", level="c1", t_sent_ns=sent,
                         event_times_ns=tuple(events), event_token_counts=tuple(counts), token_ids=ids,
                         t_end_ns=end if end is not None else (events[-1] if events else sent), **kw)


def test_single_token_events():
    r = rec(0, [100 * MS, 110 * MS, 130 * MS, 160 * MS], end=161 * MS)
    assert ttft_ns(r) == 100 * MS
    assert itls_ns(r) == [10 * MS, 20 * MS, 30 * MS]
    assert tpot_ns(r) == 20 * MS  # 60 ms over 3 gaps
    assert e2e_ns(r) == 161 * MS
    assert r.output_tokens == 4


def test_multi_token_event_attribution():
    # event 2 carries 3 tokens: the gap goes to its first token, the other two get 0
    r = rec(0, [50 * MS, 80 * MS], counts=[1, 3])
    assert itls_ns(r) == [30 * MS, 0, 0]
    assert sum(itls_ns(r)) == 80 * MS - 50 * MS
    assert tpot_ns(r) == pytest.approx(10 * MS)  # 30 ms over 3 further tokens
    assert r.output_tokens == 4


def test_first_event_with_several_tokens():
    r = rec(0, [50 * MS], counts=[3])
    assert itls_ns(r) == [0, 0]
    assert tpot_ns(r) == 0


def test_failed_request_has_no_latency_and_no_goodput():
    r = rec(0, [], error_kind="timeout", error="x")
    assert ttft_ns(r) is None and e2e_ns(r) is None
    assert not request_meets_slo(r, SLO.parse("ttft_p95=10s"))


def test_summary_throughput_and_goodput():
    fast = [rec(0, [10 * MS + i, 20 * MS + i], rid=f"f{i}") for i in range(3)]
    slow = rec(0, [3000 * MS, 3010 * MS], rid="s")
    s = summarize(fast + [slow], wall_ns=4_000 * MS, slo=SLO.parse("ttft_p95=2s"))
    assert s.ok == 4 and s.output_tokens == 8
    assert s.output_tok_s == pytest.approx(2.0)
    assert s.goodput_req_s == pytest.approx(0.75)  # 3 of 4 within 2 s, over 4 s
    assert s.slo_attainment == pytest.approx(0.75)
    assert s.slo_checks["ttft_p95"].met is False  # p95 is dominated by the slow one
    assert s.ttft_ms.p50 == pytest.approx(10, abs=0.01)


def test_short_output_counted():
    r = rec(0, [1 * MS, 2 * MS], requested_tokens=5)
    assert summarize([r], 10 * MS).short_outputs == 1

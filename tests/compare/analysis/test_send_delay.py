"""Send delay per level: how late requests left (closed loop: vs when the client was ready), and
the coordinated-omission flag past COORDINATED_OMISSION_MS."""
from __future__ import annotations

from compare.analysis.metrics import COORDINATED_OMISSION_MS, summarize, ttft_ns
from core.records import RequestRecord

MS = 1_000_000


def _rec(i: int, late_ms: float, scheduled: bool = False) -> RequestRecord:
    due = 1000 * MS + i * MS
    sent = due + int(late_ms * MS)
    return RequestRecord(request_id=f"r{i}", backend="b", level="c1", t_sent_ns=sent,
                         t_scheduled_ns=due if scheduled else None, t_ready_ns=None if scheduled else due,
                         event_times_ns=(sent + 50 * MS, sent + 60 * MS), event_token_counts=(1, 1),
                         token_ids=(1, 2), t_end_ns=sent + 60 * MS, finish_reason="length")


def test_send_delay_summarised_and_coordinated_omission_flagged():
    quiet = summarize([_rec(i, 0.2) for i in range(100)], 10**9)
    assert quiet.send_delay_ms.p99 < 1 and quiet.coordinated_omission is False
    late = [_rec(i, 0.2 if i < 90 else 40.0) for i in range(100)]  # 10 % left 40 ms late
    s = summarize(late, 10**9)
    assert s.send_delay_ms.max == 40.0 and s.send_delay_ms.p99 > COORDINATED_OMISSION_MS
    assert s.coordinated_omission is True
    # TTFT counts from when the bytes left: the late requests' 40 ms are not the server's
    assert {ttft_ns(r) for r in late} == {50 * MS}
    open_loop = summarize([_rec(i, 25.0, scheduled=True) for i in range(10)], 10**9)
    assert open_loop.coordinated_omission is True and open_loop.send_delay_ms.p50 == 25.0

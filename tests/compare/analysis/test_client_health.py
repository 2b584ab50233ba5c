"""Client health from lag samples: a client that falls behind is flagged, a one-off spike at the
level's start is reported (with what it touched) and not; old runs keep their flag and words."""
from __future__ import annotations

import json
from pathlib import Path

from compare.analysis.client_health import LagSamples, distortion, judge, judge_summary, stalls
from core.records import RequestRecord

MS = 1_000_000
T0 = 10_000 * MS  # the level's start on the client's clock


def _samples(lags_ms: list[float], interval_ms: float = 10.0) -> LagSamples:
    """Wake-ups as the monitor records them: each ``interval + lag`` after the one before."""
    t, ts = T0, []
    for lag in lags_ms:
        t += int((interval_ms + lag) * MS)
        ts.append(t)
    return LagSamples(tuple(ts), tuple(lags_ms), interval_ms)


def _closed_loop(streams: int, rounds: int, tokens: int, ttft_ms: float, itl_ms: float,
                 start_ms: float = 0.0) -> list[RequestRecord]:
    """Exact-timing closed-loop records: each stream's next request leaves when its previous
    response ended (t_ready = that response's last event)."""
    out = []
    for s in range(streams):
        ready = None
        sent = T0 + int(start_ms * MS)
        for k in range(rounds):
            ev = tuple(sent + int((ttft_ms + i * itl_ms) * MS) for i in range(tokens))
            out.append(RequestRecord(request_id=f"s{s}r{k}", backend="b", level="c", t_sent_ns=sent,
                                     t_ready_ns=ready if ready is not None else sent, event_times_ns=ev,
                                     event_token_counts=(1,) * tokens, token_ids=tuple(range(tokens)),
                                     t_end_ns=ev[-1]))
            ready = sent = ev[-1]
    return out


def test_a_one_off_spike_at_the_levels_start_is_reported_not_flagged():
    # 30 s level: the loop woke 52 ms late once, at the start (every stream sending at once),
    # else within 3 ms (the GPU run's c256: p99 3.0 ms, max 52 ms)
    lags = [52.0] + [0.4, 1.0, 3.0, 0.2] * 750
    recs = _closed_loop(streams=256, rounds=3, tokens=50, ttft_ms=20, itl_ms=20, start_ms=0)
    lag = _samples(lags)
    h = judge(lag, T0, lag.t_ns[-1], recs)
    assert not h["fell_behind"] and h["why"] is None
    assert h["lag_max_ms"] == 52.0 and h["lag_max_at_s"] < 0.1 and h["lag_p99_ms"] <= 3.0
    assert h["stalls"] == 1 and h["lagged_share"] < 0.005
    # the stall [10 ms, 62 ms] met a whole round of first tokens (due at 20 ms): reported, with by how
    # much, not flagged (every stream starts at once, so any stall there meets a round of them)
    assert h["affected"]["ttft"]["in_stalls"] == 256 and h["affected"]["ttft"]["max_lag_ms"] == 52.0
    assert h["affected"]["itl"]["share"] < 0.05
    # a stream's first request is due at the level's start, not when a response ended: not a stalled send
    assert h["affected"]["send"]["n"] == 256 * 2 and h["affected"]["send"]["in_stalls"] == 0
    text = distortion(h)
    assert "256 of 768 first tokens (33.3%) by up to 52 ms" in text and "longest 52 ms at +0.1 s" in text


def test_a_client_that_falls_behind_is_flagged_with_why():
    # every wake-up 15 ms late: p99 is under the 50 ms threshold, but the loop is stalled 60 % of the time
    lags = [15.0] * 400
    recs = _closed_loop(streams=64, rounds=4, tokens=40, ttft_ms=20, itl_ms=10)
    lag = _samples(lags)
    h = judge(lag, T0, lag.t_ns[-1], recs)
    assert h["fell_behind"] and h["lag_p99_ms"] < 50
    assert h["lagged_share"] > 0.5 and "loop stalled 60% of the level" in h["why"]
    assert "of token events inside stalls" in h["why"] and h["affected"]["send"]["share"] > 0.5
    # and one that lags seldom but long: the p99 says it
    lags = ([0.5] * 95 + [80.0] * 5) * 10
    lag = _samples(lags)
    h = judge(lag, T0, lag.t_ns[-1], (), threshold_ms=50.0)
    assert h["fell_behind"] and h["why"].startswith("loop lag p99 80 ms > 50 ms (50 wake-ups over it)")
    # ... but not a short level's three round ends (every stream ending at once), its p99 though they are
    lags = ([0.5] * 97 + [60.0]) * 3
    lag = _samples(lags)
    h = judge(lag, T0, lag.t_ns[-1], (), threshold_ms=50.0)
    assert h["lag_p99_ms"] == 60.0 and not h["fell_behind"], h


def test_stalls_are_the_late_wakeups_with_their_extent():
    lag = _samples([1.0, 6.0, 2.0, 30.0])
    w = stalls(lag, 5.0)
    assert [(round((a - T0) / MS, 3), round((b - T0) / MS, 3), x) for a, b, x in w] == [(21.0, 27.0, 6.0),
                                                                                        (49.0, 79.0, 30.0)]


def test_the_summary_alone_flags_on_p99_else_max():
    assert not judge_summary({"max": 52.0, "p99": 3.0})
    assert judge_summary({"max": 90.0, "p99": 60.0})
    assert judge_summary({"max": 60.0})  # an older record has only its max


def test_reports_word_it_by_health_and_keep_old_runs(tmp_path: Path):
    from compare.analysis.caveats import caveats
    from core.results import RunResults
    from tests.synth import make_run, records

    lag = _samples([52.0] + [0.5] * 999)
    spike = judge(lag, T0, lag.t_ns[-1], _closed_loop(8, 3, 50, 20, 20))
    behind = judge(_samples([15.0] * 300), T0, T0 + 7500 * MS)
    run, _ = make_run({"a": [records("a", "c1", 0)], "b": [records("b", "c1", 0)], "c": [records("c", "c1", 0)]})
    run["backends"]["a"]["levels"]["c1"].update(client_health=spike, client_lagged=spike["fell_behind"],
                                                loop_lag_ms={"max": 52.0, "p99": 0.5})
    run["backends"]["b"]["levels"]["c1"].update(client_health=behind, client_lagged=True,
                                                loop_lag_ms={"max": 15.0, "p99": 15.0})
    # a run recorded before client_health: its flag (from the max) and its words are kept
    run["backends"]["c"]["levels"]["c1"].update(client_lagged=True, loop_lag_ms={"max": 120.0})
    text = caveats(RunResults.model_validate(run))
    assert text[0].startswith("client fell behind (b c1 loop stalled ") and "c c1 loop lag max 120 ms" in text[0]
    assert "a c1" not in text[0]
    assert any(t.startswith("a c1: client loop stalled 1x over 5 ms") and "not enough to invalidate" in t for t in text)
    # the run.json round-trips through the models (and so through the checked-in schema)
    again = RunResults.model_validate(json.loads(RunResults.model_validate(run).model_dump_json()))
    assert again.backends["a"].levels["c1"].client_health.affected["ttft"].in_stalls == 8


def test_requests_sent_by_a_preempted_writer_are_counted_and_said():
    """A record whose send left within a window (the writer lost its CPU around the write) counts
    in the level's health, and the caveats say how much client time those TTFTs may hold."""
    from dataclasses import replace

    from compare.analysis.caveats import caveats
    from core.results import RunResults
    from tests.synth import make_run, records

    recs = _closed_loop(4, 2, 50, 20, 20)
    recs[1] = replace(recs[1], send_window_ns=int(12.5 * MS))
    recs[3] = replace(recs[3], send_window_ns=int(40.0 * MS))
    h = judge(_samples([0.5] * 100), T0, T0 + 500 * MS, recs)
    assert h["preempted_sends"] == 2 and h["preempted_send_max_ms"] == 40.0
    assert "preempted_sends" not in judge(_samples([0.5] * 100), T0, T0 + 500 * MS, _closed_loop(4, 2, 50, 20, 20))
    run, _ = make_run({"a": [records("a", "c1", 0)]})
    run["backends"]["a"]["levels"]["c1"].update(client_health=h)
    text = caveats(RunResults.model_validate(run))
    assert any(t.startswith("a c1: 2 request(s) left while the client had lost its CPU around the write "
                            "(up to 40.0 ms)") for t in text), text

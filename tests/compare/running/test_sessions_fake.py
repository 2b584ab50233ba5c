"""Sending multi-turn sessions (compare/running/sessions.py) on the fake engine (backends/fake/, a
test instrument): a session's turns go in order, each its think time after the reply before it;
closed-loop streams take whole sessions, open-loop levels start sessions at the rate; run.json and
the reports show TTFT by turn."""
from __future__ import annotations

import asyncio
import json

from adapters.spec import ServingSpec
from backends.fake.engine import FakeBackend
from compare.running.sessions import run_session_level
from compare.workload.build import WorkloadSpec, build_requests
from compare.workload.schedule import LoadLevel
from core.slo import SLO
from tests.conftest import cli

THINK_S = 0.05


def _requests(n_sessions: int = 3, turns: int = 3):
    spec = WorkloadSpec.model_validate({"name": "chat", "sessions": {
        "num_sessions": n_sessions, "turns": {"value": turns}, "user_tokens": {"value": 4},
        "reply_tokens": {"value": 3}, "think_time_s": THINK_S}})
    return build_requests(spec)


def _level(level: LoadLevel, reqs):
    async def go():
        async with FakeBackend(ServingSpec(model="unused"), target="ttft=5ms+itl=1ms") as b:
            return await run_session_level(b, reqs, level, seed=0, timeout_s=30, max_errors=1)

    return asyncio.run(go())


def _by_session(records):
    out: dict[str, list] = {}
    for r in records:
        out.setdefault(r.request_id.rsplit("-t", 1)[0], []).append(r)
    return out


def test_closed_loop_streams_run_whole_sessions_with_think_time():
    reqs = _requests()
    o = _level(LoadLevel("concurrency", 2), reqs)
    assert len(o.records) == 9 and all(r.ok for r in o.records)
    for sid, recs in _by_session(o.records).items():
        assert [r.request_id for r in recs] == [f"{sid}-t00", f"{sid}-t01", f"{sid}-t02"]  # in order
        for prev, cur in zip(recs, recs[1:]):
            # sent only once the previous reply ended and the think time passed
            assert cur.t_sent_ns >= prev.event_times_ns[-1] + THINK_S * 1e9
            assert cur.t_ready_ns == prev.event_times_ns[-1] + int(THINK_S * 1e9)
    # two streams: the third session starts only when one of the first two has ended
    firsts = sorted(recs[0].t_sent_ns for recs in _by_session(o.records).values())
    ends = sorted(recs[-1].t_end_ns for recs in _by_session(o.records).values())
    assert firsts[2] >= ends[0]


def test_open_loop_starts_sessions_at_the_rate_and_turns_follow_replies():
    reqs = _requests(4, 2)
    o = _level(LoadLevel("rate", 50), reqs)
    assert len(o.schedule_offsets_ns) == 4  # one arrival per session
    sessions = _by_session(o.records)
    starts = sorted(recs[0].t_scheduled_ns - o.t_start_ns for recs in sessions.values())
    assert starts == sorted(o.schedule_offsets_ns)
    for recs in sessions.values():
        assert recs[1].t_scheduled_ns == recs[0].event_times_ns[-1] + int(THINK_S * 1e9)
        assert recs[1].t_sent_ns >= recs[1].t_scheduled_ns


def test_run_json_and_reports_show_ttft_by_turn(tmp_path, tiny_model):
    wl = tmp_path / "sessions.yaml"
    wl.write_text("name: chat\nsessions:\n  num_sessions: 4\n  turns: {value: 3}\n  system_prompt_tokens: 16\n"
                  "  user_tokens: {value: 8}\n  reply_tokens: {value: 4}\n  think_time_s: 0.01\n")
    out = tmp_path / "out"
    p = cli("run", "--backends", "fake@ttft=5ms+itl=1ms+prefill=0.1ms", "--vary", "max_num_seqs=1,4", "--model", str(tiny_model),
                "--workload", str(wl), "--concurrency", "2", "--rate", "20", "--warmup", "0", "--out", str(out),
                "--run-id", "s")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "TTFT p50 by turn" in p.stdout
    run = json.loads((out / "s" / "run.json").read_text())
    for b in run["backends"].values():
        for level in ("c2", "r20"):
            s = b["levels"][level]["sessions"]
            assert s["sessions"] == s["completed"] == 4 and s["duration_s"]["n"] == 4
            turns = s["turns"]
            assert [t["turn"] for t in turns] == [0, 1, 2] and all(t["ok"] == 4 for t in turns)
            # a later turn's prompt holds the history (16 + 8, then + 4 + 8 per turn)
            assert [t["prompt_tokens_mean"] for t in turns] == [24, 36, 48]
            assert all(t["ttft_ms"]["n"] == 4 and t["itl_ms"]["n"] == 12 for t in turns)
    rows = [json.loads(x) for x in (out / "s" / "workload.jsonl").read_text().splitlines()]
    assert [r["turn"] for r in rows[:3]] == [0, 1, 2] and rows[1]["think_time_s"] == 0.01
    r = cli("report", str(out / "s"), "--html")
    assert r.returncode == 0, r.stderr
    html = (out / "s" / "report.html").read_text()
    assert "Multi-turn sessions: TTFT by turn" in html and 'alt="TTFT by turn"' in html
    # the replay sends the same sessions, turn for turn
    p2 = cli("run", "--backends", "fake", "--model", str(tiny_model), "--replay", str(out / "s"),
                 "--concurrency", "2", "--warmup", "0", "--out", str(out), "--run-id", "r", "-q")
    assert p2.returncode == 0, p2.stderr[-2000:]
    assert (out / "r" / "workload.jsonl").read_text() == (out / "s" / "workload.jsonl").read_text()
    assert json.loads((out / "r" / "run.json").read_text())["backends"]["fake"]["levels"]["c2"]["sessions"]["completed"] == 4


def test_sessions_with_repeats_require_slo_and_find_max_rate(tmp_path, tiny_model):
    wl = tmp_path / "sessions.yaml"
    wl.write_text("sessions:\n  num_sessions: 3\n  turns: {value: 2}\n  user_tokens: {value: 4}\n"
                  "  reply_tokens: {value: 3}\n")
    out = tmp_path / "out"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--workload", str(wl), "--concurrency", "1",
                "--warmup", "0", "--repeats", "2", "--slo", "ttft_p95=60s", "--require-slo", "--find-max-rate",
                "--max-rate-start", "8", "--max-rate-probes", "1", "--out", str(out), "--run-id", "m")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    b = json.loads((out / "m" / "run.json").read_text())["backends"]["fake"]
    assert [r["levels"]["c1"]["sessions"]["completed"] for r in b["repeats"]] == [3, 3]
    assert b["levels"]["c1"]["sessions"]["completed"] == 3  # the pooled row shows the latest repeat's
    assert b["levels"]["c1"]["slo_met"] is True
    # each probe sent every turn of every session (through compare/running/sessions.py)
    assert all(s["met"] and s["probes"][0]["ok"] == s["probes"][0]["requests"] == 6 for s in b["max_rate"]["repeats"])
    # its rate starts sessions, and the output says so (run.json, the probe lines, the answer)
    assert b["max_rate"]["search"]["unit"] == "sessions/s"
    assert "max-rate r8 sessions/s: met" in p.stdout and "turns/s achieved" in p.stdout
    assert "max rate meeting SLO: >= 8 sessions/s" in p.stdout


def test_a_session_probe_keeps_up_only_with_its_turns():
    """Kept up compares achieved turns/s with the turns a session rate offers, not with sessions/s."""
    from compare.tuning.probe import LoadSearch, _Prober

    reqs = _requests(6, 3)  # 3 turns a session: 16 sessions/s offer 48 turns/s

    async def go(target: str):
        async with FakeBackend(ServingSpec(model="unused"), target=target) as b:
            return await _Prober(b, reqs, SLO.parse("ttft_p95=60s"), LoadSearch(timeout_s=30)).probe(16.0)

    assert asyncio.run(go("ttft=5ms+itl=1ms"))["sustained"]
    # one slot, ~52 ms a turn: ~19 turns/s, under half the 48 offered (though over half of 16 sessions/s)
    slow = asyncio.run(go("ttft=50ms+itl=1ms+seqs=1"))
    assert 8 < slow["req_s"] < 21 and not slow["sustained"]


def test_what_cannot_send_sessions_is_refused_in_one_line(tmp_path, tiny_model):
    wl = tmp_path / "sessions.yaml"
    wl.write_text("sessions:\n  num_sessions: 2\n  turns: {value: 2}\n")
    for extra, message in ((("--client-procs", "2"), "--client-procs 2: multi-turn sessions are sent by one client"),
                           (("--rate", "2", "--duration", "5"), "--duration bounds lists of single requests")):
        p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--workload", str(wl), *extra,
                    "--out", str(tmp_path / "out"))
        assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()

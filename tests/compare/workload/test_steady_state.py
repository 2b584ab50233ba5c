"""Steady state of time-bounded levels (compare/analysis/steady.py): a --duration level counts only
the requests due after its warm-up and finished inside its window; the others stay in
requests.jsonl, marked. On the fake engine (orchestration only) with one sequence slot, an
overloading rate builds a queue that shows in the counted latencies and in the trimmed counts."""
from __future__ import annotations

import dataclasses
import json

import pytest

from compare.analysis.steady import Trim, steady_state, window_ns
from compare.cli.commands import run as run_cmd
from compare.cli.main import build_parser
from compare.cli.request import run_request
from compare.workload.duration import bound_levels, trims
from compare.workload.schedule import LoadLevel, parse_levels
from core.errors import UserError
from core.records import GenerationRequest, RequestRecord


def test_default_trims_are_a_tenth_of_the_duration_each():
    assert trims(60.0, None, None) == (6.0, 6.0)
    assert trims(60.0, 0.0, 2.5) == (0.0, 2.5)
    assert trims(None, None, None) is None
    (lv,) = bound_levels(parse_levels(None, "10", "constant"), 2.0, 100, 0, warmup_s=0.5)
    assert (lv.warmup_s, lv.cooldown_s) == (0.5, 0.2)
    assert lv.as_dict()["warmup_s"] == 0.5 and lv.as_dict()["cooldown_s"] == 0.2
    assert window_ns(lv) == (500_000_000, 1_800_000_000)


@pytest.mark.parametrize("argv, message", [
    (["--rate", "4", "--warmup-seconds", "2"], "--warmup-seconds trims time-bounded levels: add --duration"),
    (["--rate", "4", "--cooldown-seconds", "2"], "--cooldown-seconds trims time-bounded levels"),
    (["--rate", "4", "--duration", "10", "--warmup-seconds", "6", "--cooldown-seconds", "4"],
     "--warmup-seconds 6 + --cooldown-seconds 4 leave no measured window in --duration 10"),
    (["--rate", "4", "--duration", "10", "--warmup-seconds", "-1"], "--warmup-seconds -1: must be a finite number"),
])
def test_bad_trims_are_one_line(argv, message, tmp_path):
    out = tmp_path / "results"
    with pytest.raises(UserError) as e:
        run_request(build_parser().parse_args(["run", "--backends", "fake", "--num-requests", "100", *argv,
                                               "--out", str(out)]))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_marks_follow_the_seeded_offset_and_the_finish_time():
    lv = LoadLevel("rate", 10.0, requests=20, arrival="constant", duration_s=2.0, warmup_s=0.5, cooldown_s=0.5)
    reqs = [GenerationRequest(request_id=f"r{i}", max_tokens=1, prompt_token_ids=(1,)) for i in range(20)]
    trim = Trim(lv, reqs, 0)
    t0 = 7_000_000_000  # any clock: the level's start is recovered from each record

    def rec(i: int, latency_s: float) -> RequestRecord:
        due = t0 + i * 100_000_000
        return RequestRecord(request_id=f"r{i}", backend="b", level=lv.label, t_sent_ns=due, t_scheduled_ns=due,
                             t_end_ns=due + int(latency_s * 1e9))
    marked = [trim(rec(i, 0.05)) for i in range(20)]
    assert [r.trimmed for r in marked[:5]] == ["warmup"] * 5  # due at 0 .. 0.4 s
    assert all(r.trimmed is None for r in marked[5:15])  # due 0.5 .. 1.4 s, finished by 1.5 s
    assert [r.trimmed for r in marked[15:]] == ["cooldown"] * 5
    assert trim(rec(10, 0.6)).trimmed == "cooldown"  # due at 1.0 s, finished at 1.6 s: after the window
    s = steady_state(lv, marked)
    assert (s.window_s, s.counted, s.trimmed_warmup, s.trimmed_cooldown) == ([0.5, 1.5], 10, 5, 5)


def _run(tmp_path, tiny_model, run_id: str, *argv: str) -> tuple[dict, list[dict]]:
    args = build_parser().parse_args([
        "run", "--backends", "fake@ttft=20ms+itl=5ms+seqs=1", "--model", str(tiny_model), "--arrival", "constant",
        "--num-requests", "400", "--input-len", "8", "--output-len", "2", "--warmup", "0", "--quality", "off",
        "--quiet", "--out", str(tmp_path), "--run-id", run_id, *argv])
    code = run_cmd.execute(run_request(args))
    d = tmp_path / run_id
    doc = json.loads((d / "run.json").read_text())
    recs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()]
    return {"code": code, **doc}, recs


def test_an_overloaded_engine_shows_its_queue_in_the_steady_state(tiny_model, tmp_path):
    # one slot, 25 ms a request: 40 req/s at most. 5 req/s is easy; 100 req/s overloads it: of its
    # 50 requests, those due after 50 ms and finished by 450 ms (the 6th to the 18th) wait 95-275 ms
    doc, recs = _run(tmp_path, tiny_model, "short", "--rate", "5,100", "--duration", "0.5",
                     "--slo", "ttft_p95=200ms")
    assert doc["code"] == 0
    (name,) = doc["backends"]
    levels = doc["backends"][name]["levels"]
    easy, hard = levels["r5-const"], levels["r100-const"]
    assert easy["ttft_ms"]["p50"] < 100  # no queue
    s = hard["steady_state"]
    assert s["window_s"] == [0.05, 0.45] and s["duration_s"] == 0.5
    assert s["trimmed_warmup"] == 5  # due at 0 .. 40 ms
    assert s["trimmed_cooldown"] > s["counted"] > 0  # most finished after the window: the queue
    assert hard["requests"] == s["counted"] and s["counted"] + 5 + s["trimmed_cooldown"] == 50
    assert hard["ttft_ms"]["p50"] > 100 and not hard["slo_met"]
    # the raw records keep every request, marked
    marks = [r.get("trimmed") for r in recs if r["level"] == "r100-const"]
    assert len(marks) == 50 and marks.count("warmup") == 5 and marks.count("cooldown") == s["trimmed_cooldown"]
    # the reader is told what was measured and what was left out
    from compare.analysis.caveats import caveats

    # (a loaded machine may add the level's client-lag or late-send lines: not this test's subject)
    (line,) = [c for c in caveats({k: v for k, v in doc.items() if k != "code"}) if "r100-const: steady state" in c]
    assert "steady state measured 0.05-0.45 s of 0.5 s" in line and "did not keep up" in line
    # twice as long at the same overload: the queue grows, and with it the counted latency
    # (the 11th to the 36th request, waiting 170-545 ms: a p50 about twice the short level's)
    doc2, _ = _run(tmp_path, tiny_model, "long", "--rate", "100", "--duration", "1")
    hard2 = doc2["backends"][name]["levels"]["r100-const"]
    assert hard2["ttft_ms"]["p50"] > 1.3 * hard["ttft_ms"]["p50"]
    assert hard2["steady_state"]["window_s"] == [0.1, 0.9]


def test_require_slo_judges_the_steady_state(tiny_model, tmp_path):
    """--require-slo reads requests.jsonl: the trimmed requests are not judged (only the window's)."""
    from compare.analysis.slo_gate import slo_misses
    from core.results import load_results
    from core.slo import SLO

    doc, recs = _run(tmp_path, tiny_model, "g", "--rate", "10", "--duration", "1", "--warmup-seconds", "0.25",
                     "--cooldown-seconds", "0.25")
    run, records = load_results(tmp_path / "g")
    level = doc["backends"][next(iter(doc["backends"]))]["levels"]["r10-const"]
    assert level["steady_state"]["trimmed_warmup"] == 3 and level["requests"] == level["steady_state"]["counted"]
    # a limit only the warm-up requests (due before 0.25 s) would miss: none of the counted ones does
    assert slo_misses(run, records, SLO.parse("ttft_p95=1s")) == []
    # the warm-up's requests made 10 s slower: still met, since they are not judged
    slow = [r if r.trimmed is None else dataclasses.replace(r, t_sent_ns=r.t_sent_ns - 10**10) for r in records]
    assert slo_misses(run, slow, SLO.parse("ttft_p95=1s")) == []  # the slow ones are trimmed


def test_max_rate_probes_carry_the_trims():
    from compare.tuning.probe import LoadSearch, _Prober

    search = LoadSearch(kind="rate", arrival="constant", duration_s=2.0, warmup_s=0.4)
    lv = _Prober(None, list(range(100)), None, search).level(10.0)  # type: ignore[arg-type]
    assert (lv.duration_s, lv.warmup_s, lv.cooldown_s) == (2.0, 0.4, 0.2)
    opts = run_request(build_parser().parse_args([
        "run", "--backends", "fake", "--rate", "4", "--duration", "3", "--cooldown-seconds", "1",
        "--num-requests", "64", "--find-max-rate", "--slo", "ttft_p95=1s"])).max_rate
    assert (opts.duration_s, opts.warmup_s, opts.cooldown_s) == (3.0, None, 1.0)


def test_steady_state_with_vary_repeats_max_rate_and_the_html_report(tiny_model, tmp_path):
    from tests.conftest import cli

    out = tmp_path / "out"
    p = cli("run", "--backends", "fake@ttft=20ms+itl=5ms", "--vary", "max_num_seqs=1,4", "--repeats", "2",
                "--model", str(tiny_model), "--rate", "120", "--arrival", "constant", "--duration", "0.5",
                "--num-requests", "400", "--input-len", "8", "--output-len", "2", "--warmup", "0", "--quality", "off",
                "--slo", "ttft_p95=150ms", "--find-max-rate", "--max-rate-start", "20", "--max-rate-probes", "1",
                "--out", str(out), "--run-id", "v")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    run = json.loads((out / "v" / "run.json").read_text())
    cool = {}
    for name, b in run["backends"].items():
        per = [r["levels"]["r120-const"]["steady_state"] for r in b["repeats"]]
        pooled = b["levels"]["r120-const"]["steady_state"]
        for k in ("counted", "trimmed_warmup", "trimmed_cooldown"):
            assert pooled[k] == per[0][k] + per[1][k]  # the pooled row counts every repeat
        assert b["levels"]["r120-const"]["requests"] == pooled["counted"]
        cool[name] = pooled["trimmed_cooldown"]
        # the search's probes were time-bounded and trimmed like the level
        search = b["max_rate"]["search"]
        assert (search["duration_s"], search["warmup_s"], search["cooldown_s"]) == (0.5, None, None)
    # one slot (40 req/s) cannot keep up with 120 req/s; four slots (160 req/s) can
    # (one slot: 42 of its 60 requests a repeat finish after the window; four slots: only the sends
    # of the last ~75 ms, ~9; the comparison fails only if four slots lag ~0.1 s more than that)
    assert cool["fake@ttft=20ms+itl=5ms[max_num_seqs=1]"] > 2 * cool["fake@ttft=20ms+itl=5ms[max_num_seqs=4]"]
    r = cli("report", str(out / "v"), "--html")
    assert r.returncode == 0, r.stderr
    assert "steady state measured 0.05-0.45 s of 0.5 s" in (out / "v" / "report.html").read_text()


def test_a_steady_state_run_is_gated_like_any_run(tiny_model, tmp_path):
    """A baseline of a --duration run with gamma arrivals: the same run again passes the gate; the
    engine made slower (native timings) fails it, naming the change (the gate reads the counted
    window's numbers). Half a second at 60 req/s: as many requests a repeat as a second at 30."""
    from tests.conftest import cli

    out, base = tmp_path / "out", tmp_path / "baselines"

    def run(rid: str, ttft: str, itl: str):
        p = cli("run", "--backends", "fake", "--native", f"fake.ttft={ttft}", "--native", f"fake.itl={itl}",
                    "--model", str(tiny_model), "--rate", "60", "--arrival", "gamma", "--burstiness", "2",
                    "--duration", "0.5", "--num-requests", "200", "--input-len", "8", "--output-len", "4",
                    "--warmup", "0", "--quality", "off", "--repeats", "2", "--out", str(out), "--run-id", rid)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        return out / rid

    first = run("a", "20ms", "5ms")
    assert cli("baseline", "save", str(first), "--name", "steady", "--dir", str(base)).returncode == 0
    ok = cli("check", "--baseline", "steady", "--dir", str(base), str(run("b", "20ms", "5ms")))
    assert ok.returncode == 0 and "RESULT: PASS" in ok.stdout, ok.stdout[-2000:] + ok.stderr[-1000:]
    slow = cli("check", "--baseline", "steady", "--dir", str(base), str(run("c", "60ms", "15ms")))
    assert slow.returncode == 1 and "REGRESSION fake" in slow.stdout, slow.stdout[-2000:] + slow.stderr[-1000:]

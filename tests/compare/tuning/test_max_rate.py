"""``compare run --find-max-rate``: the highest Poisson rate meeting the SLO, per backend, plus the
interval arithmetic over engine starts and the bad input. The search is orchestration: it runs on
the fake engine (backends/fake/, a test instrument with a fixed timing model), so its probes,
repeats, console answer and report are checked in seconds; what an engine does under each probe
is the real-engine tests' subject."""
from __future__ import annotations

import json

import pytest

from compare.tuning.max_rate import answer_line, summarize_starts
from core.results.max_rate import LoadSearchInfo, MaxRate, MaxRateStart
from tests.conftest import cli

# the fake engine: 20 ms to the first token, 5 ms per token after it
FAKE = ("--backends", "fake", "--native", "fake.ttft=20ms", "--native", "fake.itl=5ms")

# small: each probe sends the whole list, so a probe at r req/s lasts about 6/r s (a 55 ms
# request: at 16 req/s, ~0.4 s, still achieving over 80% of the offered rate)
WORKLOAD = ("--num-requests", "6", "--input-len", "24", "--output-len", "8", "--concurrency", "1",
            "--warmup", "1")


def _start(met, missed, rep=0):
    return MaxRateStart(repeat=rep, status="complete", met=met is not None, max_rate=met, missed_at=missed,
                        highest_probed=met, probes=[])


def _section(*starts):
    search = LoadSearchInfo(kind="rate", start=1.0, tol=0.15, max_probes=8, repeats=1, max_load=1024.0, warmup=0,
                            timeout_s=600.0, seed=0)
    return MaxRate(search=search, repeats=list(starts))


def test_interval_over_engine_starts_covers_probe_resolution():
    # identical met rates: a t-interval over them alone would be [4, 4]; the missed rates widen it
    s = summarize_starts([_start(4.0, 5.66, 0), _start(4.0, 5.66, 1), _start(4.0, 4.76, 2)])
    assert s.verdict == "met" and s.max_rate == pytest.approx(4.0) and s.bounded
    assert s.ci95 is not None and s.ci95.lo == pytest.approx(4.0) and s.ci95.hi is not None and s.ci95.hi > 5.66
    line = answer_line("vllm", _section(_start(4.0, 5.66, 0), _start(4.0, 5.66, 1), _start(4.0, 4.76, 2)))
    assert line.startswith("vllm  max rate meeting SLO: 4 req/s (mean of 3 engine starts; met at 4, 4, 4")
    assert "95% CI 4-" in line
    # one start never missed: a lower bound only, the interval has no upper end
    s = summarize_starts([_start(4.0, 8.0, 0), _start(8.0, None, 1)])
    assert not s.bounded and s.ci95 is not None and s.ci95.hi is None
    assert "no upper end" in answer_line("x", _section(_start(4.0, 8.0, 0), _start(8.0, None, 1)))
    # one start met nothing: no interval at all
    s = summarize_starts([_start(4.0, 8.0, 0), _start(None, 1.0, 1)])
    assert s.verdict == "some starts met none" and "ci95" not in s.model_fields_set
    # an interrupted start does not count
    assert summarize_starts([MaxRateStart(repeat=0, status="interrupted")]).n == 0


@pytest.mark.parametrize("args, words", [
    (("--find-max-rate",), "--find-max-rate needs an SLO"),
    (("--find-max-rate", "--slo", "ttft_p95=1s", "--max-rate-probes", "0"), "--max-rate-probes must be >= 1"),
    (("--find-max-rate", "--slo", "ttft_p95=1s", "--max-rate-start", "0"), "--max-rate-start must be"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, words):
    p = cli("run", "--backends", "vllm", *args, "--out", str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not any(tmp_path.iterdir())  # nothing half-written


def _run(tmp_path, tiny_model, *extra):
    p = cli("run", *FAKE, "--model", str(tiny_model), *WORKLOAD,
                "--find-max-rate", "--out", str(tmp_path), "--run-id", "r", *extra)
    return p, json.loads((tmp_path / "r" / "run.json").read_text())


def test_generous_slo_two_engine_starts(tmp_path, tiny_model):
    """Met at the first probed rate in both engine starts; every probe recorded; console and report
    give the answer with a lower-bounded interval (no start missed it within 2 probes)."""
    p, run = _run(tmp_path, tiny_model, "--slo", "ttft_p95=60s", "--max-rate-start", "16",
                  "--max-rate-probes", "2", "--repeats", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    mr = run["backends"]["fake"]["max_rate"]
    assert [s["repeat"] for s in mr["repeats"]] == [0, 1]
    for s in mr["repeats"]:
        assert s["status"] == "complete" and s["met"] and s["max_rate"] >= 16
        assert [x["rate"] for x in s["probes"]][0] == 16 and len(s["probes"]) <= 2
        assert all(x["slo_met"] == (x["ttft_p95_ms"] <= 60_000) for x in s["probes"])
        if s["missed_at"] is not None:
            assert s["missed_at"] > s["max_rate"]
    # the fake engine's TTFT is its configured 20 ms (stamped on its schedule), so every probe met
    assert all(20 <= x["ttft_p95_ms"] < 1000 for s in mr["repeats"] for x in s["probes"])
    assert mr["summary"]["n"] == 2 and mr["summary"]["max_rate"] >= 16
    out = " ".join(p.stdout.split())  # the answer may wrap at the console's width
    assert "fake max rate meeting SLO:" in out and "mean of 2 engine starts" in out
    assert "max-rate r16: met" in p.stdout
    md = cli("report", str(tmp_path / "r")).stdout
    assert "Max rate meeting the SLO: every probe" in md and "| fake | 2 | 16 req/s |" in md


def test_impossible_slo_none_met_is_an_answer(tmp_path, tiny_model):
    """1 us TTFT cannot be met: the search halves from the start rate, records every miss, says
    'none met' and the run still completes (exit 0: the search answered; it did not fail)."""
    p, run = _run(tmp_path, tiny_model, "--slo", "ttft_p95=1us", "--max-rate-start", "16", "--max-rate-probes", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    s = run["backends"]["fake"]["max_rate"]["repeats"][0]
    assert not s["met"] and s["max_rate"] is None
    assert [x["rate"] for x in s["probes"]] == [16, 8] and not any(x["slo_met"] for x in s["probes"])
    assert s["missed_at"] == 8
    assert "max rate meeting SLO: none met (missed at every rate probed, down to 8 req/s" in \
        " ".join(p.stdout.split())

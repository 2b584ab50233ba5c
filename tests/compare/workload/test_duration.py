"""Time-bounded open-loop levels (compare/workload/duration.py): a --rate level with --duration
sends exactly the requests whose seeded offsets fall inside it, on the fake engine (in process,
deterministic); bad values are one-line errors with nothing written."""
from __future__ import annotations

import json

import pytest

from compare.cli.commands import run as run_cmd
from compare.cli.main import build_parser
from compare.cli.request import run_request
from compare.workload.arrivals import offsets_ns
from compare.workload.duration import bound_levels
from compare.workload.schedule import parse_levels
from core.errors import UserError


def test_a_level_keeps_the_sends_inside_the_duration():
    (lv,) = bound_levels(parse_levels(None, "10", "constant"), 2.0, 100, 0)
    assert (lv.requests, lv.duration_s) == (20, 2.0)  # sends at 0, 0.1, ... 1.9 s
    (g,) = bound_levels(parse_levels(None, "10", "gamma", 4.0), 2.0, 100, 3)
    assert g.requests == sum(o < 2e9 for o in offsets_ns(100, 10.0, 3, "gamma", 4.0))
    assert g.as_dict()["duration_s"] == 2.0


@pytest.mark.parametrize("argv, message", [
    (["--rate", "4", "--duration", "0"], "--duration 0: must be a finite number of seconds > 0"),
    (["--concurrency", "2", "--duration", "5"], "--duration bounds --rate levels by time; level c2 is not one"),
    (["--rate", "inf", "--duration", "5"], "level burst is not one"),
    (["--rate", "4", "--duration", "10", "--num-requests", "8"],
     "--duration 10 at r4 needs more than the workload's 8 requests; raise --num-requests to at least 49"),
])
def test_bad_duration_is_one_line(argv, message, tmp_path):
    out = tmp_path / "results"
    with pytest.raises(UserError) as e:
        run_request(build_parser().parse_args(["run", "--backends", "fake", *argv, "--out", str(out)]))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_a_time_bounded_level_runs_on_the_fake_engine(tiny_model, tmp_path):
    args = build_parser().parse_args([
        "run", "--backends", "fake", "--model", str(tiny_model), "--rate", "100", "--arrival", "constant",
        "--duration", "0.05", "--num-requests", "40", "--input-len", "8", "--output-len", "4", "--warmup", "0",
        "--quality", "off", "--quiet", "--out", str(tmp_path), "--run-id", "d"])
    assert run_cmd.execute(run_request(args)) == 0
    doc = json.loads((tmp_path / "d" / "run.json").read_text())
    level = doc["backends"]["fake"]["levels"]["r100-const"]
    assert level["schedule_offsets_ns"] == offsets_ns(5, 100.0, 0, "constant")  # 0, 10, ... 40 ms


def test_max_rate_probes_are_time_bounded_with_the_runs_arrivals():
    from compare.tuning.probe import LoadSearch, _Prober

    search = LoadSearch(kind="rate", arrival="constant", duration_s=1.0)
    prober = _Prober(None, list(range(50)), None, search)  # type: ignore[arg-type]
    lv = prober.level(10.0)
    assert (lv.label, lv.requests, lv.duration_s) == ("r10-const", 10, 1.0)
    assert prober.level(100.0).requests is None  # the list runs out first: the probe sends all of it
    assert _Prober(None, list(range(50)), None, LoadSearch(kind="rate")).level(10.0).requests is None
    opts = run_request(build_parser().parse_args([
        "run", "--backends", "fake", "--rate", "4", "--arrival", "gamma", "--burstiness", "2", "--duration", "3",
        "--num-requests", "64", "--find-max-rate", "--slo", "ttft_p95=1s"])).max_rate
    assert (opts.arrival, opts.burstiness, opts.duration_s) == ("gamma", 2.0, 3.0)

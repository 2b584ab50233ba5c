"""``compare run --trace FILE`` on the fake engine (orchestration only): the trace's requests are
sent at its own offsets (scaled by --trace-speedup, cut by --trace-max-requests) in one open-loop
level labelled ``trace``, with send lateness summarised as for Poisson levels; a bad trace is one
line naming the file and line, exit 2, nothing written."""
from __future__ import annotations

import json

from tests.conftest import run_cli


def _trace(tmp_path, rows):
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_trace_replays_at_its_offsets_with_speedup_and_cap(tmp_path, tiny_model):
    rows = [{"timestamp": 400 * i, "input_length": 24, "output_length": 4, "hash_ids": [7]} for i in range(8)]
    trace, out = _trace(tmp_path, rows), tmp_path / "out"
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), "--trace", str(trace),
                "--trace-speedup", "2", "--trace-max-requests", "6", "--warmup", "0",
                "--out", str(out), "--run-id", "t", timeout=300)
    run = json.loads((out / "t" / "run.json").read_text())
    assert run["status"] == "complete", p.stderr[-3000:]
    level = run["backends"]["fake"]["levels"]["trace"]
    assert level["ok"] == 6
    # the trace's 400 ms gaps at speed-up 2: sent 200 ms apart, each lateness recorded
    assert level["schedule_offsets_ns"] == [200_000_000 * i for i in range(6)]
    assert level["send_delay_ms"]["n"] == 6 and level["send_delay_ms"]["p99"] < 200
    assert run["levels"] == [{"kind": "rate", "value": 5.0, "label": "trace"}]
    assert len((out / "t" / "workload.jsonl").read_text().splitlines()) == 6


def test_bad_trace_is_one_line_exit_2_nothing_written(tmp_path, tiny_model):
    trace = _trace(tmp_path, [{"timestamp": 2000, "input_length": 5, "output_length": 1},
                              {"timestamp": 1000, "input_length": 5, "output_length": 1}])
    out = tmp_path / "out"
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), "--trace", str(trace),
                "--out", str(out), "--run-id", "t", timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{trace}:2: timestamp goes backwards" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (out / "t").exists()


def test_trace_and_dataset_together_are_refused(tmp_path, tiny_model):
    trace = _trace(tmp_path, [{"timestamp": 0, "input_length": 5, "output_length": 1}])
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), "--trace", str(trace),
                "--dataset", str(trace), "--out", str(tmp_path / "out"), timeout=120)
    assert p.returncode == 2 and "pass one of them" in p.stderr and "Traceback" not in p.stderr

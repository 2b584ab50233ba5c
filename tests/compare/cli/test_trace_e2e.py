"""``compare run --trace FILE`` on the fake engine (orchestration only): the trace's requests are
sent at its own offsets (scaled by --trace-speedup, cut by --trace-max-requests) in one open-loop
level labelled ``trace``, with send lateness summarised as for Poisson levels; a bad trace is one
line naming the file and line, exit 2, nothing written."""
from __future__ import annotations

import json

from tests.conftest import cli


def _trace(tmp_path, rows):
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_trace_replays_at_its_offsets_with_speedup_and_cap(tmp_path, tiny_model):
    rows = [{"timestamp": 400 * i, "input_length": 24, "output_length": 4, "hash_ids": [7]} for i in range(8)]
    trace, out = _trace(tmp_path, rows), tmp_path / "out"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--trace", str(trace),
                "--trace-speedup", "4", "--trace-max-requests", "6", "--warmup", "0",
                "--out", str(out), "--run-id", "t")
    run = json.loads((out / "t" / "run.json").read_text())
    assert run["status"] == "complete", p.stderr[-3000:]
    level = run["backends"]["fake"]["levels"]["trace"]
    assert level["ok"] == 6
    # the trace's 400 ms gaps at speed-up 4: sent 100 ms apart, each lateness recorded
    assert level["schedule_offsets_ns"] == [100_000_000 * i for i in range(6)]
    assert level["send_delay_ms"]["n"] == 6 and level["send_delay_ms"]["p99"] < 200
    assert run["levels"] == [{"kind": "rate", "value": 10.0, "label": "trace"}]
    assert len((out / "t" / "workload.jsonl").read_text().splitlines()) == 6


def test_bad_trace_is_one_line_exit_2_nothing_written(tmp_path, tiny_model):
    trace = _trace(tmp_path, [{"timestamp": 2000, "input_length": 5, "output_length": 1},
                              {"timestamp": 1000, "input_length": 5, "output_length": 1}])
    out = tmp_path / "out"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--trace", str(trace),
                "--out", str(out), "--run-id", "t")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{trace}:2: timestamp goes backwards" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (out / "t").exists()


def test_trace_and_dataset_together_are_refused(tmp_path, tiny_model):
    trace = _trace(tmp_path, [{"timestamp": 0, "input_length": 5, "output_length": 1}])
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--trace", str(trace),
                "--dataset", str(trace), "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and "pass one of them" in p.stderr and "Traceback" not in p.stderr


def test_replay_of_a_trace_run_keeps_the_trace_clock(tmp_path, tiny_model):
    """workload.jsonl keeps each request's trace offset; --replay sends at those offsets again."""
    rows = [{"timestamp": t, "input_length": 16, "output_length": 3} for t in (0, 150, 200, 650, 700, 1100)]
    trace, out = _trace(tmp_path, rows), tmp_path / "out"
    common = ("--backends", "fake", "--model", str(tiny_model), "--warmup", "0", "--quality", "off",
              "--out", str(out))
    p = cli("run", *common, "--trace", str(trace), "--trace-speedup", "4", "--run-id", "t")
    assert p.returncode == 0, p.stderr[-3000:]
    saved = [json.loads(x) for x in (out / "t" / "workload.jsonl").read_text().splitlines()]
    assert [r["send_offset_ns"] for r in saved] == [t * 250_000 for t in (0, 150, 200, 650, 700, 1100)]
    p = cli("run", *common, "--replay", str(out / "t"), "--run-id", "r")
    assert p.returncode == 0, p.stderr[-3000:]
    first, again = (json.loads((out / d / "run.json").read_text()) for d in ("t", "r"))
    assert again["levels"] == first["levels"] == [{"kind": "rate", "value": 5 / 0.275, "label": "trace"}]
    offsets = [lv["backends"]["fake"]["levels"]["trace"]["schedule_offsets_ns"] for lv in (first, again)]
    assert offsets[0] == offsets[1] == [r["send_offset_ns"] for r in saved]
    assert (out / "r" / "workload.jsonl").read_text() == (out / "t" / "workload.jsonl").read_text()
    # asked for other levels, the replay sends the same requests there and says the clock is not kept
    p = cli("run", *common, "--replay", str(out / "t"), "--concurrency", "2", "--run-id", "c")
    assert p.returncode == 0 and "instead of the trace's clock" in p.stderr
    assert list(json.loads((out / "c" / "run.json").read_text())["backends"]["fake"]["levels"]) == ["c2"]


def test_a_replay_file_with_a_partial_clock_is_one_line(tmp_path, tiny_model):
    d = tmp_path / "old"
    d.mkdir()
    row = {"request_id": "a", "max_tokens": 2, "prompt_token_ids": [5, 6]}
    (d / "workload.jsonl").write_text(json.dumps({**row, "send_offset_ns": 0}) + "\n"
                                      + json.dumps({**row, "request_id": "b"}) + "\n")
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--replay", str(d),
                "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and "line 2 has no send_offset_ns" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()

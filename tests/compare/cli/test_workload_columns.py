"""Trace and dataset workloads reach every column alike: with ``--vary`` (two columns of the fake
engine, a test instrument) and ``--repeats 2``, every column and every repeat is sent the same
request list on the same schedule; the HTML report renders every column, and the regression gate
tells a replay on the same clock from a trace sent on another one."""
from __future__ import annotations

import json
from pathlib import Path

from compare.workload.arrivals import offsets_ns
from tests.conftest import cli

COLUMNS = ("fake[max_num_seqs=1]", "fake[max_num_seqs=4]")
COMMON = ("--backends", "fake", "--vary", "max_num_seqs=1,4", "--repeats", "2", "--warmup", "0",
          "--quality", "off")


def _cells(d: Path, level: str) -> dict[tuple[str, int], dict]:
    """(column, repeat) -> that cell's request ids in send order, prompt tokens by id, and schedule."""
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    recs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()]
    out = {}
    for name, b in run["backends"].items():
        for k, rep in enumerate(b["repeats"]):
            mine = sorted((r for r in recs if r["backend"] == name and r["repeat"] == k and r["level"] == level),
                          key=lambda r: r["t_scheduled_ns"] if r["t_scheduled_ns"] is not None else r["t_sent_ns"])
            out[(name, k)] = {"ids": [r["request_id"] for r in mine],
                              "prompt": {r["request_id"]: r["prompt_tokens"] for r in mine},
                              "offsets": rep["levels"][level]["schedule_offsets_ns"]}
    return out


def _same_everywhere(cells: dict, ids: list[str], offsets: list[int]) -> None:
    assert sorted(cells) == [(c, k) for c in COLUMNS for k in (0, 1)]
    for cell in cells.values():
        assert cell["ids"] == ids  # the same requests, in the same send order
        assert cell["offsets"] == offsets  # on the same schedule
    prompts = [cell["prompt"] for cell in cells.values()]
    assert all(p == prompts[0] for p in prompts)  # token for token the same prompt lengths


def test_a_trace_reaches_every_column_and_repeat_on_its_clock(tmp_path, tiny_model):
    rows = [{"timestamp": t, "input_length": 40 + 8 * i, "output_length": 3, "hash_ids": [1, 2 + i % 2]}
            for i, t in enumerate((0, 100, 120, 400, 420, 440, 900, 1000))]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    p = cli("run", *COMMON, "--model", str(tiny_model), "--trace", str(trace), "--trace-speedup", "4",
                "--out", str(out), "--run-id", "t")
    assert p.returncode == 0, p.stderr[-3000:]
    saved = [json.loads(x) for x in (out / "t" / "workload.jsonl").read_text().splitlines()]
    clock = [t * 250_000 for t in (0, 100, 120, 400, 420, 440, 900, 1000)]
    assert [r["send_offset_ns"] for r in saved] == clock
    _same_everywhere(_cells(out / "t", "trace"), [r["request_id"] for r in saved], clock)
    # the HTML report renders every column of the trace level
    r = cli("report", str(out / "t"), "--html")
    assert r.returncode == 0, r.stderr
    html = (out / "t" / "report.html").read_text()
    assert all(c in html for c in COLUMNS) and "trace" in html
    # the gate: a replay on the same clock is comparable (and passes); the same trace on another clock is not
    base = tmp_path / "baselines"
    assert cli("baseline", "save", str(out / "t"), "--name", "tr", "--dir", str(base)).returncode == 0
    p = cli("run", *COMMON, "--model", str(tiny_model), "--replay", str(out / "t"), "--out", str(out),
                "--run-id", "again")
    assert p.returncode == 0, p.stderr[-3000:]
    _same_everywhere(_cells(out / "again", "trace"), [r["request_id"] for r in saved], clock)
    r = cli("check", "--baseline", "tr", "--dir", str(base), str(out / "again"))
    assert r.returncode == 0 and "RESULT: PASS" in r.stdout, r.stdout + r.stderr
    # (twice as fast: any other clock is another workload; a slower one only takes longer)
    p = cli("run", *COMMON, "--model", str(tiny_model), "--trace", str(trace), "--trace-speedup", "8",
                "--out", str(out), "--run-id", "faster")
    assert p.returncode == 0, p.stderr[-3000:]
    r = cli("check", "--baseline", "tr", "--dir", str(base), str(out / "faster"))
    assert r.returncode == 2 and "different workload" in r.stderr, r.stdout + r.stderr


def test_a_dataset_reaches_every_column_and_repeat_on_one_schedule(tmp_path, tiny_model):
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"token_ids": list(range(10, 10 + 4 * (i + 1))), "output_len": 2 + i % 3})
                            + "\n" for i in range(6)), encoding="utf-8")
    out = tmp_path / "out"
    p = cli("run", *COMMON, "--model", str(tiny_model), "--dataset", str(data), "--rate", "40",
                "--arrival", "gamma", "--burstiness", "3", "--out", str(out), "--run-id", "d")
    assert p.returncode == 0, p.stderr[-3000:]
    saved = [json.loads(x) for x in (out / "d" / "workload.jsonl").read_text().splitlines()]
    assert [len(r["prompt_token_ids"]) for r in saved] == [4, 8, 12, 16, 20, 24]
    cells = _cells(out / "d", "r40-g3")
    _same_everywhere(cells, [r["request_id"] for r in saved], offsets_ns(6, 40.0, 0, "gamma", 3.0))
    assert all(cell["prompt"][r["request_id"]] == len(r["prompt_token_ids"]) for cell in cells.values() for r in saved)

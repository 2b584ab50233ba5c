"""``compare run --dataset FILE`` on the fake engine (orchestration only): the file's prompts are
the request list saved in workload.jsonl; a malformed file is one line, exit 2, nothing written."""
from __future__ import annotations

import json

from tests.conftest import cli


def test_dataset_prompts_become_the_request_list(tmp_path, tiny_model):
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hello there", "output_len": 3}\n{"token_ids": [11, 12, 13]}\n', encoding="utf-8")
    out = tmp_path / "out"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--dataset", str(data),
                "--output-len", "5", "--concurrency", "1", "--warmup", "0", "--out", str(out), "--run-id", "d")
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "d" / "workload.jsonl").read_text().splitlines()]
    assert [(r.get("prompt_text"), r.get("prompt_token_ids"), r["max_tokens"]) for r in rows] == [
        ("hello there", None, 3), (None, [11, 12, 13], 5)]
    assert json.loads((out / "d" / "run.json").read_text())["backends"]["fake"]["levels"]["c1"]["ok"] == 2


def test_csv_missing_column_is_one_line_exit_2_nothing_written(tmp_path, tiny_model):
    data = tmp_path / "p.csv"
    data.write_text("text\nx\n", encoding="utf-8")
    out = tmp_path / "out"
    p = cli("run", "--backends", "fake", "--model", str(tiny_model), "--dataset", str(data),
                "--out", str(out), "--run-id", "d")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{data}:1: missing column" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (out / "d").exists()

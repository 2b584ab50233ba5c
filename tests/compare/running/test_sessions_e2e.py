"""Multi-turn sessions on real engines: vLLM and llama.cpp, each with prefix caching on and off
(``--vary prefix_caching=true,false``). Every column gets the same prompts (the engines count the
same prompt tokens per turn, equal to the ids in workload.jsonl); with caching on, the shared
history of later turns shows up as the engine's own prefix-cache hits, with it off as none."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine

WORKLOAD = ("name: chat\nseed: 1\nsessions:\n  num_sessions: 2\n  turns: {value: 3}\n  system_prompt_tokens: 256\n"
            "  user_tokens: {value: 16}\n  reply_tokens: {value: 8}\n")


def test_sessions_prefix_caching_on_and_off_on_vllm_and_llamacpp(tiny_model, tmp_path):
    wl = tmp_path / "sessions.yaml"
    wl.write_text(WORKLOAD)
    r = run_cli("run", "--backends", "vllm,llamacpp", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--workload", str(wl), "--vary", "prefix_caching=true,false", "--concurrency", "1", "--warmup", "1",
                "--quality", "off", "--out", str(tmp_path), "--run-id", "s", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "TTFT p50 by turn" in r.stdout and "prefix hit" in r.stdout
    d = tmp_path / "s"
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    cols = run["backends"]
    assert len(cols) == 4, list(cols)
    for name, b in cols.items():
        level = b["levels"]["c1"]
        s = level["sessions"]
        assert s["completed"] == 2 and [t["turn"] for t in s["turns"]] == [0, 1, 2], (name, s)
        hit = level["prefix_cache"]["hit_rate"]
        if "prefix_caching=true" in name:
            assert hit is not None and hit > 0.3, (name, level["prefix_cache"])  # the history is reused
        else:
            assert not hit, (name, level["prefix_cache"])
    # the same prompt, token for token: every engine counted the ids workload.jsonl holds
    ids = {json.loads(x)["request_id"]: len(json.loads(x)["prompt_token_ids"])
           for x in (d / "workload.jsonl").read_text().splitlines()}
    assert len(ids) == 6
    counted = defaultdict(dict)
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["level"] == "c1":
            counted[rec["request_id"]][rec["backend"]] = rec["prompt_tokens"]
    assert set(counted) == set(ids)
    for rid, by in counted.items():
        assert len(by) == 4 and set(by.values()) == {ids[rid]}, (rid, by, ids[rid])

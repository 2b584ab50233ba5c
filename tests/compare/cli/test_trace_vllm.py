"""A Mooncake trace with shared hash_ids replayed on a real vLLM server (the session's `vllm serve`
of the tiny model, prefix caching on as vLLM's default, read through its /metrics): the trace's
prefix sharing reaches the engine's cache (a non-zero hit rate over the level). The in-process
engine's own prefix-cache counters are read in test_sessions_e2e.py and test_breakdown_e2e.py."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


@pytest.mark.engine
def test_mooncake_shared_hash_ids_hit_the_prefix_cache(tmp_path, tiny_model, served_vllm_url):
    # the tiny model's context is 512 tokens: each prompt is the first 300 tokens of block 1 or 2
    rows = [{"timestamp": 50 * i, "input_length": 300, "output_length": 4, "hash_ids": [1 + i % 2]}
            for i in range(6)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    backend = f"openai@{served_vllm_url}"
    # --tokenizer: the trace's blocks are token ids, sent as such
    p = run_cli("run", "--backends", backend, "--tokenizer", str(tiny_model), "--trace", str(trace),
                "--warmup", "0", "--out", str(out), "--run-id", "t", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    level = json.loads((out / "t" / "run.json").read_text())["backends"][backend]["levels"]["trace"]
    assert level["ok"] == 6
    pc = level["prefix_cache"]
    assert pc and pc.get("hit_rate") is not None and pc["hit_rate"] > 0.3, pc

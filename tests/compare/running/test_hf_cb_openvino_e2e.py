"""transformers' continuous batching and OpenVINO GenAI on one workload, through `compare run`.

The same seeded token-id prompts reach both engines; in fp32 both produce transformers' greedy
tokens, so they agree request by request at c1 and c4; both report their own token stamps.
"""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine


def test_hf_cb_and_openvino_serve_the_same_greedy_tokens(tiny_model, tmp_path):
    r = run_cli("run", "--backends", "hf-cb,openvino", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--native", "hf-cb.num_threads=1", "--num-requests", "6", "--input-len", "32",
                "--output-len", "12", "--concurrency", "1,4", "--out", str(tmp_path), "--run-id", "cb")
    assert r.returncode == 0, r.stderr[-3000:]
    d = tmp_path / "cb"
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    desc = run["backends"]["hf-cb"]["describe"]
    assert desc["framework"] == "transformers-cb"
    resolved = desc["native_config"]["resolved"]
    assert resolved["kv_cache_tokens"] == (64 << 20) // 2048 and resolved["torch_num_threads"] == 1
    by = defaultdict(dict)
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["error_kind"] is None
        by[(rec["level"], rec["request_id"])][rec["backend"]] = rec
    assert len(by) == 12
    for pair in by.values():
        h, o = pair["hf-cb"], pair["openvino"]
        assert h["prompt_tokens"] == o["prompt_tokens"]  # the same prompt reached both engines
        assert len(h["token_ids"]) == len(o["token_ids"]) == 12
        assert h["token_ids"] == o["token_ids"]
    for b in ("hf-cb", "openvino"):  # engine-side stamps reached the results
        assert run["backends"][b]["levels"]["c4"]["engine_output_tok_s"] > 0
    assert "hf-cb" in r.stdout and "openvino" in r.stdout

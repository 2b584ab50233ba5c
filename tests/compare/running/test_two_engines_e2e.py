"""Three independent real serving engines on one workload: vLLM, OpenVINO GenAI and transformers'
continuous batching (hf-cb), CPU.

The same seeded requests reach every engine (token-id prompts, checked equal); in fp32 each must
produce transformers' greedy tokens, so the engines' tokens agree request by request at c1 and c4;
each reports its own token stamps; the verdict and the report compare them like any backends.
"""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine
ENGINES = ("vllm", "openvino", "hf-cb")


@pytest.fixture(scope="module")
def engines(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("engines")
    r = run_cli("run", "--backends", ",".join(ENGINES), "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--native", "hf-cb.num_threads=1", "--num-requests", "8", "--input-len", "32", "--output-len", "16",
                "--concurrency", "1,4", "--out", str(out), "--run-id", "ab")
    assert r.returncode == 0, r.stderr[-3000:]
    return out / "ab", r


def test_identical_requests_and_greedy_tokens_on_every_engine(engines):
    d, _ = engines
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    assert {b: run["backends"][b]["describe"]["framework"] for b in ENGINES} == {
        "vllm": "vllm", "openvino": "openvino-genai", "hf-cb": "transformers-cb"}
    resolved = run["backends"]["hf-cb"]["describe"]["native_config"]["resolved"]
    assert resolved["kv_cache_tokens"] == (64 << 20) // 2048 and resolved["torch_num_threads"] == 1
    by = defaultdict(dict)
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["error_kind"] is None
        by[(rec["level"], rec["request_id"])][rec["backend"]] = rec
    assert len(by) == 16
    for group in by.values():
        v = group["vllm"]
        for other in ("openvino", "hf-cb"):
            o = group[other]
            assert v["prompt_tokens"] == o["prompt_tokens"]  # the same prompt reached both engines
            assert len(v["token_ids"]) == len(o["token_ids"]) == 16
            assert v["token_ids"] == o["token_ids"], other


def test_the_verdict_and_report_compare_the_engines(engines):
    d, r = engines
    assert all(b in r.stdout for b in ENGINES)
    rep = run_cli("report", str(d))  # Markdown on stdout
    assert rep.returncode == 0, rep.stderr
    assert all(b in rep.stdout for b in ENGINES)
    # every engine reports its own token hand-over stamps, so delivery lag is measured for each
    run = json.loads((d / "run.json").read_text())
    for b in ENGINES:
        assert run["backends"][b]["levels"]["c4"]["engine_output_tok_s"] > 0

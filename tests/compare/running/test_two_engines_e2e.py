"""Two independent real serving engines on one workload: vLLM and OpenVINO GenAI (CPU).

The same seeded requests reach both engines (token-id prompts, checked equal); in fp32 both must
produce transformers' greedy tokens, so the two engines' tokens agree request by request; the
verdict and the report compare them like any two backends.
"""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def two_engines(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("two-engines")
    r = run_cli("run", "--backends", "vllm,openvino", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--num-requests", "8", "--input-len", "32", "--output-len", "16", "--concurrency", "1,4",
                "--out", str(out), "--run-id", "ab")
    assert r.returncode == 0, r.stderr[-3000:]
    return out / "ab", r


def test_identical_requests_and_greedy_tokens_on_both_engines(two_engines):
    d, _ = two_engines
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    assert {b: run["backends"][b]["describe"]["framework"] for b in ("vllm", "openvino")} == {
        "vllm": "vllm", "openvino": "openvino-genai"}
    by = defaultdict(dict)
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["error_kind"] is None
        by[(rec["level"], rec["request_id"])][rec["backend"]] = rec
    assert len(by) == 16
    for pair in by.values():
        v, o = pair["vllm"], pair["openvino"]
        assert v["prompt_tokens"] == o["prompt_tokens"]  # the same prompt reached both engines
        assert len(v["token_ids"]) == len(o["token_ids"]) == 16
        assert v["token_ids"] == o["token_ids"]


def test_the_verdict_and_report_compare_the_two_engines(two_engines):
    d, r = two_engines
    assert "openvino" in r.stdout and "vllm" in r.stdout
    rep = run_cli("report", str(d))  # Markdown on stdout
    assert rep.returncode == 0, rep.stderr
    assert "openvino" in rep.stdout and "vllm" in rep.stdout
    # both engines report their own token hand-over stamps, so delivery lag is measured for both
    run = json.loads((d / "run.json").read_text())
    for b in ("vllm", "openvino"):
        assert run["backends"][b]["levels"]["c4"]["engine_output_tok_s"] > 0

"""llama.cpp beside vLLM and OpenVINO GenAI on one workload through `compare run`, and its GGUF
quantizations read back from the server.

The same seeded token-id prompts reach the three engines; in fp32 (llama.cpp: the f32 GGUF with an
f32 KV cache) all three produce transformers' greedy tokens, so they agree request by request at
c1 and c4. Q8_0 / Q4_K_M: the type the server loaded is read from its log and verified against the
request (compare/quality/verify.py).
"""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine
ENGINES = ("vllm", "openvino", "llamacpp")


def test_three_engines_serve_the_same_greedy_tokens(tiny_model, tmp_path):
    r = run_cli("run", "--backends", ",".join(ENGINES), "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--num-requests", "6", "--input-len", "32", "--output-len", "16", "--concurrency", "1,4",
                "--out", str(tmp_path), "--run-id", "three")
    assert r.returncode == 0, r.stderr[-3000:]
    d = tmp_path / "three"
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    by = defaultdict(dict)
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["error_kind"] is None
        by[(rec["level"], rec["request_id"])][rec["backend"]] = rec
    assert len(by) == 12
    unknown = 0
    for recs in by.values():
        v = recs["vllm"]
        for other in ("openvino", "llamacpp"):
            o = recs[other]
            assert v["prompt_tokens"] == o["prompt_tokens"]  # the same prompt reached every engine
            assert len(o["token_ids"]) == 16
            # llama-server does not stream the id of a token that ends inside a UTF-8 character
            # (backends/llamacpp/protocol.py): -1 there, every other id equal
            known = [(a, b) for a, b in zip(v["token_ids"], o["token_ids"]) if b != -1]
            unknown += 16 - len(known)
            assert all(a == b for a, b in known), (other, v["request_id"], v["token_ids"], o["token_ids"])
    assert unknown < 12 * 16 // 4
    lc = run["backends"]["llamacpp"]
    assert lc["describe"]["framework"] == "llamacpp"
    assert lc["quant_verification"]["valid"] is True, lc["quant_verification"]
    sm = lc["levels"]["c4"]["server_metrics"]  # the server's own timings and counters reached the results
    assert sm["server_prefill_ms"]["count"] == 6 and sm["counters"]["llamacpp:tokens_predicted_total"] == 6 * 16
    assert "llamacpp" in r.stdout


@pytest.mark.parametrize("scheme, method, qtype", [("gguf-q8_0", "Q8_0", "q8_0"), ("gguf-q4_k_m", "Q4_K_M", None)])
def test_gguf_quantizations_are_loaded_and_verified(tiny_model, tmp_path, scheme, method, qtype):
    r = run_cli("run", "--backends", "llamacpp", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--quantization", scheme, "--num-requests", "4", "--concurrency", "2", "--input-len", "16",
                "--output-len", "8", "--out", str(tmp_path), "--run-id", "q")
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((tmp_path / "q" / "run.json").read_text())
    b = run["backends"]["llamacpp"]
    q = b["describe"]["extra"]["quantization"]
    assert q["method"] == method and q["bits_per_weight"] < 16, q
    v = b["quant_verification"]
    if qtype:
        assert q["tensor_types"].get(qtype, 0) >= 4 * 7  # 4 layers x 7 linear layers
        assert v["valid"] is True, v
    else:
        # the tiny model's 128-wide rows are not a multiple of Q4_K's 256-weight super-blocks:
        # llama-quantize falls back to q5_0 / q8_0 for most tensors, ~7 bits a weight. The run is
        # labelled Q4_K_M (the server says so) but is not 4-bit: reported invalid, with the reason
        assert q["tensor_types"].get("q5_0", 0) > q["tensor_types"].get("q4_k", 0), q
        assert v["valid"] is False and any("4-bit scheme" in p for p in v["problems"]), v
    assert b["levels"]["c2"]["ok"] == 4

"""Three more independent real serving engines on one workload: OpenVINO GenAI, transformers'
continuous batching (hf-cb) and llama.cpp, CPU (one run: each engine starts once for every test here).

The same seeded requests reach every engine (token-id prompts, checked equal); in fp32 each must
produce transformers' greedy tokens (llama.cpp: the f32 GGUF with an f32 KV cache), so the engines'
tokens agree request by request at c1 and c4, hf-cb (transformers itself) the reference; each
reports its own token stamps; the verdict and the report compare them like any backends. vLLM
against transformers (the same greedy tokens, its own token stamps) is the shared run's
(tests/conftest.py real_run, test_engines_e2e.py): a vLLM start here would assert nothing more.
"""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.conftest import TINY_SPEC_ARGS, run_cli

pytestmark = pytest.mark.engine
ENGINES = ("openvino", "hf-cb", "llamacpp")


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
        "openvino": "openvino-genai", "hf-cb": "transformers-cb", "llamacpp": "llamacpp"}
    resolved = run["backends"]["hf-cb"]["describe"]["native_config"]["resolved"]
    assert resolved["kv_cache_tokens"] == (64 << 20) // 2048 and resolved["torch_num_threads"] == 1
    by = defaultdict(dict)
    for line in (d / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["error_kind"] is None
        by[(rec["level"], rec["request_id"])][rec["backend"]] = rec
    assert len(by) == 16
    unknown = 0
    for group in by.values():
        v = group["hf-cb"]  # transformers' own greedy tokens
        for other in ("openvino", "llamacpp"):
            o = group[other]
            assert v["prompt_tokens"] == o["prompt_tokens"]  # the same prompt reached every engine
            assert len(v["token_ids"]) == len(o["token_ids"]) == 16
            if other != "llamacpp":
                assert v["token_ids"] == o["token_ids"], other
                continue
            # llama-server does not stream the id of a token that ends inside a UTF-8 character
            # (backends/llamacpp/protocol.py): -1 there, every other id equal
            known = [(a, b) for a, b in zip(v["token_ids"], o["token_ids"]) if b != -1]
            unknown += 16 - len(known)
            assert all(a == b for a, b in known), (other, v["request_id"], v["token_ids"], o["token_ids"])
    assert unknown < 16 * 16 // 4


def test_llamacpp_reports_its_loaded_weights_and_server_counters(engines):
    d, r = engines
    run = json.loads((d / "run.json").read_text())
    lc = run["backends"]["llamacpp"]
    assert lc["describe"]["framework"] == "llamacpp"
    assert lc["quant_verification"]["valid"] is True, lc["quant_verification"]
    sm = lc["levels"]["c4"]["server_metrics"]  # the server's own timings and counters reached the results
    assert sm["server_prefill_ms"]["count"] == 8 and sm["counters"]["llamacpp:tokens_predicted_total"] == 8 * 16
    assert "llamacpp" in r.stdout


def test_the_verdict_and_report_compare_the_engines(engines):
    d, r = engines
    assert all(b in r.stdout for b in ENGINES)
    rep = run_cli("report", str(d))  # Markdown on stdout
    assert rep.returncode == 0, rep.stderr
    assert all(b in rep.stdout for b in ENGINES)
    # every in-process engine reports its own token hand-over stamps, so delivery lag is measured for each
    run = json.loads((d / "run.json").read_text())
    for b in ("openvino", "hf-cb"):  # in-process engines; llama-server's are its own timings (above)
        assert run["backends"][b]["levels"]["c4"]["engine_output_tok_s"] > 0

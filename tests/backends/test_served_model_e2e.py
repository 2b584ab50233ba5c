"""`compare run` against REAL running servers without --model: vLLM's OpenAI server (`vllm serve`
of the tiny model under another name, so nothing here can guess it) and the TGI-protocol test double.
The run's model is what each server says it serves; prompts are text unless --tokenizer is given;
token counts come from the server; the embedded tiny model is never built or used by the run."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import SERVED_NAME, run_cli

pytestmark = pytest.mark.engine

@pytest.fixture
def vllm_url(served_vllm_url):
    return served_vllm_url


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


def _run(tmp_path: Path, backend: str, *extra: str) -> tuple[dict, list[dict], list[dict], str]:
    cache = tmp_path / "cache"  # where the tiny model would be built: it must stay empty
    p = run_cli("run", "--backends", backend, "--num-requests", "4", "--input-len", "24", "--output-len", "8",
                "--concurrency", "2", "--warmup", "1", *extra, "--out", str(tmp_path), "--run-id", "r",
                "--format", "json", env={"LLM_COMPARE_CACHE": str(cache)}, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "embedded tiny" not in p.stderr
    assert not cache.exists() or not any(cache.rglob("*")), "a run against a server built a model"
    d = tmp_path / "r"
    return (json.loads((d / "run.json").read_text()),
            [json.loads(x) for x in (d / "workload.jsonl").read_text().splitlines()],
            [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()], p.stderr)


def test_vllm_server_without_model_text_prompts_counted_by_the_server(vllm_url, tok, tmp_path):
    run, reqs, recs, err = _run(tmp_path, f"openai@{vllm_url}")
    assert run["spec"]["model"] == SERVED_NAME and run["spec"]["max_model_len"] == 512
    assert run["spec"]["tokenizer"] is None
    src = run["model_source"]
    assert src["source"] == f"served by {vllm_url}" and src["model"] == SERVED_NAME and src["tokenizer"] is None
    said = [x for x in err.splitlines() if SERVED_NAME in x]
    assert len(said) == 1 and "prompts are text" in said[0] and "token counts come from the server" in said[0]
    b = run["backends"][f"openai@{vllm_url}"]
    assert b["status"] == "complete" and b["describe"]["native_config"]["model"] == SERVED_NAME
    assert all("prompt_token_ids" not in r and len(r["prompt_text"].split()) == 24 for r in reqs)
    prompts = {r["request_id"]: r["prompt_text"] for r in reqs}
    assert len(recs) == 4 and all(r["error_kind"] is None for r in recs)
    for r in recs:
        # the server's usage counted the text prompt with the served model's tokenizer
        assert r["prompt_tokens"] == len(tok(prompts[r["request_id"]])["input_ids"]) > 0
        assert r["usage_completion_tokens"] == len(r["token_ids"]) == 8
    assert b["levels"]["c2"]["input_tokens"] == sum(r["prompt_tokens"] for r in recs)


def test_vllm_server_with_local_tokenizer_sends_token_ids(vllm_url, tiny_model, tmp_path):
    run, reqs, recs, err = _run(tmp_path, f"openai@{vllm_url}", "--tokenizer", str(tiny_model))
    assert run["spec"]["model"] == SERVED_NAME and run["spec"]["tokenizer"] == str(tiny_model)
    assert run["model_source"]["tokenizer"] == str(tiny_model) and run["workload"]["prompt_format"] == "token_ids"
    assert f"prompts from the tokenizer in {tiny_model}" in err
    assert all(len(r["prompt_token_ids"]) == 24 and "prompt_text" not in r for r in reqs)
    assert all(r["prompt_tokens"] == 24 and len(r["token_ids"]) == 8 for r in recs)


def test_tgi_double_without_model_records_its_model_id(tgi_url, tok, tmp_path):
    info = httpx.get(tgi_url + "/info").json()
    run, reqs, recs, _ = _run(tmp_path, f"tgi@{tgi_url}")
    assert run["spec"]["model"] == info["model_id"] and run["spec"]["max_model_len"] == info["max_total_tokens"]
    src = run["model_source"]
    assert src["source"] == f"served by {tgi_url}"
    assert src["endpoints"][0]["max_input_tokens"] == info["max_input_tokens"]
    assert run["backends"][f"tgi@{tgi_url}"]["status"] == "complete"
    prompts = {r["request_id"]: r["prompt_text"] for r in reqs}
    assert all("prompt_token_ids" not in r for r in reqs)
    assert len(recs) == 4 and all(r["error_kind"] is None for r in recs)
    for r in recs:  # details.input_length and generated_tokens: the server's counts
        assert r["prompt_tokens"] == len(tok(prompts[r["request_id"]])["input_ids"]) > 0
        assert r["usage_completion_tokens"] == len(r["token_ids"]) >= 1

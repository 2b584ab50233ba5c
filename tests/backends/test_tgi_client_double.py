"""Hugging Face's own TGI client (the `text-generation` package, the real client) against the
TGI-protocol test double: the double must accept the package's request bodies as TGI 3.3 does
("stream": true, every unset parameter sent as null, validated against TGI's OpenAPI schema), and
both of our TGI clients must get the same greedy tokens from it."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from adapters.spec import ServingSpec
from core.records import GenerationRequest, StreamEnd, TokenEvent

pytest.importorskip("text_generation")
pytestmark = pytest.mark.engine


def test_package_request_bodies_pass_the_double_as_real_tgi(tgi_url):
    """The bodies the package POSTs, sent as is: 200 with tokens, not a 422 from schema validation.
    The root is TGI's compat route (the package's own target): a stream, or a one-element array."""
    from text_generation.types import Parameters, Request

    for stream, path in ((True, "/generate_stream"), (False, "/generate"), (True, "/"), (False, "/")):
        params = Parameters(max_new_tokens=5, do_sample=False, details=True, decoder_input_details=False)
        body = Request(inputs="The capital of France is", stream=stream, parameters=params).model_dump()
        assert body["stream"] is stream and body["parameters"]["temperature"] is None  # nulls are sent
        r = httpx.post(tgi_url + path, json=body, timeout=120)
        assert r.status_code == 200, (path, r.text)
        if stream:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = [json.loads(x[5:]) for x in r.text.splitlines() if x.startswith("data:")]
            assert events and "error" not in events[-1] and events[-1]["details"]["generated_tokens"] >= 1
        else:
            answer = r.json()
            if path == "/":
                assert isinstance(answer, list) and len(answer) == 1, answer
                answer = answer[0]
            assert answer["details"]["generated_tokens"] == len(answer["details"]["tokens"]) >= 1
    r = httpx.post(tgi_url + "/", json={"inputs": "hi", "stream": "yes"}, timeout=60)
    assert r.status_code == 422  # CompatGenerateRequest.stream is a boolean


def test_text_generation_client_matches_the_stamped_reader(tgi_url):
    from backends.tgi.backend import TgiEndpoint

    req = GenerationRequest("g", 6, prompt_text="one two three four five", ignore_eos=False, temperature=0.0)

    async def tokens(client: str) -> tuple[list[int], StreamEnd, dict]:
        b = TgiEndpoint(ServingSpec(model="m", native={"tgi": {"client": client}}), "tgi@" + tgi_url,
                        target=tgi_url, metrics=None)
        async with b:
            items = [x async for x in b.stream(req)]
            once = await b.generate_once(req)
        ids = [t for x in items if isinstance(x, TokenEvent) for t in x.token_ids]
        assert isinstance(items[-1], StreamEnd)
        return ids, items[-1], once

    stamped, end_s, once_s = asyncio.run(tokens("stamped"))
    package, end_p, once_p = asyncio.run(tokens("text-generation"))
    assert stamped == package and 1 <= len(stamped) <= 6
    assert end_p.completion_tokens == end_s.completion_tokens == len(stamped)
    assert end_p.finish_reason == end_s.finish_reason
    # the single-request path (POST /generate through the package) gives the same greedy tokens
    assert once_p["token_ids"] == once_s["token_ids"] == stamped


def test_quality_probes_use_the_package_single_request_path(tgi_url):
    """compare/quality/parity.py probes a TGI backend on tgi.client=text-generation through the
    package's one non-streaming request, with the same tokens, logprobs and top-k as the stream."""
    from backends.tgi.backend import TgiEndpoint
    from compare.quality.parity import _probe

    req = GenerationRequest("q", 5, prompt_text="one two three four five", ignore_eos=True, temperature=0.0,
                            logprobs=3)

    async def probe(client: str) -> dict:
        b = TgiEndpoint(ServingSpec(model="m", native={"tgi": {"client": client}}), "tgi@" + tgi_url,
                        target=tgi_url, metrics=None)
        async with b:
            if client == "text-generation":
                async def no_stream(_req):  # the probe must not stream on this client
                    raise AssertionError("quality probe streamed")
                    yield
                b.stream = no_stream
            return await _probe(b, req, 120)

    streamed, once = asyncio.run(probe("stamped")), asyncio.run(probe("text-generation"))
    assert once["tokens"] == streamed["tokens"] and len(once["tokens"]) >= 1
    assert len(once["logprobs"]) == len(once["tokens"]) and len(once["top"]) == len(once["tokens"])
    assert once["logprobs"] == pytest.approx(streamed["logprobs"], abs=1e-4)
    assert [set(t) for t in once["top"]] == [set(t) for t in streamed["top"]] and all(len(t) == 3 for t in once["top"])

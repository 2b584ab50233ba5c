"""TGI's native protocol, end to end: our client <-> the TGI protocol TEST DOUBLE (real vLLM engine),
both sides checked against TGI's OpenAPI spec (tests/fixtures/specs/tgi-3.3-openapi.json).

One engine start: the session's double (tests/conftest.py ``tgi_url``), which other TGI tests share.
"""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from adapters.spec import ServingSpec
from core.records import GenerationRequest
from backends.http import tgi
from backends.http_backends import TgiEndpointBackend
from compare.running.executor import run_level, run_one
from compare.workload.schedule import LoadLevel
from tests.doubles.tgi_protocol_server import schema_validator

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def openapi(fixtures_dir):
    return json.loads((fixtures_dir / "specs" / "tgi-3.3-openapi.json").read_text())


def _valid(openapi, name, obj):
    errs = list(schema_validator(openapi, name).iter_errors(obj))
    assert not errs, f"{name}: {errs[0].message} in {obj}"


def test_info_health_and_capabilities(tgi_url, openapi, tiny_model):
    info = httpx.get(tgi_url + "/info").json()
    _valid(openapi, "Info", info)
    assert httpx.get(tgi_url + "/health").status_code == 200
    caps = TgiEndpointBackend(ServingSpec(model=str(tiny_model)), "tgi@" + tgi_url, target=tgi_url).capabilities
    assert caps.forced_output_length is False and caps.token_id_prompts is False


def test_our_requests_match_the_spec(openapi):
    for r in (GenerationRequest("a", 8, prompt_text="x"),
              GenerationRequest("b", 8, prompt_text="x", temperature=0.8, top_p=1.0, seed=0),
              GenerationRequest("c", 8, prompt_text="x", temperature=0.8, top_p=0.5, seed=7, logprobs=2)):
        _valid(openapi, "GenerateRequest", tgi.generate_payload(r))


def test_stream_through_our_client(tgi_url, openapi, tiny_model):
    raws = []

    async def go():
        b = TgiEndpointBackend(ServingSpec(model=str(tiny_model)), "tgi@" + tgi_url, target=tgi_url)
        b.raw_observer = lambda rid, raw: raws.append(raw)
        async with b:
            req = GenerationRequest("t1", 16, prompt_token_ids=tuple(range(40, 72)), ignore_eos=False)
            return await run_one(b, req, "c1", 300), b.describe()

    rec, desc = asyncio.run(go())
    assert rec.ok, rec.error
    for raw in raws:  # every event the double sent is a valid StreamResponse
        _valid(openapi, "StreamResponse", json.loads(raw.data))
    last = json.loads(raws[-1].data)
    assert last["details"]["generated_tokens"] == len(rec.token_ids) == rec.usage_completion_tokens
    assert rec.finish_reason in ("length", "stop") and rec.prompt_tokens == last["details"]["input_length"] > 0
    assert len(rec.event_times_ns) == len(rec.token_ids)  # TGI: one event per token
    assert desc.version.startswith("3.3")


def test_greedy_stream_equals_generate(tgi_url, openapi):
    body = {"inputs": "def main():", "parameters": {"max_new_tokens": 12, "do_sample": False}}
    gen = httpx.post(tgi_url + "/generate", json=body, timeout=300)
    assert gen.status_code == 200
    _valid(openapi, "GenerateResponse", gen.json())
    ids = []
    with httpx.stream("POST", tgi_url + "/generate_stream", json=body, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                ids.append(json.loads(line[5:])["token"]["id"])
    assert ids == [t["id"] for t in gen.json()["details"]["tokens"]]


@pytest.mark.parametrize("params,needle", [({"temperature": 0.0}, "temperature"), ({"top_p": 1.0}, "top_p"),
                                           ({"max_new_tokens": 100000}, "max_new_tokens")])
def test_tgi_quirks_rejected_like_tgi(tgi_url, openapi, params, needle):
    body = {"inputs": "hello", "parameters": {"max_new_tokens": 4, **params}}
    r = httpx.post(tgi_url + "/generate_stream", json=body, timeout=60)
    assert r.status_code == 200  # TGI streams its errors
    err = json.loads(r.text.strip()[len("data:"):])
    _valid(openapi, "ErrorResponse", err)
    assert err["error_type"] == "validation" and needle in err["error"]
    g = httpx.post(tgi_url + "/generate", json=body, timeout=60)
    assert g.status_code == 422 and g.json()["error_type"] == "validation"
    assert httpx.post(tgi_url + "/generate", json={"parameters": {}}, timeout=60).status_code == 422


def test_overload_is_typed_and_the_level_goes_on(tgi_url, tiny_model):
    # 8 concurrent requests against the double's --max-concurrent-requests 3 (tests/conftest.py)
    async def go():
        b = TgiEndpointBackend(ServingSpec(model=str(tiny_model)), "tgi@" + tgi_url, target=tgi_url)
        async with b:
            await b.on_level_start("c8")
            reqs = [GenerationRequest(f"o{i}", 48, prompt_text="import os\n" * 8, ignore_eos=False) for i in range(8)]
            out = await run_level(b, reqs, LoadLevel("concurrency", 8), seed=0, timeout_s=300, max_errors=8)
            return out, await b.on_level_end("c8")

    out, metrics = asyncio.run(go())
    kinds = [r.error_kind for r in out.records]
    assert len(out.records) == 8 and out.aborted is None
    assert kinds.count("overloaded") >= 1 and kinds.count(None) >= 1, kinds
    assert metrics["available"] and metrics["counters"]["tgi_request_count_total"] == 8  # the parser names counters *_total
    assert metrics["counters"].get("tgi_request_success_total") == kinds.count(None)
    assert metrics["server_queue_ms"]["count"] == kinds.count(None)

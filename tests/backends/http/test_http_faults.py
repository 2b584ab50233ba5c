"""Every transport fault becomes ONE typed error on its request record; the run goes on.

Real loopback HTTP servers that misbehave on purpose (tests/http_util.py); the client is the
exact backend + executor path of ``compare run``.
"""
from __future__ import annotations

import asyncio
import json
import socket

import pytest

from core.records import GenerationRequest
from backends.http_backends import HttpStreamBackend
from compare.running.executor import run_level, run_one
from compare.workload.schedule import LoadLevel
from tests.http_util import RawHttpServer, silent_response, sse_response, status_response

REQ = GenerationRequest("r", 4, prompt_token_ids=(1, 2, 3))
TOKEN = b'data: {"choices":[{"index":0,"text":"a","token_ids":[5],"finish_reason":null}]}\n\n'


async def _no_probe() -> None:
    return None


# http:// goes through our transport (raw requests, events parsed on arrival); fast_transport=False
# is httpx's own transport (what https:// uses): same SSE reader, same error kinds
BOTH = pytest.mark.parametrize("fast", [True, False], ids=["our-transport", "httpx-transport"])


async def _one(handler, protocol: str = "openai", timeout_s: float = 10, read_timeout_s: float = 600,
               fast: bool = True):
    async with RawHttpServer(handler) as s:
        b = HttpStreamBackend(None, "t", protocol=protocol, base_url=s.url, model="m", metrics=None,
                              read_timeout_s=read_timeout_s, fast_transport=fast)
        b._probe = _no_probe
        async with b:
            req = REQ if protocol != "tgi" else GenerationRequest("r", 4, prompt_text="hi")
            return await run_one(b, req, "c1", timeout_s)


@pytest.mark.parametrize("status,kind", [("422 Unprocessable Entity", "validation"), ("424 Failed Dependency", "generation"),
                                         ("429 Too Many Requests", "overloaded"), ("404 Not Found", "http_4xx"),
                                         ("500 Internal Server Error", "http_5xx"), ("503 Service Unavailable", "http_5xx")])
@BOTH
def test_http_status_kinds(status, kind, fast):
    body = json.dumps({"error": "Model is overloaded", "error_type": "overloaded"}).encode()
    rec = asyncio.run(_one(status_response(status, body), fast=fast))
    assert rec.error_kind == kind and "Model is overloaded" in rec.error and not rec.ok


def test_connection_refused():
    with socket.socket() as s:  # a port that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go():
        b = HttpStreamBackend(None, "t", protocol="openai", base_url=f"http://127.0.0.1:{port}", model="m", metrics=None)
        b._probe = _no_probe
        async with b:
            return await run_one(b, REQ, "c1", 10)

    rec = asyncio.run(go())
    # past the start-up probe a refusal means the server is gone: the level stops on it
    assert rec.error_kind == "engine_dead" and "connection refused" in rec.error


@BOTH
def test_server_dies_mid_stream(fast):
    rec = asyncio.run(_one(sse_response([TOKEN, TOKEN], close_early=True), fast=fast))
    assert rec.error_kind == "disconnected" and len(rec.token_ids) == 2  # partial tokens are kept


def test_stream_ends_without_done_is_an_error():
    rec = asyncio.run(_one(sse_response([TOKEN])))  # clean end, but no finish reason / [DONE]
    assert rec.error_kind == "disconnected"


@BOTH
def test_cut_inside_an_event(fast):
    rec = asyncio.run(_one(sse_response([TOKEN, b'data: {"choi']), fast=fast))
    assert rec.error_kind == "disconnected"


@BOTH
def test_malformed_event_and_wrong_content_type(fast):
    rec = asyncio.run(_one(sse_response([b"data: {not json\n\n"]), fast=fast))
    assert rec.error_kind == "protocol"
    rec = asyncio.run(_one(status_response("200 OK", b'{"text": "not a stream"}'), fast=fast))
    assert rec.error_kind == "protocol" and "text/event-stream" in rec.error


def test_timeouts_never_hang():
    rec = asyncio.run(_one(silent_response(), timeout_s=0.5))  # whole-request timeout (executor)
    assert rec.error_kind == "timeout"
    rec = asyncio.run(_one(silent_response(), read_timeout_s=0.3))  # silent socket (read timeout)
    assert rec.error_kind == "timeout"


@BOTH
def test_timeouts_keep_the_tokens_received_before_them(fast):
    """Events reach the executor in batches (at the end, a full batch or a slow flush): a timeout
    mid-stream must still hand over every token that arrived before it."""
    async def two_then_silence(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"".join(b"%x\r\n%b\r\n" % (len(TOKEN), TOKEN) for _ in range(2)))
        await writer.drain()
        await asyncio.sleep(30)

    rec = asyncio.run(_one(two_then_silence, timeout_s=0.5, fast=fast))  # the executor's whole-request timeout
    assert rec.error_kind == "timeout" and rec.token_ids == (5, 5) and len(rec.event_times_ns) == 2
    rec = asyncio.run(_one(two_then_silence, read_timeout_s=0.3, fast=fast))  # the transport's read timeout
    assert rec.error_kind == "timeout" and rec.token_ids == (5, 5)


@BOTH
def test_tgi_error_inside_200_stream(fast):
    """TGI sends validation/overload errors as events of a 200 stream."""
    ev = b'data:{"error":"Input validation error: `temperature` must be strictly positive","error_type":"validation"}\n\n'
    rec = asyncio.run(_one(sse_response([ev]), protocol="tgi", fast=fast))
    assert rec.error_kind == "validation" and "temperature" in rec.error


def test_level_continues_and_counts_failures_by_kind():
    """Half the requests fail: the level finishes, every request has a record, errors are counted."""
    n = {"i": 0}

    async def flaky(reader, writer):
        n["i"] += 1
        if n["i"] % 2:
            await status_response("429 Too Many Requests", b'{"error":"busy"}')(reader, writer)
        else:
            done = b'data: {"choices":[{"index":0,"text":"b","token_ids":[6],"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
            await sse_response([TOKEN, done])(reader, writer)

    async def go():
        async with RawHttpServer(flaky) as s:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=s.url, model="m", metrics=None)
            b._probe = _no_probe
            async with b:
                reqs = [GenerationRequest(f"r{i}", 2, prompt_token_ids=(1,)) for i in range(8)]
                return await run_level(b, reqs, LoadLevel("concurrency", 2), seed=0, timeout_s=10, max_errors=8)

    out = asyncio.run(go())
    kinds = sorted(r.error_kind or "ok" for r in out.records)
    assert len(out.records) == 8 and kinds == ["ok"] * 4 + ["overloaded"] * 4 and out.aborted is None


def test_unreachable_endpoint_fails_start_with_one_line():
    from core.errors import BackendStartError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go():
        async with HttpStreamBackend(None, "openai@x", protocol="openai", base_url=f"http://127.0.0.1:{port}"):
            pass

    with pytest.raises(BackendStartError, match="cannot reach .* start the server or fix the URL"):
        asyncio.run(go())


# -------------------------------------------------------------- malformed content: parsing is total
DONE = b'data: {"choices":[{"index":0,"text":"b","token_ids":[6],"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'


def _ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@pytest.mark.parametrize("event,says", [
    (_ev({"choices": "x"}), "choices must be a list of objects"),
    (_ev({"choices": [{"text": "abc", "token_ids": "abc"}]}), "token_ids must be a list of integers"),
    (_ev({"choices": [{"text": "a", "token_ids": [True]}]}), "token_ids must be a list of integers"),
    (_ev({"choices": [{"text": "a", "token_ids": [1.5]}]}), "token_ids must be a list of integers"),
    (_ev({"choices": [{"text": 5, "token_ids": [1]}]}), "text must be a string"),
    (_ev({"choices": [{"text": "a", "token_ids": [1], "finish_reason": 3}]}), "finish_reason must be a string"),
    (_ev({"choices": [], "usage": {"prompt_tokens": "3"}}), "usage.prompt_tokens must be an integer"),
    (_ev({"choices": [{"text": "a", "logprobs": {"token_logprobs": ["x"]}}]}), "must be a number"),
    (_ev({"choices": [{"text": "a", "logprobs": 7}]}), "logprobs must be an object"),
    (b'data: {"choices":[{"text":"\xff\xfe","token_ids":[1]}]}\n\n', "not UTF-8"),
    (b'id: \xff\ndata: {"choices":[]}\n\n', "not UTF-8"),
])
@BOTH
def test_malformed_events_fail_the_request_as_protocol_errors(event, says, fast):
    """Every malformed event, encoding or type fails its request (protocol) with the offending
    bytes quoted; the tokens before it are kept; nothing raises out of the client."""
    rec = asyncio.run(_one(sse_response([TOKEN, event, DONE]), fast=fast))
    assert rec.error_kind == "protocol" and says in rec.error, rec.error
    assert rec.token_ids == (5,)  # what came before the bad event
    if b"\xff" in event:
        assert "\\xff" in rec.error  # the offending bytes, quoted


@BOTH
def test_one_read_with_a_good_and_a_non_utf8_event(fast):
    """Both events in one chunk (one read): the good one is kept, the bad one fails the request."""
    rec = asyncio.run(_one(sse_response([TOKEN + b"data: \xc3\x28\n\n" + DONE]), fast=fast))
    assert rec.error_kind == "protocol" and "not UTF-8" in rec.error and rec.token_ids == (5,)


@BOTH
def test_the_quoted_event_is_cut_to_200_bytes(fast):
    big = _ev({"choices": [{"text": "x" * 2000, "token_ids": "abc"}]})
    rec = asyncio.run(_one(sse_response([big]), fast=fast))
    assert rec.error_kind == "protocol" and "x" * 150 in rec.error and "x" * 300 not in rec.error
    assert rec.error.endswith("...") and len(rec.error) < 500


@pytest.mark.parametrize("event,says", [
    (b'data:{"token":{"id":"5","text":"a","logprob":-1}}\n\n', "token.id must be an integer"),
    (b'data:{"token":{"id":5,"text":"a","logprob":"x"}}\n\n', "token.logprob must be a number"),
    (b'data:{"token":{"id":5,"text":"a"},"details":{"generated_tokens":"2"},"generated_text":"a"}\n\n',
     "details.generated_tokens must be an integer"),
    (b'data:{"token":{"id":5,"text":"\xe9"}}\n\n', "not UTF-8"),
])
def test_malformed_tgi_events(event, says):
    rec = asyncio.run(_one(sse_response([event]), protocol="tgi"))
    assert rec.error_kind == "protocol" and says in rec.error, rec.error


def _raw(wire: bytes):
    async def handler(reader, writer):
        writer.write(wire)
        await writer.drain()
    return handler


@pytest.mark.parametrize("wire", [
    b"HTTP/1.1 OK\r\ncontent-type: text/event-stream\r\n\r\n",  # no status code
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n" + TOKEN,
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: many\r\n\r\n" + TOKEN,
])
def test_malformed_http_responses_are_protocol_errors(wire):
    rec = asyncio.run(_one(_raw(wire), timeout_s=5))
    assert rec.error_kind == "protocol" and "malformed HTTP response" in rec.error, rec.error


def test_a_malformed_stream_fails_only_its_request_and_the_level_goes_on():
    """Concurrent streams on one client (one receive thread, when built): the bad ones fail as
    protocol errors, every other stream completes with its tokens."""
    n = {"i": 0}

    async def mixed(reader, writer):
        n["i"] += 1
        bad = [b'data: {"choices":"x"}\n\n', b"data: \xff\xff\n\n", _ev({"choices": [{"token_ids": "abc"}]})]
        await sse_response([TOKEN, bad[n["i"] % 3] if n["i"] % 2 else TOKEN, DONE], delay_s=0.01)(reader, writer)

    async def go():
        async with RawHttpServer(mixed) as s:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=s.url, model="m", metrics=None)
            b._probe = _no_probe
            async with b:
                reqs = [GenerationRequest(f"r{i}", 2, prompt_token_ids=(1,)) for i in range(12)]
                return await run_level(b, reqs, LoadLevel("concurrency", 6), seed=0, timeout_s=10, max_errors=12)

    out = asyncio.run(go())
    ok = [r for r in out.records if r.ok]
    bad = [r for r in out.records if not r.ok]
    assert len(out.records) == 12 and len(ok) == 6 and len(bad) == 6 and out.aborted is None
    assert all(r.error_kind == "protocol" for r in bad) and all(r.token_ids == (5, 5, 6) for r in ok)

"""The shared SSE reader and the wire protocols, over real HTTP on loopback (no engine)."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from core.records import GenerationRequest, TokenEvent
from backends.http import openai, tgi
from backends.http.protocol import Done, Error
from backends.http.sse import RawEvent, post_events
from backends.http.transport import StreamingTransport
from backends.http_backends import HttpStreamBackend
from compare.running.executor import run_one
from compare.analysis.metrics import itls_ns
from tests.http_util import RawHttpServer, sse_response


# both ways bytes reach the one SseFramer: httpx's transport (framed from aiter_raw chunks) and ours
# (framed inside data_received, events handed over in batches): same events, same stamping rule
TRANSPORTS = pytest.mark.parametrize("ours", [False, True], ids=["httpx-transport", "our-transport"])


async def _events(server: RawHttpServer, ours: bool = False) -> list[RawEvent]:
    async with httpx.AsyncClient(base_url=server.url, transport=StreamingTransport() if ours else None) as c:
        return [ev async for ev in post_events(c, "/x", {})]


@TRANSPORTS
def test_events_split_anywhere_crlf_comments_multiline(ours):
    body = (b": keep-alive\r\n\r\nid: 7\r\ndata: {\"a\": 1}\r\n\r\n"
            b"event: note\ndata:line1\ndata: line2\n\n: only a comment\n\ndata: last\n\n")
    # split the body into 1..5-byte pieces: a parser that assumes whole events breaks here
    chunks, i = [], 0
    while i < len(body):
        n = 1 + i % 5
        chunks.append(body[i:i + n])
        i += n

    async def go():
        async with RawHttpServer(sse_response(chunks, delay_s=0.0)) as s:
            return await _events(s, ours)

    evs = asyncio.run(go())
    assert [(e.data, e.event, e.id) for e in evs] == [('{"a": 1}', None, "7"), ("line1\nline2", "note", None),
                                                      ("last", None, None)]


@TRANSPORTS
def test_stamp_is_first_byte_of_event(ours):
    """An event split over two writes 150 ms apart is stamped when its FIRST byte arrived."""
    gap = 0.15

    async def go():
        async with RawHttpServer(sse_response([b"data: hel", b"lo\n\ndata: next\n\n"], delay_s=gap)) as s:
            return await _events(s, ours)

    evs = asyncio.run(go())
    assert [e.data for e in evs] == ["hello", "next"]
    # "hello" started in the first chunk, "next" entirely in the second
    assert evs[1].t_ns - evs[0].t_ns >= gap * 1e9 * 0.8


def test_multi_token_event_counts_every_token_and_itl_goes_to_the_first():
    chunk = {"choices": [{"index": 0, "text": "abc", "token_ids": [5, 6, 7], "finish_reason": None}]}
    last = {"choices": [{"index": 0, "text": "d", "token_ids": [8], "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    frames = [f"data: {json.dumps(x)}\n\n".encode() for x in (chunk, last, usage)] + [b"data: [DONE]\n\n"]

    async def go():
        async with RawHttpServer(sse_response(frames, delay_s=0.05)) as s:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=s.url, model="m", metrics=None)
            b._probe = _no_probe  # the raw server has no /v1/models; streaming is what is tested
            async with b:
                return await run_one(b, GenerationRequest("r", 4, prompt_token_ids=(1, 2, 3)), "c1", 10)

    rec = asyncio.run(go())
    assert rec.ok, rec.error
    assert rec.token_ids == (5, 6, 7, 8) and rec.event_token_counts == (3, 1)
    assert rec.output_tokens == 4 and rec.usage_completion_tokens == 4 and rec.prompt_tokens == 3
    itl = itls_ns(rec)
    assert len(itl) == 3 and itl[0] == 0 and itl[1] == 0 and itl[2] == rec.event_times_ns[1] - rec.event_times_ns[0]
    assert itl[2] > 0  # the server waited 50 ms; a starved client may see less, never <= 0


async def _no_probe() -> None:
    return None


def test_openai_payloads_and_chat_parse():
    r = GenerationRequest("r", 16, prompt_token_ids=(1, 2), seed=3, logprobs=2)
    p = openai.completions_payload(r, "m")
    assert p["prompt"] == [1, 2] and p["max_tokens"] == 16 and p["stream"] is True
    assert p["stream_options"] == {"include_usage": True} and p["ignore_eos"] is True
    assert p["return_token_ids"] is True and p["logprobs"] == 2 and p["seed"] == 3
    c = openai.chat_payload(GenerationRequest("r", 4, messages=(("user", "hi"),), ignore_eos=False), "m")
    assert c["messages"] == [{"role": "user", "content": "hi"}] and "ignore_eos" not in c
    role = RawEvent(1, json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
    assert openai.parse_chat(role) == []
    tok = RawEvent(2, json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}, "token_ids": [9],
                                               "finish_reason": "stop"}]}))
    out = openai.parse_chat(tok)
    assert out[0] == TokenEvent(t_ns=2, token_ids=(9,), text="x") and out[1] == Done(finish_reason="stop")
    assert openai.parse_completions(RawEvent(3, "[DONE]")) == [Done(terminal=True)]
    assert openai.parse_completions(RawEvent(3, "{oops"))[0].kind == "protocol"
    # the fast decoder (msgspec) refuses NaN/-Infinity, which Python-json servers emit: same result as json
    nan = openai.parse_completions(RawEvent(4, '{"choices":[{"index":0,"text":"x","token_ids":[1],'
                                               '"logprobs":{"tokens":["x"],"token_logprobs":[-Infinity]}}]}'))
    assert nan[0].token_ids == (1,) and nan[0].logprobs == (float("-inf"),)


def test_tgi_payload_maps_greedy_without_temperature_zero():
    g = tgi.generate_payload(GenerationRequest("r", 8, prompt_text="hi", temperature=0.0, top_p=1.0, seed=0))
    assert g == {"inputs": "hi", "parameters": {"max_new_tokens": 8, "details": True,
                                                "decoder_input_details": False, "do_sample": False}}
    s = tgi.generate_payload(GenerationRequest("r", 8, prompt_text="hi", temperature=0.7, top_p=1.0, seed=0))
    assert s["parameters"]["do_sample"] is True and s["parameters"]["temperature"] == 0.7
    assert "top_p" not in s["parameters"]  # TGI rejects top_p=1 (validation.rs: 0 < top_p < 1)
    assert s["parameters"]["seed"] == 0  # TGI accepts seed 0 (validation.rs: any u64): a seeded run repeats
    s2 = tgi.generate_payload(GenerationRequest("r", 8, prompt_text="hi", temperature=0.7, top_p=0.9, seed=5, logprobs=3))
    assert s2["parameters"]["top_p"] == 0.9 and s2["parameters"]["seed"] == 5 and s2["parameters"]["top_n_tokens"] == 3
    with pytest.raises(ValueError):
        tgi.generate_payload(GenerationRequest("r", 8, prompt_token_ids=(1,)))
    err = tgi.parse_generate_stream(RawEvent(1, '{"error":"Model is overloaded","error_type":"overloaded"}'))
    assert err == [Error("overloaded", "Model is overloaded")]


# every event shape the typed fast path (msgspec structs) may see, and the ones it must hand to
# the generic parser: both paths must give the same result for each
_SHAPES = [
    {"choices": [{"index": 0, "text": "x", "token_ids": [1, 2], "finish_reason": None}]},
    {"choices": [{"index": 0, "text": "x", "token_ids": [1], "finish_reason": "length"}],
     "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}, {"usage": {}}, {"choices": None},
    {"error": None}, {"error": {"message": "boom", "code": 429}}, [1], {"choices": [{"text": "a"}]},
    {"choices": [{"text": "", "token_ids": []}]}, {"choices": [{"text": "a", "token_ids": ["q"]}]},
    {"choices": [{"text": "a", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1, -2]}}]},
    {"choices": [{"text": "a", "logprobs": {}}]}, {"choices": [{"text": 5}]},
    {"choices": [{"delta": {"role": "assistant", "content": ""}, "token_ids": None}]},
    {"choices": [{"delta": {"content": "hi"}, "token_ids": [7], "finish_reason": "stop"}]},
    {"choices": [{"delta": {"content": "hi"}, "logprobs": {"content": [{"logprob": -0.5}]}}]},
    {"choices": [{"text": "a", "token_ids": [1]}, {"text": "b", "token_ids": [2], "finish_reason": "stop"}]},
]


@pytest.mark.parametrize("parse", [openai.parse_completions, openai.parse_chat], ids=["completions", "chat"])
def test_fast_parser_equals_generic_parser(parse, monkeypatch):
    raws = [RawEvent(7, json.dumps(s)) for s in _SHAPES] + [RawEvent(7, "not json"), RawEvent(7, "[DONE]"),
                                                         RawEvent(7, '{"choices":[{"text":"n","token_ids":[NaN]}]}')]
    fast = [parse(r) for r in raws]
    monkeypatch.setattr(openai, "_decode_chunk", None)  # the generic (dict) parser only
    assert fast == [parse(r) for r in raws]
    assert fast[0] == [TokenEvent(7, (1, 2), "x" if parse is openai.parse_completions else "")]


def test_events_reach_a_waiting_reader_at_the_slow_flush(monkeypatch):
    """Events are handed over in batches, but a slow stream's events still reach the executor
    within the flush interval, each with its own first-byte stamp."""
    from backends.http import connection

    monkeypatch.setattr(connection, "FLUSH_S", 0.2)
    frames = [b'data: {"choices":[{"index":0,"text":"a","token_ids":[5],"finish_reason":null}]}\n\n',
              b'data: {"choices":[{"index":0,"text":"b","token_ids":[6],"finish_reason":"length"}]}\n\n'
              b"data: [DONE]\n\n"]

    async def go():
        async with RawHttpServer(sse_response(frames, delay_s=1.0)) as s:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=s.url, model="m", metrics=None)
            b._probe = _no_probe
            seen = []
            async with b:
                async for item in b.stream(GenerationRequest("r", 2, prompt_token_ids=(1,))):
                    seen.append((item, time.perf_counter_ns()))
            return seen

    seen = asyncio.run(go())
    (first, got_first), (second, _), (end, _) = seen
    assert first.token_ids == (5,) and second.token_ids == (6,) and end.finish_reason == "length"
    assert second.t_ns - first.t_ns >= 0.8e9  # stamps are arrival times, not hand-over times
    assert got_first - first.t_ns < 0.6e9  # handed over at a flush tick, long before the stream ended


def test_plain_http_requests_carry_the_clients_headers_and_base_path(monkeypatch):
    """http:// streaming POSTs skip httpx (prebuilt header bytes): same headers, JSON body, base path."""
    monkeypatch.setenv("LLM_COMPARE_API_KEY", "sekret")
    heads: list[bytes] = []
    bodies: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        heads.append(head)
        bodies.append(await reader.readexactly(length))
        ev = b'data: {"choices":[{"index":0,"text":"a","token_ids":[5],"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"%x\r\n%b\r\n0\r\n\r\n" % (len(ev), ev))
        await writer.drain()
        writer.close()

    async def go():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=f"http://127.0.0.1:{port}/prefix/", model="m",
                                  metrics=None)
            b._probe = _no_probe
            async with b:
                return await run_one(b, GenerationRequest("r", 1, prompt_token_ids=(1, 2)), "c1", 10)
        finally:
            server.close()

    rec = asyncio.run(go())
    assert rec.ok and rec.token_ids == (5,), rec.error
    head = heads[0].decode("latin-1").lower()
    assert head.startswith("post /prefix/v1/completions http/1.1\r\n")
    assert f"host: 127.0.0.1:" in head and "authorization: bearer sekret" in head
    assert "content-type: application/json" in head and "accept-encoding: identity" in head
    payload = json.loads(bodies[0])
    assert payload["prompt"] == [1, 2] and payload["model"] == "m" and payload["stream"] is True

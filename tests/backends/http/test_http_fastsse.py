"""The receive thread's parser (backends/http/_fastsse.h) vs Python's path (connection.py, sse.py,
openai.py, tgi.py) on the same streams: the records must be identical in content, whichever path
parsed them, including every stream the C parser hands back to Python part-way (errors,
logprobs, CRLF line ends, comments, a body cut inside an event)."""
from __future__ import annotations

import asyncio
import os

import pytest

from backends.http import native
from backends.http_backends import HttpStreamBackend
from compare.running import aio
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming
from compare.running.executor import run_level
from compare.workload.schedule import LoadLevel
from core.records import GenerationRequest
from tests.http_util import RawHttpServer, sse_response

pytestmark = pytest.mark.skipif(native.RxThread is None, reason="the C helpers are not built here "
                                "(scripts/setup.d/50-http-native.sh)")

CONTENT = ("ok", "error_kind", "token_ids", "event_token_counts", "finish_reason", "prompt_tokens",
           "usage_completion_tokens", "logprobs")


def _content(r) -> tuple:
    return tuple(getattr(r, k) for k in CONTENT) + (len(r.event_times_ns),)


async def _level(url: str, protocol: str, n: int, tokens: int, observe: dict | None = None):
    b = HttpStreamBackend(None, "t", protocol=protocol, base_url=url, model="m", metrics=None)
    if observe is not None:  # server send stamps (SSE id) vs the records' stamps, either path
        b.raw_observer = lambda rid, raw: raw.id and observe.setdefault("pairs", []).append((int(raw.id), raw.t_ns))
        b.batch_observer = lambda rid, t, rx, sids: observe.setdefault("pairs", []).extend(zip(sids, t))
    reqs = [GenerationRequest(f"r{i}", tokens, prompt_token_ids=(1, 2), prompt_text="hi") for i in range(n)]
    async with b:
        out = await run_level(b, reqs, LoadLevel("concurrency", n), seed=0, timeout_s=20, max_errors=n)
        if observe is not None:
            observe["clock"] = b.describe().extra["event_clock"]
    return sorted(out.records, key=lambda r: r.request_id)


def _both(monkeypatch, run) -> tuple[list, list]:
    monkeypatch.setenv("LLM_COMPARE_RX_PARSE", "1")
    fast = run()
    monkeypatch.setenv("LLM_COMPARE_RX_PARSE", "0")
    slow = run()
    return fast, slow


@pytest.mark.parametrize("protocol,per_event", [("openai", 3), ("tgi", 1)])
def test_loopback_server_same_records_and_stamps(monkeypatch, protocol, per_event):
    """The calibration server (real HTTP, exact timing, its send stamp in each event's id):
    same records from both paths, and the C path's stamps as close to the send stamps."""
    with CalibrationServerProcess(CalibrationTiming(10, 20, per_event)) as url:
        obs: dict[str, dict] = {"fast": {}, "slow": {}}
        fast, slow = _both(monkeypatch, lambda: aio.run(_level(
            url, protocol, 6, 13, obs["fast" if os.environ["LLM_COMPARE_RX_PARSE"] == "1" else "slow"])))
    assert [_content(r) for r in fast] == [_content(r) for r in slow]
    assert all(r.ok and r.finish_reason == "length" for r in fast) and sum(len(r.token_ids) for r in fast) == 6 * 13
    for path in ("fast", "slow"):
        pairs = obs[path]["pairs"]
        assert len(pairs) == sum(len(r.event_times_ns) for r in fast)
        errs = sorted((t - s) / 1e6 for s, t in pairs)
        assert errs[0] >= 0, path  # never stamped before the server sent it
        # kernel receive stamps: transit only, unless a read came a whole gap (20 ms) late
        assert path == "slow" or errs[len(errs) // 2] < 10.0, (path, errs[:3], errs[-3:])
    # run.json says who parsed: every response whole in the thread, none in the Python run
    assert obs["fast"]["clock"]["thread_parsed"] == {"ended": 6, "handed_back": 0, "cut_short": 0}
    assert obs["slow"]["clock"]["thread_parsed"] == {"ended": 0, "handed_back": 0, "cut_short": 0}
    # the records' stamps are the observed ones, and the send stamp is after the write
    for r in fast:
        assert list(r.event_times_ns) == sorted(r.event_times_ns) and r.t_ready_ns <= r.t_sent_ns < r.event_times_ns[0]


TOK = b'data: {"id":"c","choices":[{"index":0,"text":"a\\u00e9\xc3\xa9","token_ids":[5,6],"logprobs":null,"finish_reason":null}]}\n\n'
LAST = b'data: {"choices":[{"index":0,"text":"","token_ids":[7],"finish_reason":"length","stop_reason":null}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}\n\n'
DONE = b"data: [DONE]\n\n"
CHAT_ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
CHAT_TOK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"token_ids":[9],"finish_reason":null}]}\n\n'
TGI_TOK = b'data:{"index":1,"token":{"id":11,"text":"x","logprob":-0.25,"special":false},"generated_text":null,"details":null}\n\n'
TGI_END = (b'data:{"index":2,"token":{"id":12,"text":"y","logprob":-1.5e-3,"special":false},"generated_text":"xy",'
           b'"details":{"finish_reason":"eos_token","generated_tokens":2,"input_length":4,"seed":null}}\n\n')
STREAMS = {
    "plain": ("openai", [TOK, TOK + LAST, USAGE + DONE]),
    "one_event_split_over_chunks": ("openai", [TOK[:7], TOK[7:40], TOK[40:] + LAST[:-1], LAST[-1:] + USAGE, DONE]),
    "error_mid_stream": ("openai", [TOK, b'data: {"error":{"message":"boom","code":500}}\n\n', DONE]),
    "logprobs": ("openai", [TOK, b'data: {"choices":[{"index":0,"text":"b","token_ids":[8],"logprobs":{"tokens":["b"],'
                                 b'"token_logprobs":[-0.5]},"finish_reason":"length"}]}\n\n', USAGE, DONE]),
    "crlf_line_ends": ("openai", [TOK.replace(b"\n", b"\r\n"), LAST, DONE]),
    "comment": ("openai", [TOK, b": keep-alive\n\n", LAST, DONE]),
    "text_without_ids": ("openai", [b'data: {"choices":[{"index":0,"text":"zz","finish_reason":null}]}\n\n', LAST, DONE]),
    "wrong_type": ("openai", [TOK, b'data: {"choices":[{"index":0,"text":"a","token_ids":"5"}]}\n\n', DONE]),
    "not_utf8": ("openai", [TOK, b'data: {"choices":[{"index":0,"text":"\xff","token_ids":[5]}]}\n\n', DONE]),
    "cut_inside_an_event": ("openai", [TOK, TOK[:30]]),
    "no_done": ("openai", [TOK, LAST]),
    "two_choices": ("openai", [b'data: {"choices":[{"index":0,"text":"a","token_ids":[1]},{"index":1,"text":"b",'
                               b'"token_ids":[2,3],"finish_reason":"stop"}]}\n\n', DONE]),
    "chat": ("openai-chat", [CHAT_ROLE, CHAT_TOK, CHAT_TOK, USAGE, DONE]),
    "tgi": ("tgi", [TGI_TOK, TGI_TOK, TGI_END]),
    "tgi_error": ("tgi", [TGI_TOK, b'data:{"error":"overloaded","error_type":"overloaded"}\n\n']),
    "tgi_top_tokens": ("tgi", [TGI_TOK, TGI_END[:-3] + b',"top_tokens":[{"id":1,"text":"a","logprob":-1.0}]}\n\n']),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_scripted_streams_same_records(monkeypatch, name):
    protocol, chunks = STREAMS[name]

    async def go():
        async with RawHttpServer(sse_response(chunks, delay_s=0.005)) as s:
            return await _level(s.url, protocol, 1, 8)

    fast, slow = _both(monkeypatch, lambda: asyncio.run(go()))
    assert _content(fast[0]) == _content(slow[0]), name
    # stamps in arrival order, none before the request left (per-read stamping vs the server's
    # send stamps: the loopback test above; two separate runs may merge reads differently under load)
    t = fast[0].event_times_ns
    assert list(t) == sorted(t) and all(x > fast[0].t_sent_ns for x in t), name


def test_batches_only_inside_the_executors_request(monkeypatch):
    """run_one takes TokenBatch items; a later backend.stream by the same task (quality probes
    read the text) gets TokenEvents again, with their text."""
    from compare.running.executor import run_one
    from core.records import TokenEvent

    async def go():
        async with RawHttpServer(sse_response(STREAMS["plain"][1])) as s:
            b = HttpStreamBackend(None, "t", protocol="openai", base_url=s.url, model="m", metrics=None)
            async with b:
                rec = await run_one(b, GenerationRequest("a", 8, prompt_token_ids=(1,)), "c1", 10)
                items = [x async for x in b.stream(GenerationRequest("b", 8, prompt_token_ids=(1,)))]
        return rec, items

    rec, items = asyncio.run(go())
    assert rec.ok and rec.token_ids == (5, 6, 5, 6, 7)
    events = [x for x in items if type(x) is TokenEvent]
    assert [e.token_ids for e in events] == [(5, 6), (5, 6), (7,)] and events[0].text == "aéé"

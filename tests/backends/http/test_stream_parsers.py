"""Every registered wire protocol, through every client path: per-stream parsers (state in the
parser object, never a module global), the shared error-event reading, and a level sent in this
process and by two client processes against a loopback double (tests/backends/http/protocol_double.py)
with exact token counts."""
from __future__ import annotations

import asyncio
import json

import pytest

from backends.http import protocol as protocol_mod
from backends.http.protocol import Done, Error, StreamParser
from backends.http.protocols import get_protocol, protocols
from backends.http.sse import RawEvent, snippet
from backends.http_backends import HttpStreamBackend
from compare.running.executor import run_level
from compare.running.multiproc import not_shardable, run_level_procs
from compare.workload.schedule import LoadLevel
from core.errors import FailureKind
from core.records import GenerationRequest, TokenEvent
from tests.backends.http.protocol_double import PROMPT_TOKENS, ProtocolDouble

NAMES = sorted(protocols())
TOKENS = 6


def _raw(data, t=1):
    return RawEvent(t_ns=t, data=data if isinstance(data, str) else json.dumps(data))


def test_the_registry_holds_every_format():
    assert set(NAMES) >= {"openai", "openai-chat", "tgi", "trtllm-openai", "trtllm-openai-ids", "llamacpp"}
    # the receive thread's parser is a field of the protocol: only the formats _fastsse.h parses
    assert {n: get_protocol(n).fast for n in NAMES if get_protocol(n).fast} == {"openai": 1, "openai-chat": 2, "tgi": 3}
    assert not hasattr(protocol_mod, "FAST_FORMATS")
    with pytest.raises(ValueError, match="unknown HTTP protocol 'nope'; known: .*trtllm-openai"):
        get_protocol("nope")


@pytest.mark.parametrize("name", NAMES)
def test_each_stream_gets_its_own_parser(name):
    p = get_protocol(name)
    a, b = p.new_stream(), p.new_stream()
    assert isinstance(a, StreamParser) and isinstance(a.engine_metrics(), dict)
    if p.stream_parser is not None:
        assert a is not b and p.parse_event is None
    else:
        assert a.feed is p.parse_event  # stateless: the per-event path calls the function itself


@pytest.mark.parametrize("name", NAMES)
def test_not_json_not_an_object_and_error_events_read_alike(name):
    feed = get_protocol(name).new_stream().feed
    for data, why in (("{nope", "event is not JSON"), ("[1, 2]", "event is not a JSON object")):
        (err,) = feed(_raw(data))
        assert err == Error(FailureKind.PROTOCOL, f"{why}: {snippet(data)}")
    if name == "tgi":  # TGI names the kind in error_type
        (err,) = feed(_raw({"error": "busy", "error_type": "overloaded"}))
    else:  # the OpenAI servers and llama-server send an HTTP-style code
        (err,) = feed(_raw({"error": {"code": 429, "message": "busy"}}))
        assert feed(_raw({"error": {"code": 400, "message": "bad"}}))[0].kind == FailureKind.HTTP_4XX
        assert feed(_raw({"error": "boom"}))[0].kind == FailureKind.GENERATION
    assert err == Error(FailureKind.OVERLOADED, "busy")


def test_no_module_global_holds_stream_state():
    """Two streams fed interleaved give what each gives alone (the chunk ids are the same: a
    per-id table would mix them), and nothing at module level grows."""
    import backends.http.trtllm_openai as trt
    import backends.llamacpp.protocol as lcp
    import backends.trtllm.backend as trt_backend

    assert not hasattr(trt_backend, "_SEEN")
    before = {m.__name__: {k: repr(v) for k, v in vars(m).items() if isinstance(v, (dict, list, set))}
              for m in (trt, lcp, trt_backend)}
    chunk = lambda n: {"id": "same", "choices": [{"index": 0, "text": "x"}],  # noqa: E731
                       "usage": {"prompt_tokens": 1, "completion_tokens": n}}
    a, b = trt.TEXT.new_stream(), trt.TEXT.new_stream()
    counts = [sum(e.n_tokens for e in s.feed(_raw(chunk(n))) if isinstance(e, TokenEvent))
              for s, n in ((a, 1), (b, 1), (a, 2), (b, 2), (a, 3), (b, 3))]
    assert counts == [1] * 6
    after = {m.__name__: {k: repr(v) for k, v in vars(m).items() if isinstance(v, (dict, list, set))}
             for m in (trt, lcp, trt_backend)}
    assert after == before


def _reqs(n):
    return [GenerationRequest(request_id=f"r{i:02d}", max_tokens=TOKENS, prompt_text="hi", ignore_eos=True)
            for i in range(n)]


@pytest.fixture(scope="module")
def double():
    with ProtocolDouble() as url:
        yield url


@pytest.mark.parametrize("name", NAMES)
def test_every_protocol_in_process_and_in_client_processes(name, double):
    """The same level, sent by this process and by two client processes (each resolving the
    protocol by name): every request ok with exactly TOKENS tokens, as the server counted."""
    reqs = _reqs(6)

    async def go():
        async with HttpStreamBackend(None, f"{name}@{double}", protocol=name, base_url=double, metrics=None) as b:
            assert not_shardable(b) is None and b.client_recipe().build().protocol is b.protocol
            one = await run_level(b, reqs, LoadLevel("concurrency", 3), seed=1, timeout_s=30, max_errors=0)
            two = await run_level_procs(b, reqs, LoadLevel("concurrency", 4), procs=2, seed=1, timeout_s=30,
                                        max_errors=0)
            return one, two

    one, two = asyncio.run(go())
    assert two.aborted is None and two.client_procs["n"] == 2
    for level in (one, two):
        assert len(level.records) == len(reqs)
        for r in level.records:
            assert r.ok, r.error
            assert sum(r.event_token_counts) == TOKENS and r.usage_completion_tokens == TOKENS, r
            if name != "trtllm-openai":  # text-only chunks: ids unknown (-1), counted from usage
                assert [t for t in r.token_ids if t >= 0] == [100 + i for i in range(1, TOKENS + 1)
                                                              if not (name == "llamacpp" and i == 2)]
            if name == "llamacpp":  # the server's own timings of the request, from its last event
                assert r.engine_metrics["prefill_s"] == pytest.approx(1.25e-3)
                assert r.engine_metrics["prompt_processed_tokens"] == PROMPT_TOKENS


def test_llamacpp_level_timings_from_the_common_stream(double):
    """LlamaCppBackend streams through HttpStreamBackend.stream (no copy of it), so it is shardable
    and its level summary still has the server's timings."""
    from backends.llamacpp.server import LlamaCppBackend

    class AtDouble(LlamaCppBackend):  # the double stands in for the llama-server it would launch
        async def _start_server(self) -> None:
            pass

    assert "stream" not in LlamaCppBackend.__dict__
    b = AtDouble.__new__(AtDouble)  # no model to plan from: only what streaming needs
    HttpStreamBackend.__init__(b, None, "llamacpp", protocol=get_protocol("llamacpp"), base_url=double, metrics=None)
    b._server, b._level = None, []

    async def go():
        async with b:
            await b.on_level_start("c1")
            items = [x async for x in b.stream(_reqs(1)[0])]
            one = await b.on_level_end("c1")
            await b.on_level_start("c4")  # sent by client processes: their records' timings reach the summary
            await run_level_procs(b, _reqs(4), LoadLevel("concurrency", 4), procs=2, seed=1, timeout_s=30,
                                  max_errors=0)
            return items, one, await b.on_level_end("c4")

    items, summary, sharded = asyncio.run(go())
    assert sharded["server_prefill_ms"]["count"] == 4 and sharded["prompt_cache"]["processed_tokens"] == 4 * PROMPT_TOKENS
    assert sum(x.n_tokens for x in items if isinstance(x, TokenEvent)) == TOKENS
    assert items[-1].completion_tokens == TOKENS and items[-1].engine_metrics["decode_s"] == pytest.approx(2.5e-3)
    assert summary["server_decode_ms"]["mean"] == pytest.approx(2.5) and summary["server_decode_ms"]["count"] == 1


def test_a_stream_cut_before_llamacpp_last_event_fails():
    (ev,) = get_protocol("llamacpp").new_stream().feed(_raw({"content": "a", "tokens": [5], "stop": False}))
    assert isinstance(ev, TokenEvent) and get_protocol("llamacpp").terminated_by_done
    assert not get_protocol("openai").terminated_by_done  # a finish reason also ends an OpenAI stream
    assert get_protocol("openai").new_stream().feed(_raw("[DONE]")) == [Done(terminal=True)]


@pytest.mark.parametrize("native", [(), ("--native", "trtllm.detokenize=false")], ids=["text", "ids"])
def test_compare_run_trtllm_at_url_with_two_client_processes(double, tmp_path, native):
    """``compare run --backends trtllm@URL --client-procs 2``: both processes stream (each resolves
    the trtllm protocol by name) and a server that gives every chunk a fresh id counts each token once."""
    from backends.models.tiny import ensure_tiny_model
    from tests.conftest import run_cli

    p = run_cli("run", "--backends", f"trtllm@{double}", "--model", str(ensure_tiny_model()), *native,
                "--num-requests", "8", "--input-len", "16", "--output-len", "8", "--concurrency", "4",
                "--client-procs", "2", "--warmup", "1", "--out", str(tmp_path), "--run-id", "t", "--format", "json")
    assert p.returncode == 0, p.stderr[-2000:]
    b = json.loads((tmp_path / "t" / "run.json").read_text())["backends"][f"trtllm@{double}"]
    s = b["levels"]["c4"]
    assert b["status"] == "complete" and s["client_procs"]["n"] == 2
    assert s["ok"] == 8 and s["output_tokens"] == 8 * 8  # 36 per request when counted per chunk id
    assert b["describe"]["native_config"]["protocol"] == ("trtllm-openai-ids" if native else "trtllm-openai")

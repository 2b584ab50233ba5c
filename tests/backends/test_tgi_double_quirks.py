"""The TGI protocol TEST DOUBLE (tests/doubles/tgi_protocol_server.py) behaves like TGI v3.3.7,
quirks included, each traced to its row in adapters/facts/tgi-v3.3.7.json; and the tool's parser
reads what it sends the way TGI's own semantics mean it.

The double's router logic runs here over HTTP (ASGI, no socket) on a STUB ENGINE: a stand-in for
the vLLM engine that emits a fixed token per step, so that 2048-token streams and cut streams are
cheap and exact. Real-engine streams through the double: tests/backends/test_tgi_double_protocol.py.
The launcher shim (containers/images/tgi-double/text-generation-launcher) is loaded as a module.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.machinery
import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from adapters.facts import load
from backends.http import tgi
from backends.http.protocol import Done, Error
from backends.http.sse import RawEvent
from core.errors import FailureKind
from core.records import TokenEvent
from tests.conftest import ROOT
from tests.doubles.tgi_protocol_server import TgiDouble, build_app

FACTS = load("tgi-v3.3.7")
pytestmark = pytest.mark.timeout(300)


@dataclass
class _Out:
    token_ids: list[int]
    text: str
    finish_reason: str | None
    stop_reason: Any = None
    logprobs: Any = None


@dataclass
class _Step:
    outputs: list[_Out]


@dataclass
class StubEngine:
    """STUB of the vLLM engine: ``token`` per step up to max_tokens (finish ``length``), or ``eos``
    after ``eos_after`` steps (finish ``stop``); ``cut``: stops without a finish reason."""

    token: int
    token_text: str
    eos: int | None = None
    eos_after: int | None = None
    cut: bool = False
    calls: list[tuple[int, Any]] = field(default_factory=list)  # (prompt length, sampling params)

    async def generate(self, prompt: dict[str, Any], params: Any, request_id: str):  # noqa: ANN201
        self.calls.append((len(prompt["prompt_token_ids"]), params))
        n = params.max_tokens if self.eos_after is None else min(params.max_tokens, self.eos_after + 1)
        for i in range(n):
            last = i == n - 1
            if self.eos_after is not None and i == self.eos_after:
                yield _Step([_Out([self.eos], "", None if self.cut else "stop")])
                return
            yield _Step([_Out([self.token], self.token_text, None if (self.cut or not last) else "length")])


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.fixture(scope="module")
def openapi(fixtures_dir):
    return json.loads((fixtures_dir / "specs" / "tgi-3.3-openapi.json").read_text())


def _double(tokenizer, openapi, engine: StubEngine, max_total: int = 512, max_concurrent: int = 8) -> TgiDouble:
    args = argparse.Namespace(model="/m", max_total_tokens=max_total, max_input_tokens=max_total - 1,
                              max_concurrent_requests=max_concurrent, max_stop_sequences=4)
    return TgiDouble(engine, tokenizer, args, openapi)


def _stream(double: TgiDouble, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]], list]:
    """POST /generate_stream through the double's app: (status, events, what our parser made of them)."""
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=build_app(double))
        async with httpx.AsyncClient(transport=transport, base_url="http://double") as c:
            return await c.post("/generate_stream", json=body)

    r = asyncio.run(go())
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    parsed = [p for i, e in enumerate(events) for p in tgi.parse_generate_stream(RawEvent(i, json.dumps(e)))]
    return r.status_code, events, parsed


def _token(tokenizer, text: str) -> int:
    (tid,) = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tid


def test_a_request_longer_than_max_total_tokens_is_requeued_in_1024_chunks_and_ends_length(tokenizer, openapi):
    """fact: behaviour.max_total_tokens_check, behaviour.requeue (router/src/validation.rs, infer/mod.rs)."""
    engine = StubEngine(_token(tokenizer, " a"), " a")
    double = _double(tokenizer, openapi, engine, max_total=2300)
    status, events, parsed = _stream(double, {"inputs": "hello", "parameters": {"max_new_tokens": 5000}})
    assert status == 200 and "error" not in events[-1]  # 5000 > max_total_tokens 2300, yet admitted
    # two chunks of 1024; a third would not fit 2300 with prompt + 2048 output: the stream ends `length`
    assert [p.max_tokens for _, p in engine.calls] == [1024, 1024]
    first, second = (n for n, _ in engine.calls)
    assert second >= first + 1024  # the continuation re-prefills prompt + output so far
    assert events[-1]["details"] == {"finish_reason": "length", "generated_tokens": 2048, "input_length": first,
                                     "seed": None}
    assert [e["index"] for e in events] == list(range(1, 2049))
    done = [p for p in parsed if isinstance(p, Done)]
    assert len(done) == 1 and done[0].finish_reason == "length" and done[0].completion_tokens == 2048


def test_the_last_chunk_overshoots_max_new_tokens_like_tgi(tokenizer, openapi):
    """fact: behaviour.requeue: each chunk is min(max_new_tokens, 1024), so 1500 asked -> 2048 made."""
    engine = StubEngine(_token(tokenizer, " a"), " a")
    _, events, _ = _stream(_double(tokenizer, openapi, engine, max_total=4096),
                           {"inputs": "hello", "parameters": {"max_new_tokens": 1500}})
    assert events[-1]["details"]["generated_tokens"] == 2048


def test_a_chunk_that_does_not_fit_is_a_validation_error(tokenizer, openapi):
    engine = StubEngine(_token(tokenizer, " a"), " a")
    _, events, parsed = _stream(_double(tokenizer, openapi, engine, max_total=512),
                                {"inputs": "hello", "parameters": {"max_new_tokens": 5000}})
    assert events[-1]["error_type"] == "validation" and "1024 `max_new_tokens`" in events[-1]["error"]
    assert engine.calls == [] and parsed[-1].kind is FailureKind.VALIDATION


def test_special_tokens_stream_with_their_text_and_our_parser_drops_it(tokenizer, openapi):
    """fact: stream.token.text (decode_token skip_special_tokens=False; generated_text skips them)."""
    eos = tokenizer.eos_token_id
    engine = StubEngine(_token(tokenizer, " a"), " a", eos=eos, eos_after=3)
    _, events, parsed = _stream(_double(tokenizer, openapi, engine), {"inputs": "hi", "parameters": {"max_new_tokens": 8}})
    last = events[-1]
    assert last["token"] == {"id": eos, "text": tokenizer.eos_token, "logprob": None, "special": True}
    assert last["token"]["text"] != "" and last["generated_text"] == " a a a"
    assert last["details"]["finish_reason"] == "eos_token"
    text = "".join(p.text for p in parsed if isinstance(p, TokenEvent))
    assert text == last["generated_text"]


def test_a_cut_stream_ends_with_incomplete_generation_stream(tokenizer, openapi):
    """fact: error_type.incomplete_generation_stream (router/src/server.rs)."""
    engine = StubEngine(_token(tokenizer, " a"), " a", cut=True)
    status, events, parsed = _stream(_double(tokenizer, openapi, engine), {"inputs": "hi", "parameters": {"max_new_tokens": 4}})
    assert status == 200 and events[-1] == {"error": "Incomplete generation stream",
                                            "error_type": "incomplete_generation_stream"}
    assert isinstance(parsed[-1], Error) and parsed[-1].kind is FailureKind.DISCONNECTED


def test_seed_zero_is_accepted_and_used(tokenizer, openapi):
    """fact: behaviour.seed (validation.rs takes any u64; only the OpenAPI annotation says >= 1)."""
    engine = StubEngine(_token(tokenizer, " a"), " a")
    body = {"inputs": "hi", "parameters": {"max_new_tokens": 2, "do_sample": True, "temperature": 0.7, "seed": 0}}
    _, events, _ = _stream(_double(tokenizer, openapi, engine), body)
    assert "error" not in events[-1] and events[-1]["details"]["seed"] == 0
    assert engine.calls[0][1].seed == 0


def test_overload_is_a_200_event_checked_before_validation(tokenizer, openapi):
    """fact: error_type.overloaded, behaviour.overloaded_order (the permit comes first)."""
    double = _double(tokenizer, openapi, StubEngine(1, "x"), max_concurrent=1)
    double.in_flight = 1
    status, events, parsed = _stream(double, {"inputs": "hi", "parameters": {"temperature": 0.0}})
    assert status == 200 and events == [{"error": "Model is overloaded", "error_type": "overloaded"}]
    assert parsed[-1].kind is FailureKind.OVERLOADED


def test_info_has_tgi_3_3_fields_only(tokenizer, openapi):
    """fact: info.* (router/src/lib.rs struct Info: no model_dtype, no batch budgets)."""
    info = _double(tokenizer, openapi, StubEngine(1, "x")).info()
    present = {k.split(".", 1)[1] for k, f in FACTS.of("field").items() if k.startswith("info.") and f.type != "absent"}
    assert set(info) == present


def _shim():
    path = ROOT / "containers/images/tgi-double/text-generation-launcher"
    loader = importlib.machinery.SourceFileLoader("tgi_double_launcher", str(path))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


def test_launcher_shim_ignores_max_batch_total_tokens_like_tgi(fixtures_dir, monkeypatch, capsys):
    """fact: behaviour.kv_budget (--max-batch-total-tokens deprecated for flash-attention models)."""
    shim = _shim()
    flags = json.loads((fixtures_dir / "specs" / "tgi-3.3-launcher-flags.json").read_text())["flags"]
    monkeypatch.setenv("PREFIX_CACHING", "0")
    server, log = shim.plan(["--model-id", "/m", "--max-total-tokens", "512", "--max-batch-total-tokens", "4096"], flags)
    assert "--kv-cache-memory-bytes" not in server and any("deprecated for Flash Attention" in x for x in log)
    assert any("PREFIX_CACHING=0" in x for x in log)
    with pytest.raises(SystemExit) as e:  # the launcher still checks the value it then ignores
        shim.plan(["--model-id", "/m", "--max-total-tokens", "5000", "--max-batch-total-tokens", "4096"], flags)
    assert e.value.code == 1 and "must be <= `max_batch_total_tokens`" in capsys.readouterr().err


def test_the_kv_budget_tgi_exports_reaches_run_json(tokenizer, openapi):
    """fact: tgi_batch_max_total_tokens: 3.3's /info has no batch budgets, the gauge carries the KV
    budget TGI chose; the backend reads it into run.json's ``resolved``."""
    from backends.tgi.backend import kv_budget_from_metrics

    double = _double(tokenizer, openapi, StubEngine(1, "x"))
    assert kv_budget_from_metrics(double.metrics.text()) == 0  # not sized yet
    double.metrics.kv_budget.set(65536)
    assert kv_budget_from_metrics(double.metrics.text()) == 65536
    assert kv_budget_from_metrics("tgi_queue_size 3\n") is None

"""TEST DOUBLE of text-generation-inference 3.3's native HTTP protocol, backed by a REAL engine.

TGI itself cannot run on these machines. This server speaks TGI's wire protocol -- ``POST
/generate_stream`` (SSE), ``POST /generate``, ``POST /`` (compat), ``GET /info``, ``GET /health``, ``GET /metrics``
(``tgi_*`` families) -- and generates with the real vLLM engine (in-process ``AsyncLLM``). It is a
stand-in for the protocol only: its latencies are vLLM's, not TGI's. Never report its numbers as TGI.

Behaviour copied from TGI v3.3.7's router (router/src/server.rs, validation.rs, infer/mod.rs), each
quirk named by its row in adapters/facts/tgi-v3.3.7.json (``fact: KEY``), and request bodies checked
against the OpenAPI spec (``--openapi``, default tests/fixtures/specs/tgi-3.3-openapi.json):
- request bodies are validated against ``GenerateRequest``, except the seed's ``>= 1`` annotation,
  which TGI does not enforce (fact: behaviour.seed); TGI's own rules on top: temperature > 0,
  0 < top_p < 1, top_k > 0, max_new_tokens > 0, stop <= max_stop_sequences;
- the length check is input + min(max_new_tokens, 1024) <= max_total_tokens (fact:
  behaviour.max_total_tokens_check), and generation runs in chunks of min(max_new_tokens, 1024):
  a chunk ending `length` short of max_new_tokens is re-validated with prompt + output and re-queued
  (a fresh prefill), ending `length` when it no longer fits (fact: behaviour.requeue);
- the concurrency limit is checked before validation (fact: behaviour.overloaded_order);
- special tokens stream with their text, ``generated_text`` leaves them out (fact: stream.token.text);
- ``/generate_stream`` always answers 200; errors are events ``data:{"error":..,"error_type":..}``
  (validation / overloaded / generation / incomplete_generation_stream), as TGI does;
- ``/generate`` maps them to HTTP 422 (validation), 429 (overloaded), 424 (generation);
- ``/info`` has TGI 3.3's fields only: no model_dtype, no batch budgets (fact: info.model_dtype);
  ``/metrics`` exports the KV budget as ``tgi_batch_max_total_tokens``;
- a body that is not JSON or lacks ``inputs`` gets 422 text/plain (axum's Json rejection);
- no ``ignore_eos``: generation stops at EOS.

- ``POST /`` is TGI's compat route (``CompatGenerateRequest``: ``"stream"`` picks the event stream
  or a one-element JSON array), the route Hugging Face's ``text-generation`` client posts to.

Run: ``python tests/doubles/tgi_protocol_server.py --model DIR --port N [--host 127.0.0.1]``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

_HERE = Path(__file__).resolve()
# in a checkout: tests/fixtures/specs; elsewhere (e.g. copied into an image) pass --openapi
DEFAULT_OPENAPI = _HERE.parents[1] / "fixtures" / "specs" / "tgi-3.3-openapi.json"
VERSION = "3.3.7-dev0 (llm-compare test double on vLLM)"
CHUNK = 1024  # validation.rs DEFAULT_GENERATION_LENGTH (fact: default.max_new_tokens_chunk)


# ---------------------------------------------------------------- OpenAPI 3.0 -> JSON Schema

def _to_jsonschema(node: Any) -> Any:
    """OpenAPI 3.0 (utoipa flavour: numeric exclusiveMinimum) -> JSON Schema 2020-12."""
    if isinstance(node, list):
        return [_to_jsonschema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_jsonschema(v) for k, v in node.items() if k not in ("nullable", "example", "default")}
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def schema_validator(openapi: dict[str, Any], name: str) -> Any:
    """A jsonschema validator for ``components.schemas[name]`` of a TGI OpenAPI document."""
    from jsonschema import Draft202012Validator

    defs = {k: _to_jsonschema(v) for k, v in openapi["components"]["schemas"].items()}
    # the seed's exclusiveMinimum is an annotation only: validation.rs takes any u64 (fact: behaviour.seed)
    seed = defs.get("GenerateParameters", {}).get("properties", {}).get("seed")
    for node in ([seed] + list(seed.get("anyOf", [])) if isinstance(seed, dict) else []):
        if isinstance(node, dict):
            node.pop("exclusiveMinimum", None)
            node["minimum"] = 0
    return Draft202012Validator({"$defs": defs, **defs[name]})


# ---------------------------------------------------------------- TGI semantics

class TgiError(Exception):
    STATUS = {"validation": 422, "overloaded": 429, "generation": 424, "incomplete_generation": 500,
              "incomplete_generation_stream": 500}

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type, self.message = error_type, message

    def body(self) -> dict[str, str]:
        return {"error": self.message, "error_type": self.error_type}


def validation(msg: str) -> TgiError:
    return TgiError("validation", f"Input validation error: {msg}")


class Metrics:
    """tgi_* Prometheus families with TGI's names (counters without the _total suffix)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge, Histogram

        self.counters: dict[str, float] = {"tgi_request_count": 0, "tgi_request_success": 0}
        self.failures: dict[str, float] = {}
        self.reg = CollectorRegistry()
        h = lambda n: Histogram(n, n, registry=self.reg,  # noqa: E731
                                buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.duration, self.queue = h("tgi_request_duration"), h("tgi_request_queue_duration")
        self.inference, self.tpot = h("tgi_request_inference_duration"), h("tgi_request_mean_time_per_token_duration")
        self.generated = Histogram("tgi_request_generated_tokens", "tokens", registry=self.reg,
                                   buckets=(1, 8, 32, 128, 512, 2048))
        self.queue_size = Gauge("tgi_queue_size", "queued", registry=self.reg)
        self.batch_size = Gauge("tgi_batch_current_size", "batch", registry=self.reg)
        # the KV budget chosen at warm-up; TGI 3.3 exports it here, not in /info (fact: tgi_batch_max_total_tokens)
        self.kv_budget = Gauge("tgi_batch_max_total_tokens", "kv tokens", registry=self.reg)

    def fail(self, kind: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1

    def text(self) -> str:
        from prometheus_client import generate_latest

        lines = []
        for k, v in self.counters.items():
            lines += [f"# TYPE {k} counter", f"{k} {v}"]
        lines.append("# TYPE tgi_request_failure counter")
        lines += [f'tgi_request_failure{{err="{k}"}} {v}' for k, v in self.failures.items()]
        return "\n".join(lines) + "\n" + generate_latest(self.reg).decode()


class TgiDouble:
    def __init__(self, engine: Any, tokenizer: Any, args: argparse.Namespace, openapi: dict[str, Any] | None) -> None:
        self.engine, self.tok, self.args = engine, tokenizer, args
        self.request_schema = schema_validator(openapi, "GenerateRequest") if openapi else None
        self.in_flight = 0
        self.metrics = Metrics()
        self.special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.kv_tokens: int | None = None  # the KV budget in tokens, exported as tgi_batch_max_total_tokens

    def info(self) -> dict[str, Any]:
        a = self.args
        return {"model_id": a.model, "model_sha": None, "model_pipeline_tag": "text-generation",
                "max_concurrent_requests": a.max_concurrent_requests, "max_best_of": 2,
                "max_stop_sequences": a.max_stop_sequences, "max_input_tokens": a.max_input_tokens,
                "max_total_tokens": a.max_total_tokens, "validation_workers": 1,
                "max_client_batch_size": 4, "router": "text-generation-router", "version": VERSION,
                "sha": None, "docker_label": None}

    def validate(self, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        """TGI's checks -> (prompt token ids, vLLM SamplingParams kwargs); raises TgiError."""
        if self.request_schema is not None:
            errs = sorted(self.request_schema.iter_errors(body), key=lambda e: list(e.path))
            if errs:
                where = ".".join(str(p) for p in errs[0].path) or "body"
                raise validation(f"`{where}`: {errs[0].message}")
        p = body.get("parameters") or {}
        inputs = body["inputs"]
        if not inputs:
            raise validation("`inputs` cannot be empty")
        t, top_p, top_k = p.get("temperature"), p.get("top_p"), p.get("top_k")
        if t is not None and t <= 0:
            raise validation("`temperature` must be strictly positive")
        if top_p is not None and not 0 < top_p < 1:
            raise validation("`top_p` must be > 0.0 and < 1.0")
        if top_k is not None and top_k <= 0:
            raise validation("`top_k` must be strictly positive")
        if p.get("max_new_tokens") == 0:
            raise validation("`max_new_tokens` must be strictly positive")
        stop = p.get("stop") or []
        if len(stop) > self.args.max_stop_sequences:
            raise validation(f"`stop` supports up to {self.args.max_stop_sequences} stop sequences. Given: {len(stop)}")
        ids, max_new, total_new = self.lengths(inputs, p.get("max_new_tokens"))
        sampling = (bool(p.get("do_sample")) or t is not None or top_p is not None or top_k is not None
                    or p.get("typical_p") is not None)  # validation.rs: any of them turns sampling on
        sp: dict[str, Any] = {"max_tokens": max_new, "total_new": total_new, "stop": stop or None,
                              "logprobs": int(p.get("top_n_tokens") or 0)}
        if sampling:
            sp.update(temperature=t if t is not None else 1.0, top_p=top_p or 1.0, top_k=top_k or 0,
                      seed=p.get("seed"))
        else:
            sp["temperature"] = 0.0
        if p.get("repetition_penalty") is not None:
            sp["repetition_penalty"] = p["repetition_penalty"]
        return ids, sp

    def lengths(self, inputs: str, asked: int | None) -> tuple[list[int], int, int]:
        """(prompt ids, this chunk's max_new_tokens, the request's total) as validation.rs computes
        them: the chunk is min(max_new_tokens, 1024) and only it must fit max_total_tokens."""
        ids = list(self.tok(inputs, add_special_tokens=True)["input_ids"])
        total_new = asked if asked is not None else max(0, self.args.max_total_tokens - len(ids))
        chunk = min(total_new, CHUNK)
        if len(ids) + chunk > self.args.max_total_tokens:
            raise validation(f"`inputs` tokens + `max_new_tokens` must be <= {self.args.max_total_tokens}. "
                             f"Given: {len(ids)} `inputs` tokens and {chunk} `max_new_tokens`")
        if len(ids) > self.args.max_input_tokens:
            raise validation(f"`inputs` must have less than {self.args.max_input_tokens} tokens. Given: {len(ids)}")
        return ids, chunk, total_new

    def token_text(self, tid: int, delta: str, first: bool) -> str:
        """A streamed token's text: a special token's own text (the server decodes with
        skip_special_tokens=False), else the delta vLLM produced (on its first token)."""
        if tid in self.special:
            return str(self.tok.decode([tid], skip_special_tokens=False))
        return delta if first else ""

    async def generate(self, body: dict[str, Any], stream: bool) -> AsyncIterator[dict[str, Any]]:
        """StreamResponse dicts, one per token; raises TgiError (before or during generation)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        t_start = time.perf_counter()
        self.metrics.counters["tgi_request_count"] += 1
        p = body.get("parameters") or {}
        try:  # the concurrency permit first, then validation (fact: behaviour.overloaded_order)
            if self.in_flight >= self.args.max_concurrent_requests:
                raise TgiError("overloaded", "Model is overloaded")
            if stream and (p.get("best_of") or 1) != 1:
                raise validation("`best_of` != 1 is not allowed for this endpoint")
            if stream and p.get("decoder_input_details"):
                raise validation("`decoder_input_details` == true is not supported when streaming tokens")
            ids, sp = self.validate(body)
        except TgiError as e:
            self.metrics.fail(e.error_type)
            raise
        self.in_flight += 1
        self.metrics.batch_size.set(self.in_flight)
        top_n, total_new = sp["logprobs"], sp.pop("total_new")
        index, n_gen, text, finish, stop_reason = 0, 0, [], None, None
        t_first = None
        inputs, input_length = body["inputs"], len(ids)
        try:
            while True:  # one chunk per pass (fact: behaviour.requeue)
                params = SamplingParams(**sp, output_kind=RequestOutputKind.DELTA)
                chunk_text, chunk_finish = [], None
                async for out in self.engine.generate({"prompt_token_ids": ids}, params, request_id=uuid.uuid4().hex):
                    c = out.outputs[0]
                    t_first = t_first or time.perf_counter()
                    for j, tid in enumerate(c.token_ids):
                        index += 1
                        n_gen += 1
                        step = c.logprobs[j] if c.logprobs else None
                        tok = {"id": int(tid), "text": self.token_text(int(tid), c.text, j == 0),
                               "logprob": float(step[tid].logprob) if step and tid in step else None,
                               "special": tid in self.special}
                        ev: dict[str, Any] = {"index": index, "token": tok, "generated_text": None, "details": None}
                        if top_n and step:
                            ev["top_tokens"] = [{"id": int(k), "text": self.token_text(int(k), "", False) or "",
                                                 "logprob": float(v.logprob), "special": int(k) in self.special}
                                                for k, v in sorted(step.items(), key=lambda kv: -kv[1].logprob)[:top_n]]
                        if not tok["special"]:
                            chunk_text.append(tok["text"])
                        last = c.finish_reason is not None and j == len(c.token_ids) - 1
                        if last:
                            chunk_finish, stop_reason = c.finish_reason, c.stop_reason
                            text += chunk_text
                            again = chunk_finish == "length" and n_gen < total_new
                            if again:  # re-validate prompt + output with the same max_new_tokens
                                inputs = inputs + "".join(chunk_text)
                                try:
                                    ids, sp["max_tokens"], _ = self.lengths(inputs, p.get("max_new_tokens"))
                                except TgiError:
                                    again = False  # no longer fits: the stream ends `length`
                            if again:
                                yield ev  # an intermediate token: the continuation follows
                                continue
                            finish = chunk_finish
                            reason = ("length" if finish == "length" else
                                      "stop_sequence" if isinstance(stop_reason, str) else "eos_token")
                            ev["generated_text"] = "".join(text)
                            if p.get("details", True):
                                ev["details"] = {"finish_reason": reason, "generated_tokens": n_gen,
                                                 "input_length": input_length, "seed": sp.get("seed")}
                        yield ev
                if finish is not None or chunk_finish is None:
                    break
        except TgiError:
            raise
        except Exception as e:  # the engine failed mid-generation: TGI's 424 "generation"
            self.metrics.fail("generation")
            raise TgiError("generation", f"Request failed during generation: {type(e).__name__}: {e}") from e
        finally:
            self.in_flight -= 1
            self.metrics.batch_size.set(self.in_flight)
        if finish is None:  # server.rs: a stream without its End event
            self.metrics.fail("incomplete")
            if stream:
                raise TgiError("incomplete_generation_stream", "Incomplete generation stream")
            raise TgiError("incomplete_generation", "Incomplete generation")
        now = time.perf_counter()
        m = self.metrics
        m.counters["tgi_request_success"] += 1
        m.duration.observe(now - t_start)
        m.queue.observe((t_first or now) - t_start)
        m.inference.observe(now - (t_first or now))
        m.tpot.observe((now - t_start) / max(n_gen, 1))
        m.generated.observe(n_gen)


def build_app(double: TgiDouble) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def body_of(request: Request) -> dict[str, Any] | Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError as e:
            return PlainTextResponse(f"Failed to parse the request body as JSON: {e}", status_code=422)
        if not isinstance(body, dict) or not isinstance(body.get("inputs"), str):
            return PlainTextResponse("Failed to deserialize the JSON body into the target type: "
                                     "missing field `inputs`", status_code=422)
        return body

    async def generate_stream(request: Request) -> Response:
        body = await body_of(request)
        return body if isinstance(body, Response) else stream_response(body)

    def stream_response(body: dict[str, Any]) -> Response:
        async def events() -> AsyncIterator[bytes]:
            try:
                async for ev in double.generate(body, stream=True):
                    yield b"data:" + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n"
            except TgiError as e:  # TGI: errors travel inside the 200 event stream
                yield b"data:" + json.dumps(e.body()).encode() + b"\n\n"

        headers = {"x-compute-type": "cpu+vllm-double", "x-compute-characters": str(len(body["inputs"])),
                   "X-Accel-Buffering": "no", "cache-control": "no-cache"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def generate(request: Request) -> Response:
        body = await body_of(request)
        return body if isinstance(body, Response) else await single_response(body)

    async def compat_generate(request: Request) -> Response:
        """``POST /`` (TGI's compat_generate, where the text-generation package posts): ``"stream":
        true`` is /generate_stream's event stream, else /generate's answer wrapped in a one-element
        array (TGI: "to match api-inference"; the package reads ``payload[0]``)."""
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        stream = body.pop("stream", False)
        if not isinstance(stream, bool):  # CompatGenerateRequest.stream: boolean (serde's rejection)
            return PlainTextResponse("Failed to deserialize the JSON body into the target type: stream: "
                                     f"invalid type: expected a boolean, got {stream!r}", status_code=422)
        return stream_response(body) if stream else await single_response(body, as_array=True)

    async def single_response(body: dict[str, Any], as_array: bool = False) -> Response:
        try:
            evs = [ev async for ev in double.generate(body, stream=False)]
        except TgiError as e:
            return JSONResponse(e.body(), status_code=TgiError.STATUS[e.error_type])
        last = evs[-1]
        details = None
        if last.get("details"):
            details = {**last["details"], "prefill": [], "tokens": [ev["token"] for ev in evs]}
            details.pop("input_length", None)
            if any(ev.get("top_tokens") for ev in evs):  # TGI: skip_serializing_if Vec::is_empty
                details["top_tokens"] = [ev.get("top_tokens") or [] for ev in evs]
        answer = {"generated_text": last["generated_text"], "details": details}
        return JSONResponse([answer] if as_array else answer)

    async def info(request: Request) -> Response:
        return JSONResponse(double.info())

    async def health(request: Request) -> Response:
        try:
            await double.engine.check_health()
        except Exception:  # any engine failure means unhealthy
            return JSONResponse({"error": "unhealthy", "error_type": "healthcheck"}, status_code=503)
        return Response(status_code=200)

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(double.metrics.text(), media_type="text/plain; version=0.0.4")

    return Starlette(routes=[Route("/", compat_generate, methods=["POST"]),
                             Route("/generate_stream", generate_stream, methods=["POST"]),
                             Route("/generate", generate, methods=["POST"]),
                             Route("/info", info), Route("/health", health), Route("/metrics", metrics)])


async def amain(args: argparse.Namespace) -> None:
    import uvicorn
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    openapi = None
    if args.openapi and Path(args.openapi).exists():
        openapi = json.loads(Path(args.openapi).read_text())
    # TGI's server reads PREFIX_CACHING from its environment (fact: PREFIX_CACHING); so does the double
    prefix = os.environ.get("PREFIX_CACHING", "1").lower() in ("1", "true")
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(
        model=args.model, dtype=args.dtype, max_model_len=args.max_total_tokens, seed=0,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes, enforce_eager=True, enable_prefix_caching=prefix))
    try:
        tok = engine.get_tokenizer()
        if asyncio.iscoroutine(tok):
            tok = await tok
        double = TgiDouble(engine, tok, args, openapi)
        cache = engine.vllm_config.cache_config
        if cache.num_gpu_blocks:
            double.metrics.kv_budget.set(int(cache.num_gpu_blocks) * int(cache.block_size))
        app = build_app(double)
        server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                               timeout_graceful_shutdown=2))
        print(f"TGI protocol double (vLLM engine) on http://{args.host}:{args.port} "
              f"schema-validation={'on' if openapi else 'off'} prefix-caching={prefix}", flush=True)
        await server.serve()
    finally:
        engine.shutdown()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="TEST DOUBLE: TGI 3.3 native protocol on the real vLLM engine")
    p.add_argument("--model", required=True, help="local HF model directory")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-total-tokens", type=int, default=512)
    p.add_argument("--max-input-tokens", type=int, default=None)
    p.add_argument("--max-concurrent-requests", type=int, default=128)
    p.add_argument("--max-stop-sequences", type=int, default=4)
    p.add_argument("--kv-cache-memory-bytes", type=int, default=64 * 2**20)
    p.add_argument("--openapi", default=str(DEFAULT_OPENAPI), help="TGI OpenAPI JSON used to validate requests")
    args = p.parse_args(argv)
    if args.max_input_tokens is None:
        args.max_input_tokens = args.max_total_tokens - 1
    asyncio.run(amain(args))


if __name__ == "__main__":
    main()

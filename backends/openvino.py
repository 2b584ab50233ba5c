"""OpenVINO GenAI: ``ContinuousBatchingPipeline`` in an engine process of its own, on CPU.

A second, independent serving engine (paged KV cache, continuous batching, prefix caching, chunked
prefill as "dynamic split-fuse", its own tokenizer conversion and NNCF weight compression). The
checkpoint is exported to OpenVINO IR once (backends/models/openvino_export.py, cached). The
pipeline runs in backends/openvino_engine.py's process (its ``step()`` holds the GIL, so stepping it
in this process would stall the measuring event loop); that process stamps every token with
``perf_counter_ns()`` when ``step()`` hands it over (the engine-side stamp) and the stream stamps
it again when it takes it (the delivery stamp, as for every backend). The engine process dies with
ours; when it dies first, every request in it fails as ``engine_dead`` and so do later ones.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from adapters.openvino import OpenVINOPlan, openvino_plan
from adapters.spec import ServingSpec
from backends.openvino_engine import decode, encode
from backends.registry import BackendEntry, register
from core.errors import BackendRequestError, BackendStartError, FailureKind
from core.lazy import require
from core.records import BackendDescription, Capabilities, GenerationRequest, StreamEnd, StreamItem, TokenEvent

CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
                    notes=("model exported to OpenVINO IR by optimum-intel (cached); weights compressed by "
                           "NNCF at export for int8/int4",))
START_TIMEOUT_S = 600.0  # loading and compiling a 7B model on CPU takes minutes


@dataclass
class _Req:
    out: asyncio.Queue
    t_first_ns: int = 0
    t_last_ns: int = 0
    t_added_ns: int = 0
    n_tokens: int = 0
    n_prompt: int | None = None
    finish: str | None = None


class OpenVINOBackend:
    name = "openvino"

    def __init__(self, spec: ServingSpec, name: str = "openvino", native: OpenVINOPlan | None = None) -> None:
        from backends.models.probe import probe

        self.spec = spec
        self.name = name
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = native or openvino_plan(spec, probe(spec.model))
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._reqs: dict[int, _Req] = {}
        self._dead: str | None = None
        self._n = 0
        self._info: dict[str, Any] = {}
        self._stats: dict[str, Any] = {}
        self._export: dict[str, Any] = {}
        self.cancelled_in_engine = 0  # cancels that reached a request still in the engine

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "OpenVINOBackend":
        from backends.models.openvino_export import MODEL_XML, export_model, weight_types

        require("openvino_genai", "openvino")
        loop = asyncio.get_running_loop()
        # start-up lines go to stderr: the run files them in the backend's log and the console's
        # status line shows the latest (an export of a large model takes minutes)
        entry, hit = await loop.run_in_executor(None, lambda: export_model(
            self.spec.model, dict(self.plan.export), log=lambda line: print(line, file=sys.stderr, flush=True)))
        ir = entry.path / "model"
        print(f"OpenVINO IR {'from the cache' if hit else 'exported'}: {ir} (exporter log: {entry.path / 'export.log'})",
              file=sys.stderr, flush=True)
        types = await loop.run_in_executor(None, weight_types, ir / MODEL_XML)
        self._export = {"cache_key": entry.key, "cache_hit": hit, "exporter": entry.meta.get("exporter"),
                        "argv": entry.meta.get("argv"), "weight_types": types,
                        "loaded_compression": _compression(types)}
        scheduler = dict(self.plan.scheduler)
        if "cache_size" not in scheduler and "num_kv_blocks" not in scheduler:
            scheduler["cache_size"] = 1  # GiB; the engine's default (0) sizes the cache from free memory
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "backends.openvino_engine", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "OPENVINO_TELEMETRY_OPT_OUT": "1"})
        self._send(("config", {"model": str(ir), "scheduler": scheduler, "device": self.plan.device,
                               "properties": dict(self.plan.properties), "max_model_len": self.plan.max_model_len}))
        try:
            first = await asyncio.wait_for(self._frame(self._proc.stdout), START_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            first = None
        if not first or first[0] != "ready":
            code = await self._stop()
            why = first[1] if first and first[0] == "fatal" else f"the engine process exited (code {code})"
            raise BackendStartError(f"OpenVINO pipeline failed to start: {why}")
        self._info = first[1]
        self._reader = asyncio.create_task(self._read_events(self._proc))
        return self

    def _send(self, msg: Any) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(encode(msg))

    @staticmethod
    async def _frame(stdout: asyncio.StreamReader) -> Any:
        head = await stdout.readexactly(4)
        return decode(await stdout.readexactly(int.from_bytes(head, "little")))

    async def _read_events(self, proc: asyncio.subprocess.Process) -> None:
        try:
            while True:
                msg = await self._frame(proc.stdout)
                kind = msg[0]
                if kind == "step":
                    for rid, ids in msg[2]:
                        r = self._reqs.get(rid)
                        if r is not None:
                            r.t_first_ns = r.t_first_ns or msg[1]
                            r.t_last_ns = msg[1]
                            r.n_tokens += len(ids)
                            r.out.put_nowait(tuple(ids))
                elif kind == "cancelled":
                    self.cancelled_in_engine += 1
                elif kind == "added":
                    if (r := self._reqs.get(msg[1])) is not None:
                        r.n_prompt = msg[2]
                elif kind == "error":
                    if (r := self._reqs.pop(msg[1], None)) is not None:
                        r.out.put_nowait(BackendRequestError(msg[2], msg[3]))
                elif kind == "end":
                    _, rid, _t, finish, status, self._stats = msg
                    if (r := self._reqs.pop(rid, None)) is not None:
                        r.finish = finish
                        r.out.put_nowait(None if status != "IGNORED" else BackendRequestError(
                            FailureKind.ENGINE, "the engine ignored the request: prompt + output do not fit "
                            "its KV cache"))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        code = await proc.wait()
        self._dead = f"the OpenVINO engine process exited (code {code})"
        for r in self._reqs.values():
            r.out.put_nowait(BackendRequestError(FailureKind.ENGINE_DEAD, self._dead))
        self._reqs.clear()

    async def _stop(self) -> int | None:
        p, self._proc = self._proc, None
        if p is None:
            return None
        if p.returncode is None:
            try:
                p.stdin.write(encode(("stop",)))
                p.stdin.close()
            except (ConnectionError, RuntimeError):
                pass
            try:
                await asyncio.wait_for(p.wait(), 10)
            except asyncio.TimeoutError:
                p.kill()
                await p.wait()
        return p.returncode

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()
        if self._reader is not None:  # ends at the process's EOF
            try:
                await asyncio.wait_for(self._reader, 10)
            except asyncio.TimeoutError:
                pass
            self._reader = None

    # ------------------------------------------------------------------ requests
    def _params(self, req: GenerationRequest) -> dict[str, Any]:
        p: dict[str, Any] = {"max_new_tokens": req.max_tokens, "ignore_eos": req.ignore_eos,
                             "rng_seed": req.seed if req.seed is not None else self.plan.seed}
        if req.temperature > 0:
            p.update(do_sample=True, temperature=req.temperature, top_p=req.top_p)
        return p

    async def stream(self, req: GenerationRequest) -> AsyncIterator[StreamItem]:
        if self._proc is None or self._dead:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, self._dead or "engine is not running")
        if req.prompt_token_ids is not None:
            prompt: dict[str, Any] = {"ids": list(req.prompt_token_ids)}
        elif req.messages is not None:
            prompt = {"messages": [list(m) for m in req.messages]}
        else:
            prompt = {"text": req.prompt_text}
        self._n += 1
        rid = self._n
        r = self._reqs[rid] = _Req(asyncio.Queue(), t_added_ns=time.perf_counter_ns())
        self._send(("add", rid, prompt, self._params(req)))
        done = False
        first = last = 0
        try:
            while True:
                item = await r.out.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                if item is None:
                    done = True
                    break
                last = time.perf_counter_ns()
                first = first or last
                yield TokenEvent(t_ns=last, token_ids=item)
        finally:
            if not done and self._proc is not None and not self._dead:  # the consumer went away
                self._reqs.pop(rid, None)
                self._send(("cancel", rid))  # frees the engine's slot
        yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=r.finish, prompt_tokens=r.n_prompt,
                        completion_tokens=r.n_tokens, engine_metrics=_engine_metrics(r, first, last))

    def describe(self) -> BackendDescription:
        return BackendDescription(
            name=self.name, framework="openvino-genai", version=self._info.get("version", "unknown"),
            native_config={**self.plan.as_dict(), "resolved": {**self._info.get("scheduler", {}), **self._stats}},
            extra={"engine_pid": self._info.get("pid"), "openvino": self._info.get("openvino"),
                   "export": self._export, "quantization": {
                       "method": self._export.get("loaded_compression"), "requested": self.spec.quantization,
                       "inference_precision": self.plan.properties.get("INFERENCE_PRECISION_HINT")}})


def _compression(types: dict[str, int]) -> str | None:
    """What the exported weights are: int4/int8 when NNCF compressed them, else None."""
    if types.get("u4") or types.get("i4"):
        return "int4"
    if types.get("u8") or types.get("i8"):
        return "int8"
    return None


def _engine_metrics(r: _Req, first_ns: int, last_ns: int) -> dict[str, float]:
    """Engine-side stamps (when step() handed each token over), same keys as the vLLM backend's."""
    if not r.t_first_ns:
        return {}
    out = {"first_token_latency_s": (r.t_first_ns - r.t_added_ns) / 1e9,
           "engine_first_token_ts": r.t_first_ns / 1e9, "engine_last_token_ts": r.t_last_ns / 1e9,
           "decode_s": (r.t_last_ns - r.t_first_ns) / 1e9, "num_generation_tokens": float(r.n_tokens)}
    if first_ns:  # perf_counter is CLOCK_MONOTONIC on both sides: the event loop's delivery delay
        out["first_token_delivery_s"] = (first_ns - r.t_first_ns) / 1e9
        out["last_token_delivery_s"] = (last_ns - r.t_last_ns) / 1e9
    return out


def plan(spec: ServingSpec, native: OpenVINOPlan) -> dict[str, Any]:
    """`compare plan`: the pipeline's native configuration (nothing is exported)."""
    return {"engine": "openvino_genai.ContinuousBatchingPipeline", **native.as_dict()}


def check() -> tuple[bool, str]:
    from pathlib import Path

    from backends.models.openvino_export import _DEFAULT, EXPORTER_ENV

    cli = Path(os.environ.get(EXPORTER_ENV) or _DEFAULT)
    if not cli.is_file():
        return False, f"exporter missing ({cli}): bash scripts/setup.d/45-openvino.sh"
    return True, "ready"


register(BackendEntry(
    name="openvino", summary="OpenVINO GenAI (ContinuousBatchingPipeline in its own engine process, CPU), model exported once",
    factory="backends.openvino:OpenVINOBackend", plan="backends.openvino:plan", resolve="adapters.openvino:openvino_plan",
    requires=("openvino_genai",), extra="pip install 'llm-compare[openvino]' and bash scripts/setup.d/45-openvino.sh",
    check="backends.openvino:check", capabilities=CAPS,
))

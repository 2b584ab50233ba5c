"""OpenVINO GenAI in-process: ``ContinuousBatchingPipeline`` driven by one thread.

A second, independent serving engine (paged KV cache, continuous batching, prefix caching, chunked
prefill as "dynamic split-fuse", its own tokenizer conversion and NNCF weight compression) that
runs on CPU. The checkpoint is exported to OpenVINO IR once (backends/models/openvino_export.py,
cached). One driver thread owns the pipeline: it adds requests, calls ``step()`` and reads every
request's new tokens; each step's tokens are stamped with ``perf_counter_ns()`` when ``step()``
hands them over (the engine-side stamp) and handed to the event loop in one batch, where the
stream stamps them again when it takes them (the delivery stamp, as for every backend).
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from adapters.openvino import OpenVINOPlan, openvino_plan
from adapters.spec import ServingSpec
from backends.registry import BackendEntry, register
from core.errors import BackendRequestError, BackendStartError, FailureKind
from core.lazy import require
from core.records import BackendDescription, Capabilities, GenerationRequest, StreamEnd, StreamItem, TokenEvent

CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
                    notes=("model exported to OpenVINO IR by optimum-intel (cached); weights compressed by "
                           "NNCF at export for int8/int4",))
_FINISH = {"LENGTH": "length", "STOP": "stop", "NONE": None}


@dataclass
class _Req:
    rid: int
    prompt: Any
    config: Any
    out: asyncio.Queue
    handle: Any = None
    t_added_ns: int = 0
    t_first_ns: int = 0
    t_last_ns: int = 0
    n_tokens: int = 0
    finish: str | None = None


class OpenVINOBackend:
    name = "openvino"

    def __init__(self, spec: ServingSpec, name: str = "openvino", native: OpenVINOPlan | None = None) -> None:
        from backends.models.probe import probe

        self.spec = spec
        self.name = name
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = native or openvino_plan(spec, probe(spec.model))
        self._pipe: Any = None
        self._tok: Any = None
        self._ov: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cmds: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._dead: str | None = None
        self._n = 0
        self._version = "unknown"
        self._export: dict[str, Any] = {}

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "OpenVINOBackend":
        from backends.models.openvino_export import MODEL_XML, export_model, weight_types

        ovg = require("openvino_genai", "openvino")
        self._ov = require("openvino", "openvino")
        self._version = getattr(ovg, "__version__", "unknown").split("-")[0]
        loop = self._loop = asyncio.get_running_loop()
        entry, hit = await loop.run_in_executor(None, export_model, self.spec.model, dict(self.plan.export))
        ir = entry.path / "model"
        types = await loop.run_in_executor(None, weight_types, ir / MODEL_XML)
        self._export = {"cache_key": entry.key, "cache_hit": hit, "exporter": entry.meta.get("exporter"),
                        "argv": entry.meta.get("argv"), "weight_types": types,
                        "loaded_compression": _compression(types)}
        try:
            self._pipe = await loop.run_in_executor(None, self._load, ovg, str(ir))
        except Exception as e:
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            raise BackendStartError(f"OpenVINO pipeline failed to start: {type(e).__name__}: {first}") from e
        self._tok = self._pipe.get_tokenizer()
        self._thread = threading.Thread(target=self._drive, name="openvino-driver", daemon=True)
        self._thread.start()
        return self

    def _load(self, ovg: Any, ir: str) -> Any:
        sc = ovg.SchedulerConfig()
        if "cache_size" not in self.plan.scheduler and "num_kv_blocks" not in self.plan.scheduler:
            sc.cache_size = 1  # GiB; the engine's default (0) would size the cache from free memory
        for k, v in self.plan.scheduler.items():
            setattr(sc, k, v)
        self._scheduler = {k: getattr(sc, k) for k in ("max_num_seqs", "max_num_batched_tokens", "cache_size",
                                                       "num_kv_blocks", "dynamic_split_fuse",
                                                       "enable_prefix_caching")}
        return ovg.ContinuousBatchingPipeline(ir, sc, self.plan.device, dict(self.plan.properties))

    async def __aexit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._cmds.put(("stop", None))
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 30)
            self._thread = None
        self._pipe = None

    # ------------------------------------------------------------------ the driver thread
    def _drive(self) -> None:
        live: dict[int, _Req] = {}
        try:
            while True:
                # a cancelled request leaves ``live`` at once but the engine drops it only in a step
                busy = bool(live) or self._pipe.has_non_finished_requests()
                block = not busy
                while True:
                    try:
                        cmd, arg = self._cmds.get(block=block)
                    except queue.Empty:
                        break
                    block = False
                    if cmd == "stop":
                        for r in live.values():
                            r.handle.cancel()
                        self._fail_all(live, FailureKind.CANCELLED, "backend stopped")
                        return
                    if cmd == "add":
                        self._add(arg, live)
                    elif cmd == "cancel" and arg in live:
                        live.pop(arg).handle.cancel()
                if not live and not self._pipe.has_non_finished_requests():
                    continue
                self._pipe.step()
                t = time.perf_counter_ns()
                batch = []
                for rid in list(live):
                    r = live[rid]
                    ids: list[int] = []
                    while r.handle.can_read():
                        for out in r.handle.read().values():
                            ids.extend(out.generated_ids)
                            r.finish = _FINISH.get(out.finish_reason.name, out.finish_reason.name.lower()) or r.finish
                    if ids:
                        r.t_first_ns = r.t_first_ns or t
                        r.t_last_ns = t
                        r.n_tokens += len(ids)
                        batch.append((r, tuple(ids)))
                    status = r.handle.get_status().name
                    if status == "IGNORED":  # the scheduler dropped it: it can never fit the KV cache
                        batch.append((r, BackendRequestError(FailureKind.ENGINE, "the engine ignored the request: "
                                                             "prompt + output do not fit its KV cache")))
                        del live[rid]
                    elif status != "RUNNING":
                        batch.append((r, None))
                        del live[rid]
                if batch:
                    self._loop.call_soon_threadsafe(_dispatch, batch)
        except BaseException as e:  # the engine failed: every request in it fails, later ones too
            self._dead = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}"
            self._fail_all(live, FailureKind.ENGINE_DEAD, self._dead)
            while True:  # requests that were on their way when it failed
                cmd, arg = self._cmds.get()
                if cmd == "stop":
                    return
                if cmd == "add":
                    self._fail_all({arg.rid: arg}, FailureKind.ENGINE_DEAD, self._dead)

    def _add(self, r: _Req, live: dict[int, _Req]) -> None:
        try:
            r.handle = self._pipe.add_request(r.rid, r.prompt, r.config)
        except Exception as e:  # a request the engine refuses (e.g. longer than its cache)
            err = BackendRequestError(FailureKind.VALIDATION, f"{type(e).__name__}: {str(e)[:300]}")
            self._loop.call_soon_threadsafe(r.out.put_nowait, err)
            return
        r.t_added_ns = time.perf_counter_ns()
        live[r.rid] = r

    def _fail_all(self, live: dict[int, _Req], kind: FailureKind, message: str) -> None:
        for r in live.values():
            self._loop.call_soon_threadsafe(r.out.put_nowait, BackendRequestError(kind, message))
        live.clear()

    # ------------------------------------------------------------------ requests
    def _prompt(self, req: GenerationRequest) -> tuple[Any, int]:
        if req.prompt_token_ids is not None:
            import numpy as np

            ids = np.asarray([req.prompt_token_ids], dtype=np.int64)
            return self._ov.Tensor(ids), ids.shape[1]
        if req.messages is not None:
            text = self._tok.apply_chat_template([{"role": r, "content": c} for r, c in req.messages],
                                                 add_generation_prompt=True)
            ids = self._tok.encode(text, add_special_tokens=False).input_ids
        else:
            ids = self._tok.encode(req.prompt_text).input_ids
        return ids, ids.shape[1]

    def _generation_config(self, req: GenerationRequest) -> Any:
        import openvino_genai as ovg

        gc = ovg.GenerationConfig()
        gc.max_new_tokens = req.max_tokens
        gc.ignore_eos = req.ignore_eos
        gc.rng_seed = req.seed if req.seed is not None else self.plan.seed
        if req.temperature > 0:
            gc.do_sample, gc.temperature, gc.top_p = True, req.temperature, req.top_p
        return gc

    async def stream(self, req: GenerationRequest) -> AsyncIterator[StreamItem]:
        if self._pipe is None or self._dead:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, self._dead or "engine is not running")
        prompt, n_prompt = self._prompt(req)
        limit = self.plan.max_model_len
        if limit and n_prompt + req.max_tokens > limit:
            raise BackendRequestError(FailureKind.VALIDATION, f"prompt ({n_prompt}) + max_tokens "
                                      f"({req.max_tokens}) exceeds max_model_len {limit}")
        self._n += 1
        r = _Req(self._n, prompt, self._generation_config(req), asyncio.Queue())
        self._cmds.put(("add", r))
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
            if not done:  # the consumer went away (cancelled, timed out): free the engine's slot
                self._cmds.put(("cancel", r.rid))
        yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=r.finish, prompt_tokens=n_prompt,
                        completion_tokens=r.n_tokens, engine_metrics=_engine_metrics(r, first, last))

    def describe(self) -> BackendDescription:
        resolved = dict(getattr(self, "_scheduler", {}))
        if self._pipe is not None:
            m = self._pipe.get_metrics()
            resolved["kv_cache_size_in_bytes"] = int(getattr(m, "kv_cache_size_in_bytes", 0))
        return BackendDescription(
            name=self.name, framework="openvino-genai", version=self._version,
            native_config={**self.plan.as_dict(), "resolved": resolved},
            extra={"export": self._export, "quantization": {
                "method": self._export.get("loaded_compression"), "requested": self.spec.quantization,
                "inference_precision": self.plan.properties.get("INFERENCE_PRECISION_HINT")}})


def _dispatch(batch: list[tuple[_Req, Any]]) -> None:
    """On the event loop: hand each request its tokens, None when it ended or the error that ended
    it (one call per engine step)."""
    for r, ids in batch:
        r.out.put_nowait(ids)


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
    from backends.models.openvino_export import EXPORTER_ENV, _DEFAULT
    import os
    from pathlib import Path

    cli = Path(os.environ.get(EXPORTER_ENV) or _DEFAULT)
    if not cli.is_file():
        return False, f"exporter missing ({cli}): bash scripts/setup.d/45-openvino.sh"
    return True, "ready"


register(BackendEntry(
    name="openvino", summary="OpenVINO GenAI in-process (ContinuousBatchingPipeline, CPU), model exported once",
    factory="backends.openvino:OpenVINOBackend", plan="backends.openvino:plan", resolve="adapters.openvino:openvino_plan",
    requires=("openvino_genai",), extra="pip install 'llm-compare[openvino]' and bash scripts/setup.d/45-openvino.sh",
    check="backends.openvino:check", capabilities=CAPS,
))

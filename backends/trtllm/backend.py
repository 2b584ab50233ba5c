"""TensorRT-LLM backends. NOT EXECUTED AGAINST TENSORRT-LLM ON THESE MACHINES (no GPU, no NGC access):
the commands come from NVIDIA/TensorRT-LLM's sources at the releases cited in adapters/trtllm.py,
and the machinery around them runs for real against local test images and vLLM's OpenAI server.

* ``trtllm`` -- the normal way users run it: ``nvcr.io/nvidia/tensorrt-llm/release:<tag>``. The
  quantize/build steps run as containers into the engine cache (backends/trtllm/pipeline.py),
  then ``trtllm-serve`` runs in a container and is driven over its OpenAI-compatible HTTP API.
  ``trtllm@http://HOST:PORT`` talks to an already running trtllm-serve instead.
* ``trtllm-inproc`` -- ``tensorrt_llm.LLM`` in this process, streaming with
  ``generate_async(..., streaming=True)`` (PyTorch flow only).
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import yaml

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target
from adapters.trtllm import CONFIG_DIR, LLM_ARGS_FILE, MODEL_DIR, SERVE_PORT, WORK_DIR, TrtllmPlan, trtllm_plan_for
from core.records import (BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamEnd, StreamItem,
                          TokenEvent)
from core.errors import BackendRequestError, BackendStartError, FailureKind
from backends.base import BackendBase
from backends.http.protocol import Parsed
from backends.http.trtllm_openai import TrtllmStream, trtllm_payload, trtllm_protocol
from backends.http.sse import RawEvent
from backends.http_backends import HttpStreamBackend
from backends.trtllm import INPROC_CAPS, NOT_RUN, not_run, release_capabilities

START_TIMEOUT_S = 1800.0  # trtllm-serve loads weights / engines and autotunes before /health


# the stream parsing (tokens counted per stream, never per chunk id) lives with the other wire formats
__all__ = ["parse_trtllm_completions", "trtllm_payload", "trtllm_protocol"]


def parse_trtllm_completions(raw: RawEvent, stream: TrtllmStream | None = None) -> list[Parsed]:
    """One chunk, parsed by ``stream`` (one per request: it holds the running usage count); a
    chunk on its own with none."""
    return (stream or TrtllmStream()).feed(raw)


def detect_gpu() -> tuple[str | None, str | None]:
    from backends.models.probe import probe_machine

    m = probe_machine()
    return m.gpu_name, m.compute_capability


def resolve(spec: ServingSpec, target: Target) -> TrtllmPlan:
    """The pure plan with the facts only this machine knows: its GPU and the checkpoint's quantization.
    A checkpoint here with missing files fails in one line, before any container starts."""
    if Path(spec.model).exists():
        from backends.models.engine_cache import validate_checkpoint

        validate_checkpoint(spec.model)
    return trtllm_plan_for(spec, target)


def resolve_plan(spec: ServingSpec) -> TrtllmPlan:
    from backends.models.probe import probe

    return resolve(spec, probe(spec.model))


def plan(spec: ServingSpec, native: TrtllmPlan | None = None, target: str | None = None) -> dict[str, Any]:
    """`compare plan`: the flow, quantize/build commands, LlmArgs YAML and container settings."""
    if native is None:
        return {"endpoint": target, "protocol": "trtllm-serve OpenAI /v1/completions", "note": NOT_RUN}
    p = native
    out = p.as_dict()
    out["llm_args_yaml_text"] = yaml.safe_dump(p.llm_args, sort_keys=False) if p.llm_args else ""
    out["serve_container"] = _serve_container(spec, p, "<cache entry>", "<run config dir>").settings()
    out["engine_cache"] = "steps run once per (checkpoint content, steps, image, GPU); see `compare cache ls`"
    return out


def _serve_container(spec: ServingSpec, p: TrtllmPlan, artifact: str | None, config_dir: str | None):
    from containers.manager import ContainerSpec, parse_gpus

    mounts = [(str(spec.model), MODEL_DIR)]
    if artifact:
        mounts.append((artifact, WORK_DIR))
    if config_dir and p.llm_args:
        mounts.append((config_dir, CONFIG_DIR))
    if spec.tokenizer and spec.tokenizer != spec.model:
        mounts.append((str(spec.tokenizer), "/tokenizer"))
    gpus = parse_gpus(spec.native_for("trtllm").get("gpus", "all"))
    return ContainerSpec(image=p.image, command=p.serve_argv, container_port=SERVE_PORT, mounts=tuple(mounts),
                         gpus=gpus, shm_size="2g", env=(("HOME", "/tmp"),))


class TrtllmBackend(HttpStreamBackend):
    """trtllm-serve in its container (after the cached quantize/build steps), or at a URL."""

    framework = "tensorrt-llm"

    def __init__(self, spec: ServingSpec, name: str = "trtllm", target: str | None = None,
                 metrics: str | None = "trtllm-json", cache_dir: str | None = None, pull: bool = False,
                 native: TrtllmPlan | None = None) -> None:
        if not target:
            from backends.models.engine_cache import validate_checkpoint

            validate_checkpoint(spec.model)  # missing files: one line, before any container starts
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = None if target else (native or resolve_plan(spec))
        native_opts = spec.native_for("trtllm")
        super().__init__(spec, name, protocol=trtllm_protocol(bool(native_opts.get("detokenize", True))),
                         target=target, metrics=metrics)
        self.cache_dir, self.pull = cache_dir, pull
        self.results_dir: Path | None = None
        self._container: Any = None
        self._config_dir: tempfile.TemporaryDirectory | None = None
        self._artifact: dict[str, Any] = {}
        self._timings: dict[str, float] = {}

    def attach_results_dir(self, path: Path) -> None:
        self.results_dir = Path(path)

    @property
    def capabilities(self) -> Capabilities:
        """Per release: the plan's, or for trtllm@URL the --native trtllm.version given (if any)."""
        version = self.plan.version if self.plan else self.spec.native_for("trtllm").get("version")
        return release_capabilities(not_run(super().capabilities), str(version) if version else None)

    async def _start_server(self) -> None:
        if self.plan is None:  # trtllm@URL: an already running trtllm-serve
            return
        from backends.models.engine_cache import EngineCache
        from containers.manager import ManagedContainer, connect, ensure_image, parse_gpus

        native = self.spec.native_for("trtllm")
        client = await asyncio.to_thread(connect)
        await asyncio.to_thread(ensure_image, client, self.plan.image, self.pull)
        artifact = None
        if self.plan.steps:
            from backends.trtllm.pipeline import ensure_artifact

            t0 = time.perf_counter()
            entry, hit = await asyncio.to_thread(
                ensure_artifact, self.plan, self.spec.model, cache=EngineCache(self.cache_dir), client=client,
                gpus=parse_gpus(native.get("gpus", "all")), backend=self.name, modelopt_dir=native.get("modelopt_dir"),
                timeout_s=float(native.get("step_timeout_s", 6 * 3600)))
            self._timings["artifact_s"] = time.perf_counter() - t0
            artifact = str(entry.path)
            self._artifact = {"cache_key": entry.key, "cache_hit": hit, "path": artifact,
                              "step_logs": str(entry.path / "logs")}
        self._config_dir = tempfile.TemporaryDirectory(prefix="llm-compare-trtllm-")
        if self.plan.llm_args:
            Path(self._config_dir.name, Path(LLM_ARGS_FILE).name).write_text(
                yaml.safe_dump(self.plan.llm_args, sort_keys=False))
        cspec = _serve_container(self.spec, self.plan, artifact, self._config_dir.name)
        self._container = ManagedContainer(cspec, backend=self.name, pull=self.pull, client=client)
        self.base_url = await asyncio.to_thread(self._container.start)

        async def healthy(base: str) -> bool:
            try:
                async with httpx.AsyncClient(timeout=2.0) as c:
                    return (await c.get(base + "/health")).status_code == 200
            except httpx.HTTPError:
                return False

        self._timings["serve_ready_s"] = await self._container.wait_ready(healthy, timeout_s=START_TIMEOUT_S, poll_s=0.5)

    async def _stop_server(self) -> None:
        if self._container is not None:
            await asyncio.to_thread(self._container.stop)
            if self.results_dir is not None:
                self.results_dir.mkdir(parents=True, exist_ok=True)
                (self.results_dir / f"{self.name.replace('/', '_')}-serve.log").write_text(self._container.final_logs or "")
        if self._config_dir is not None:
            self._config_dir.cleanup()
            self._config_dir = None

    def describe(self) -> BackendDescription:
        d = super().describe()
        d.native_config.update(self.plan.as_dict() if self.plan else {"endpoint": self.base_url})
        d.extra.update({"artifact": self._artifact, "timings_s": self._timings, "not_executed_note": NOT_RUN,
                        "container": self._container.describe() if self._container else None})
        if self.plan:
            d = d.model_copy(update={"version": self.plan.version})
        return d


class TrtllmInprocBackend(BackendBase):
    """``tensorrt_llm.LLM`` in this process (PyTorch flow), streamed with generate_async."""

    def __init__(self, spec: ServingSpec, name: str = "trtllm-inproc", native: TrtllmPlan | None = None) -> None:
        self.spec, self.name = spec, name
        self.plan = native or resolve_plan(spec)
        if self.plan.flow != "pytorch" or self.plan.steps:
            why = ("the engine flow builds in containers" if self.plan.flow != "pytorch"
                   else "quantizing needs the ModelOpt step; pass a pre-quantized ModelOpt checkpoint")
            raise UnsupportedSpecError(name, f"flow={self.plan.flow} quantization={self.plan.quant}", why, "trtllm")
        self._llm: Any = None
        self._version = self.plan.version

    @property
    def capabilities(self) -> Capabilities:
        return INPROC_CAPS

    async def __aenter__(self) -> "TrtllmInprocBackend":
        import importlib

        from core.lazy import MissingFrameworkError

        try:
            trt = importlib.import_module("tensorrt_llm")
        except ImportError as e:
            raise MissingFrameworkError(
                f"{self.name} needs the Python package tensorrt_llm ({e.name or 'tensorrt_llm'} is not importable): "
                "use the `trtllm` backend (NGC container), or on an NVIDIA GPU machine: "
                "pip install tensorrt_llm --extra-index-url https://pypi.nvidia.com") from e
        self._version = getattr(trt, "__version__", self._version)
        try:
            self._llm = await asyncio.to_thread(trt.LLM, model=self.spec.model, tokenizer=self.spec.tokenizer,
                                                **self.plan.llm_args)
        except Exception as e:  # engine start failures come in many types
            raise BackendStartError(f"tensorrt_llm.LLM failed to start: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0] if str(e) else ''}") from e
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._llm is not None:
            await asyncio.to_thread(self._llm.shutdown)
            self._llm = None

    def _prompt(self, req: GenerationRequest) -> Any:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            return self._llm.tokenizer.apply_chat_template(
                [{"role": r, "content": c} for r, c in req.messages], add_generation_prompt=True, tokenize=False)
        return req.prompt_text

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        from tensorrt_llm import SamplingParams

        if self._llm is None:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, "engine is not running")
        sp = SamplingParams(max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
                            ignore_eos=req.ignore_eos, seed=req.seed, logprobs=req.logprobs)
        out = None
        try:
            async for out in self._llm.generate_async(self._prompt(req), sp, streaming=True):
                t = time.perf_counter_ns()
                c = out.outputs[0]
                if c.token_ids_diff:  # CompletionOutput deltas (llmapi); text_diff is the new text
                    yield TokenEvent(t_ns=t, token_ids=tuple(c.token_ids_diff), text=c.text_diff or "")
        except Exception as e:
            raise BackendRequestError(FailureKind.ENGINE, f"{type(e).__name__}: {e}") from e
        c = out.outputs[0] if out is not None else None
        yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=getattr(c, "finish_reason", None),
                        prompt_tokens=len(out.prompt_token_ids) if out is not None and out.prompt_token_ids else None,
                        completion_tokens=len(c.token_ids) if c is not None else None)

    def describe(self) -> BackendDescription:
        return BackendDescription(name=self.name, framework="tensorrt-llm", version=self._version,
                                  native_config=self.plan.as_dict(), extra={"not_executed_note": NOT_RUN})


def _docker_check() -> tuple[bool, str]:
    """Runnable only where a GPU and Docker are; say plainly that it never ran here."""
    if detect_gpu()[0] is None:
        return False, ("no NVIDIA GPU here (TensorRT-LLM needs one; the container pipeline is tested with "
                       "local stand-in images). " + NOT_RUN)
    try:
        from containers.manager import connect

        connect()
    except Exception as e:  # UserError naming how to start the daemon, or docker not installed
        return False, str(e)
    return True, "GPU and Docker present; needs the NGC image (docker pull). " + NOT_RUN

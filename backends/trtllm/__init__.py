"""TensorRT-LLM: trtllm-serve in NVIDIA's release containers or in-process (backend.py), the
quantize/build steps into the engine cache (pipeline.py); adapters/trtllm.py is the pure plan."""
from __future__ import annotations

import dataclasses

from backends.http.openai import COMPLETIONS
from backends.http_backends import http_capabilities
from backends.registry import BackendEntry, register
from core.records import Capabilities

NOT_RUN = ("NOT executed against TensorRT-LLM on these machines: commands are read from NVIDIA's "
           "sources/docs per release; the pipeline and HTTP path were tested with stand-ins")


def not_run(caps: Capabilities) -> Capabilities:
    return caps.model_copy(update={"notes": caps.notes + (NOT_RUN,)})


def release_capabilities(caps: Capabilities, version: str | None) -> Capabilities:
    """The serve flow's capabilities for one release, from its fact sheet: releases whose completions
    stream carries no logprobs do not claim them. No sheet: the capabilities stay, with a note."""
    from adapters.trtllm_facts import facts_for

    f = facts_for(version) if version else None
    if f is None:
        return caps.model_copy(update={"notes": caps.notes + (
            f"TensorRT-LLM {version or '(release unknown)'}: no fact sheet, capabilities not checked per release",)})
    if not f.completions_logprobs:
        caps = caps.model_copy(update={"logprobs": False, "notes": caps.notes + (
            f"TensorRT-LLM {f.release}: /v1/completions answers without logprobs "
            f"(adapters/facts/trtllm-{f.release}.yaml)",)})
    return caps


INPROC_CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=True,
                           continuous_batching=True, notes=(NOT_RUN,))
# the serve flow's capabilities: those of its protocol (backend.trtllm_protocol: the completions
# protocol under its own name, payload and parser)
CAPS = not_run(http_capabilities(dataclasses.replace(COMPLETIONS, name="trtllm-openai")))

register(BackendEntry(
    name="trtllm", summary="TensorRT-LLM: quantize/build steps + trtllm-serve in nvcr.io/nvidia/tensorrt-llm/release "
                           "containers (or trtllm@URL), over its OpenAI API",
    factory="backends.trtllm.backend:TrtllmBackend", plan="backends.trtllm.backend:plan", resolve="backends.trtllm.backend:resolve",
    requires=("httpx", "docker"),
    extra="pip install 'llm-compare[docker]'", check="backends.trtllm.backend:_docker_check",
    notes=(NOT_RUN, "release: --native trtllm.version=1.2.0 (flow chosen by release; engine flow <= 1.3.0rc20)",
           "engine cache: `compare cache ls|rm`"),
    capabilities=CAPS, tuning="backends.trtllm.tuning:SPACE", cache_listing="backends.trtllm.pipeline:cache_row",
))
register(BackendEntry(
    name="trtllm-inproc", summary="TensorRT-LLM in-process: tensorrt_llm.LLM.generate_async(streaming=True)",
    factory="backends.trtllm.backend:TrtllmInprocBackend", plan="backends.trtllm.backend:plan", resolve="backends.trtllm.backend:resolve",
    requires=("tensorrt_llm",),
    extra="run the `trtllm` backend (container) or install TensorRT-LLM from NVIDIA's index: "
          "pip install tensorrt_llm --extra-index-url https://pypi.nvidia.com",
    notes=(NOT_RUN,),
    capabilities=INPROC_CAPS,
))

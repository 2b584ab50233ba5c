"""vLLM: in-process (inproc.py: AsyncLLM, its scheduler stats in stats.py), the OpenAI API server
launched here (server.py) and the same server in a container (container.py); adapters/vllm.py is
the pure spec -> engine-args plan."""
from __future__ import annotations

from backends.http_backends import http_capabilities
from backends.registry import BackendEntry, register
from core.records import Capabilities

CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=True,
                    continuous_batching=True)
CONTAINER_IMAGE = "llm-compare/vllm-cpu:0.32.0"

register(BackendEntry(
    name="vllm", summary="vLLM in-process (AsyncLLM, v1 engine), streaming DELTA outputs",
    factory="backends.vllm.inproc:VllmBackend", plan="backends.vllm.inproc:plan", resolve="adapters.vllm:vllm_plan",
    requires=("vllm",), extra="pip install 'llm-compare[cpu]' (CPU) or 'llm-compare[vllm]' (GPU)",
    capabilities=CAPS, roles=("quant",), default_rank=1, heldout="backends.vllm.heldout:HELDOUT", tuning="backends.vllm.tuning:SPACE",
    native_keys="backends.vllm.native:checked_keys", native_defaults="backends.vllm.native:native_defaults",
))
register(BackendEntry(
    name="vllm-server", summary="vLLM OpenAI API server launched here (same engine config as `vllm`), over HTTP",
    factory="backends.vllm.server:VllmServerBackend", plan="backends.vllm.server:server_plan",
    resolve="adapters.vllm:vllm_plan",
    requires=("vllm", "httpx"), extra="pip install 'llm-compare[cpu]' (CPU) or 'llm-compare[vllm]' (GPU)",
    notes=("compare with `vllm` in one run to see the API-server overhead: --backends vllm,vllm-server",),
    capabilities=http_capabilities("openai"), tuning="backends.vllm.tuning:SPACE", native_section="vllm",
    native_keys="backends.vllm.native:checked_keys",
))
register(BackendEntry(
    name="vllm-container", summary=f"vLLM OpenAI API server in a container ({CONTAINER_IMAGE}), over HTTP",
    factory="backends.vllm.container:VllmContainerBackend", plan="backends.vllm.container:vllm_container_plan",
    resolve="adapters.vllm:vllm_plan",
    requires=("httpx", "docker"), extra="pip install 'llm-compare[docker]' (and a Docker engine)",
    check="backends.vllm.container:docker_check",
    notes=("same engine flags as vllm/vllm-server; image: --native vllm-container.image=NAME, "
           "GPUs: --native vllm-container.gpus=all",
           "build the local image: containers/images/build.sh vllm-cpu"),
    capabilities=http_capabilities("openai"), tuning="backends.vllm.tuning:SPACE", native_section="vllm",
))

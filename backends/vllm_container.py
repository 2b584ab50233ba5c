"""``vllm-container``: vLLM's OpenAI API server in a container, driven over HTTP.

Same spec -> same engine flags as ``vllm`` and ``vllm-server`` (adapters/vllm.py), so
``--backends vllm-server,vllm-container`` isolates what the container adds. Default image: the
locally built llm-compare/vllm-cpu:0.32.0 (containers/images/, CPU, no GPUs); on a GPU host use
e.g. ``--native vllm-container.image=vllm/vllm-openai:v0.10.2 --native vllm-container.gpus=all``
(the official image's entrypoint is the same API server, so the argv is unchanged).
"""
from __future__ import annotations

from typing import Any

from adapters.spec import ServingSpec
from adapters.vllm import vllm_engine_args, vllm_server_argv
from backends.container_http import ContainerHttpBackend, container_options, model_in_container
from backends.registry import BackendEntry, register
from containers.manager import ContainerSpec

DEFAULT_IMAGE = "llm-compare/vllm-cpu:0.32.0"
CONTAINER_PORT = 8000
DEFAULTS = {"image": DEFAULT_IMAGE, "gpus": None, "shm_size": "1g", "host_port": None,
            "pull": False, "ready_timeout_s": 600}


def container_spec(spec: ServingSpec) -> tuple[ContainerSpec, dict[str, Any], list[str]]:
    """Pure: (container spec, options, server argv) for a spec."""
    opts = container_options(spec, "vllm-container", DEFAULTS, flags_here=False)
    model, mounts = model_in_container(spec.model)
    tokenizer, tok_mounts = model_in_container(spec.tokenizer) if spec.tokenizer != spec.model else (model, ())
    inside = spec.model_copy(update={"model": model, "tokenizer": tokenizer if spec.tokenizer else None})
    # inside its own network namespace the server binds every interface; Docker publishes the
    # port on the host's 127.0.0.1 only
    argv = vllm_server_argv(inside, "0.0.0.0", CONTAINER_PORT)
    mounts = mounts + tuple(m for m in tok_mounts if m not in mounts)
    cs = ContainerSpec(image=str(opts["image"]), command=tuple(argv), container_port=CONTAINER_PORT,
                       env=opts["env"], mounts=mounts, shm_size=opts["shm_size"], gpus=opts["gpus"], host_port=opts["host_port"])
    return cs, opts, argv


def vllm_container_plan(spec: ServingSpec) -> dict[str, Any]:
    cs, opts, argv = container_spec(spec)
    return {"image": cs.image, "server_argv": ["python", "-m", "vllm.entrypoints.openai.api_server", *argv],
            "engine_args": vllm_engine_args(spec), "container": cs.settings(), "pull": opts["pull"],
            "protocol": "openai (/v1/completions, token-id prompts, return_token_ids); ready = GET /health 200"}


class VllmContainerBackend(ContainerHttpBackend):
    framework = "vllm"
    health_path = "/health"

    def __init__(self, spec: ServingSpec, name: str = "vllm-container", **kw: Any) -> None:
        cs, opts, argv = container_spec(spec)  # UnsupportedSpecError before any I/O
        self.server_argv = argv
        super().__init__(spec, name, protocol="openai", container_spec=cs, options=opts, **kw)

    def describe(self):  # type: ignore[no-untyped-def]
        d = super().describe()
        d.native_config.update({"image": self.container_spec.image, "engine_args": vllm_engine_args(self.spec),
                                "server_argv": self.server_argv})
        return d


def docker_check() -> tuple[bool, str]:
    from core.errors import UserError
    from containers.manager import connect, ensure_image

    try:
        ensure_image(connect(), DEFAULT_IMAGE, pull_flag="--native vllm-container.pull=true")
    except UserError as e:
        return False, str(e)
    return True, "ready (Docker daemon up, image present)"


register(BackendEntry(
    name="vllm-container", summary=f"vLLM OpenAI API server in a container ({DEFAULT_IMAGE}), over HTTP",
    factory="backends.vllm_container:VllmContainerBackend", plan="backends.vllm_container:vllm_container_plan",
    requires=("httpx", "docker"), extra="pip install 'llm-compare[docker]' (and a Docker engine)",
    check="backends.vllm_container:docker_check",
    notes=("same engine flags as vllm/vllm-server; image: --native vllm-container.image=NAME, "
           "GPUs: --native vllm-container.gpus=all",
           "build the local image: containers/images/build.sh vllm-cpu"),
    capabilities={"forced_output_length": True, "token_id_prompts": True, "logprobs": True,
                  "continuous_batching": True, "server_metrics": True},
))

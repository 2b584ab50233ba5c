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
from adapters.vllm import VllmPlan, server_argv, vllm_plan
from backends.container_http import ContainerHttpBackend, container_options, model_in_container
from backends.vllm import CONTAINER_IMAGE
from containers.manager import ContainerSpec
from core.records import BackendDescription

CONTAINER_PORT = 8000
DEFAULTS = {"image": CONTAINER_IMAGE, "gpus": None, "shm_size": "1g", "host_port": None,
            "pull": False, "ready_timeout_s": 600}


def container_spec(spec: ServingSpec, engine_args: dict[str, Any]) -> tuple[ContainerSpec, dict[str, Any], list[str]]:
    """(container spec, options, server argv) for the run's engine args (host paths, mounted)."""
    opts = container_options(spec, "vllm-container", DEFAULTS, flags_here=False)
    inside = dict(engine_args)
    model, mounts = model_in_container(str(inside["model"]))
    inside["model"] = model
    if "tokenizer" in inside:
        tokenizer, tok_mounts = model_in_container(str(inside["tokenizer"]))
        inside["tokenizer"] = tokenizer
        mounts = mounts + tuple(m for m in tok_mounts if m not in mounts)
    # inside its own network namespace the server binds every interface; Docker publishes the
    # port on the host's 127.0.0.1 only
    argv = server_argv(inside, "0.0.0.0", CONTAINER_PORT)
    cs = ContainerSpec(image=str(opts["image"]), command=tuple(argv), container_port=CONTAINER_PORT,
                       env=opts["env"], mounts=mounts, shm_size=opts["shm_size"], gpus=opts["gpus"], host_port=opts["host_port"])
    return cs, opts, argv


def vllm_container_plan(spec: ServingSpec, native: VllmPlan, target: None = None) -> dict[str, Any]:
    from backends.models.dummy import engine_args

    args = engine_args(native, write=False)
    cs, opts, argv = container_spec(spec, args)
    return {"image": cs.image, "server_argv": ["python", "-m", "vllm.entrypoints.openai.api_server", *argv],
            "engine_args": args, "container": cs.settings(), "pull": opts["pull"],
            "protocol": "openai (/v1/completions, token-id prompts, return_token_ids); ready = GET /health 200"}


class VllmContainerBackend(ContainerHttpBackend):
    framework = "vllm"
    health_path = "/health"

    def __init__(self, spec: ServingSpec, name: str = "vllm-container", native: VllmPlan | None = None,
                 **kw: Any) -> None:
        from backends.models.dummy import engine_args
        from backends.models.probe import probe

        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.engine_args = engine_args(native or vllm_plan(spec, probe(spec.model)))
        cs, opts, argv = container_spec(spec, self.engine_args)
        self.server_argv = argv
        super().__init__(spec, name, protocol="openai", container_spec=cs, options=opts, **kw)

    def describe(self) -> BackendDescription:
        d = super().describe()
        d.native_config.update({"image": self.container_spec.image, "engine_args": self.engine_args,
                                "server_argv": self.server_argv})
        return d


def docker_check() -> tuple[bool, str]:
    from core.errors import UserError
    from containers.manager import connect, ensure_image

    try:
        ensure_image(connect(), CONTAINER_IMAGE, pull_flag="--native vllm-container.pull=true")
    except UserError as e:
        return False, str(e)
    return True, "ready (Docker daemon up, image present)"

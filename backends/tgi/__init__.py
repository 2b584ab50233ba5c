"""text-generation-inference: its container or an already running server (tgi@URL), streamed by
either client (backends/http/tgi_client.py); adapters/tgi.py is the pure launcher plan."""
from __future__ import annotations


from backends.http_backends import http_capabilities
from backends.registry import BackendEntry, register
from core.records import Capabilities

DEFAULT_IMAGE = "ghcr.io/huggingface/text-generation-inference:3.3.7"
MAINTENANCE_NOTE = ("TGI is in maintenance mode upstream (its README: minor fixes and maintenance only; "
                    "Hugging Face recommends vLLM, SGLang or local engines going forward)")
LENGTH_NOTE = "TGI cannot force output length (no ignore_eos): compare length-matched tokens"


def with_maintenance_note(caps: Capabilities) -> Capabilities:
    return caps.model_copy(update={"notes": caps.notes + (MAINTENANCE_NOTE,)})


register(BackendEntry(
    name="tgi", summary=f"text-generation-inference in its container ({DEFAULT_IMAGE}); "
                        "tgi@URL: an already running TGI server",
    factory="backends.tgi.backend:make_tgi", plan="backends.tgi.backend:tgi_plan", resolve="backends.tgi.backend:resolve",
    requires=("httpx", "docker"), extra="pip install 'llm-compare[docker]' (and a Docker engine)",
    check="backends.tgi.backend:docker_check",
    notes=(LENGTH_NOTE, MAINTENANCE_NOTE,
           "other image: --native tgi.image=NAME (local test double: llm-compare/tgi-double:0.32.0, "
           "with --native tgi.gpus=none); --native tgi.pull=true to pull a missing image",
           "launcher flags: --native tgi.--max-waiting-tokens=20 (checked against TGI 3.3's flags); "
           "--max-concurrent-requests follows the run's highest concurrency unless given",
           "client: --native tgi.client=stamped (default) or text-generation (Hugging Face's AsyncClient)"),
    capabilities=with_maintenance_note(http_capabilities("tgi")), tuning="backends.tgi.tuning:SPACE",
))

"""llama.cpp: ``llama-server`` built from the pinned source (or prebuilt), a GGUF converted from the
checkpoint, served over HTTP. Importing this package registers the ``llamacpp`` backend; the
server module (and everything that does I/O) is imported only when a backend is built.

- build.py: the llama.cpp build in the engine cache (``python -m backends.llamacpp.build``)
- gguf.py + convert_main.py: checkpoint -> GGUF (cached)
- protocol.py: the native ``/completion`` stream
- server.py: the backend (server lifecycle, per-request timings, loaded types)
- adapters/llamacpp.py: the pure spec -> flags plan
"""
from __future__ import annotations

import os
from typing import Any

from backends.registry import BackendEntry, register
from core.records import Capabilities


def plan(spec: Any, native: Any, target: None = None) -> dict[str, Any]:
    """`compare plan`: the server's flags and the GGUF it would serve (nothing is built)."""
    return {"engine": "llama-server (llama.cpp b11434)", **native.as_dict()}


def check() -> tuple[bool, str]:
    import shutil

    from backends.llamacpp.build import SERVER_ENV

    if os.environ.get(SERVER_ENV):
        ok = os.access(os.environ[SERVER_ENV], os.X_OK)
        return ok, "ready (prebuilt)" if ok else f"${SERVER_ENV} is not an executable file"
    if shutil.which("cmake") is None:
        return False, "no llama-server: set $LLM_COMPARE_LLAMA_SERVER or install cmake (bash scripts/setup.d/70-llamacpp.sh)"
    return True, "ready (built on first use: bash scripts/setup.d/70-llamacpp.sh builds it ahead)"


CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
                    server_metrics=True, notes=(
                        "llama-server (llama.cpp b11434) over its native /completion stream (token ids per "
                        "event); the model is a GGUF converted once (cached)",
                        "server timing: per-request prompt/generation time from the stream's timings and "
                        "llamacpp:* counters; no queue/TTFT/E2E on the server side"))

register(BackendEntry(
    name="llamacpp", summary="llama.cpp llama-server (GGUF, built from source or prebuilt), native /completion stream",
    factory="backends.llamacpp.server:LlamaCppBackend", plan="backends.llamacpp:plan",
    resolve="adapters.llamacpp:llamacpp_plan", requires=("httpx",),
    extra="bash scripts/setup.d/70-llamacpp.sh (or LLM_COMPARE_LLAMA_SERVER=/path/to/llama-server)",
    check="backends.llamacpp:check", capabilities=CAPS, native_keys="backends.llamacpp.native:checked_keys",
    notes=("dtype -> GGUF f32/f16/bf16; gguf-q8_0 / gguf-q4_k_m via llama-quantize",
           "prebuilt server: LLM_COMPARE_LLAMA_SERVER=/path or --native llamacpp.server_bin=/path"),
))

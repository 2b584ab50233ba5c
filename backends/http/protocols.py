"""The wire protocols the HTTP backends speak, by name (each defined in its own module).

Every client path resolves a protocol here by its name: the in-process client, each client
process of a sharded level (compare/running/multiproc_worker.py) and Ray shards, so a protocol
registered here is usable by all of them.
"""
from __future__ import annotations

from backends.http import openai, tgi, trtllm_openai
from backends.http.protocol import Protocol


def protocols() -> dict[str, Protocol]:
    # llama.cpp's format lives with its backend; imported here, not at module level, because the
    # backends package registers itself on import (backends/llamacpp/__init__.py)
    from backends.llamacpp.protocol import COMPLETION as LLAMACPP

    return {p.name: p for p in (openai.COMPLETIONS, openai.CHAT, tgi.GENERATE_STREAM, trtllm_openai.TEXT,
                                trtllm_openai.IDS, LLAMACPP)}


def get_protocol(name: str) -> Protocol:
    table = protocols()
    if name not in table:
        raise ValueError(f"unknown HTTP protocol {name!r}; known: {', '.join(sorted(table))}")
    return table[name]

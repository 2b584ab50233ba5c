"""The wire protocols the HTTP backends speak, by name (each defined in its own module).

Every client path resolves a protocol here by its name: the in-process client, each client
process of a sharded level (compare/running/multiproc_worker.py) and Ray shards, so a protocol
registered here is usable by all of them.
"""
from __future__ import annotations

from backends.http import openai, tgi, trtllm_openai
from backends.http.protocol import Protocol


_HERE = {p.name: p for p in (openai.COMPLETIONS, openai.CHAT, tgi.GENERATE_STREAM, trtllm_openai.TEXT,
                             trtllm_openai.IDS)}


def protocols() -> dict[str, Protocol]:
    # llama.cpp's format lives with its backend; imported only when asked for, because registering
    # the backends (which resolves "openai" for capabilities) must not import an engine's modules
    from backends.llamacpp.protocol import COMPLETION as LLAMACPP

    return {**_HERE, LLAMACPP.name: LLAMACPP}


def get_protocol(name: str) -> Protocol:
    if name in _HERE:
        return _HERE[name]
    table = protocols()
    if name not in table:
        raise ValueError(f"unknown HTTP protocol {name!r}; known: {', '.join(sorted(table))}")
    return table[name]

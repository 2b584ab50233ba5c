"""The wire protocols the HTTP backends speak, by name (each defined in its own module)."""
from __future__ import annotations

from backends.http import openai, tgi
from backends.http.protocol import Protocol


def protocols() -> dict[str, Protocol]:
    return {p.name: p for p in (openai.COMPLETIONS, openai.CHAT, tgi.GENERATE_STREAM)}


def get_protocol(name: str) -> Protocol:
    table = protocols()
    if name not in table:
        raise ValueError(f"unknown HTTP protocol {name!r}; known: {', '.join(sorted(table))}")
    return table[name]

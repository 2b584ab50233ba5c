"""One switch that refuses every engine, server, container or cluster start in a process tree.

With ``LLM_COMPARE_NO_ENGINES`` set, each place that starts one (an in-process engine's start, a
server or engine subprocess, the Docker client, joining a Ray cluster) calls :func:`check_start`
first, which fails at once with one line. Child processes inherit the variable, so a ``compare``
command run under it refuses too. The value ``1`` only refuses; any other value is a file the
refusal is also appended to, so whoever set it learns of a refusal that the command swallowed
or turned into another failure (the test suite's fast tier: tests/conftest.py).
"""
from __future__ import annotations

import os

from core.errors import UserError

ENV = "LLM_COMPARE_NO_ENGINES"


class EngineStartRefused(UserError):
    """An engine start while LLM_COMPARE_NO_ENGINES is set."""


def check_start(what: str) -> None:
    """Raise :class:`EngineStartRefused` when engine starts are switched off; ``what`` names the start."""
    where = os.environ.get(ENV)
    if not where:
        return
    if where != "1":
        try:
            with open(where, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {what}\n")
        except OSError:
            pass
    raise EngineStartRefused(f"refused to start {what}: {ENV} is set (unset it to start engines)")

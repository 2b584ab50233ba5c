"""The event loop every measuring command runs on.

uvloop when it is importable (vLLM's own OpenAI server runs on it; it is a vLLM dependency, so
it is there wherever vLLM is): its callbacks, futures and socket reads cost a fraction of
asyncio's, and in the in-process backend the load generator shares its loop with vLLM's
frontend (AsyncLLM output handling), so every microsecond per token shows up as client delay.
``LLM_COMPARE_LOOP=asyncio`` forces the standard loop (for A/B measurements of the harness).
The loop actually used is recorded in run.json (``client.event_loop``).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")
CHOICES = ("auto", "uvloop", "asyncio")


def loop_choice() -> str:
    choice = os.environ.get("LLM_COMPARE_LOOP", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        from core.errors import UserError
        raise UserError(f"LLM_COMPARE_LOOP={choice!r} is not one of {', '.join(CHOICES)} "
                        f"(unset it to use uvloop when installed)")
    return choice


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when available (or as ``LLM_COMPARE_LOOP`` says)."""
    choice = loop_choice()
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                coro.close()
                from core.errors import UserError
                raise UserError("LLM_COMPARE_LOOP=uvloop but uvloop is not installed "
                                "(pip install uvloop, or unset LLM_COMPARE_LOOP)") from None
        else:
            # what uvloop.run does, without needing uvloop >= 0.18
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(coro)
    return asyncio.run(coro)


def running_loop_name() -> str:
    """e.g. ``uvloop`` or ``asyncio``: the implementation of the loop we are running on."""
    loop = asyncio.get_running_loop()
    return type(loop).__module__.split(".")[0]

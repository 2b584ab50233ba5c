"""The optional compiled helpers of the HTTP client's read path, or None for each (pure Python).

``backends/http/_native.c`` is built by ``scripts/setup.d/50-http-native.sh`` into the venv as
``_llm_compare_http`` where a C compiler exists. It is used only when its recorded source sha
matches ``_native.c`` in this checkout (a stale build is ignored, not trusted), and
``recv_stamped`` only where ``time.perf_counter_ns`` is CLOCK_MONOTONIC (its stamps must be in
that domain). ``LLM_COMPARE_HTTP_NATIVE=0`` turns both off (A/B measurements). The Python path
gives the same events with the same stamps; tests/test_http_native.py checks both on the same
inputs.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, Callable

ENV = "LLM_COMPARE_HTTP_NATIVE"

recv_stamped: Callable[[int, int], tuple[bytes, int, int]] | None = None
frame_chunks: Callable[[bytes, int, int, Callable[[Any], None], type], int] | None = None
status = "off"


def _load() -> None:
    global recv_stamped, frame_chunks, status
    recv_stamped = frame_chunks = None
    if os.environ.get(ENV, "1").strip() == "0":
        status = f"off ({ENV}=0)"
        return
    try:
        import _llm_compare_http as m
    except ImportError:
        status = "not built (scripts/setup.d/50-http-native.sh)"
        return
    src = Path(__file__).with_name("_native.c")
    if not src.exists() or m.SOURCE_SHA != hashlib.sha256(src.read_bytes()).hexdigest():
        status = "stale build ignored (re-run scripts/setup.d/50-http-native.sh)"
        return
    frame_chunks = m.frame_chunks
    if time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)":
        recv_stamped = m.recv_stamped
    status = "on" if recv_stamped is not None else "framing only (perf_counter is not CLOCK_MONOTONIC)"


_load()

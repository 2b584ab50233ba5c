"""The optional compiled helpers of the HTTP client's read path, or None for each (pure Python).

``backends/http/_native.c`` (+ ``_rxthread.c``, ``_stamp.h``) is built by ``scripts/setup.d/50-http-native.sh``
into the venv as ``_llm_compare_http`` where a C compiler exists. It is used only when its
recorded source sha matches those sources in this checkout (a stale build is ignored, not trusted), and
``recv_stamped`` and ``RxThread`` (the receive thread, rxstamp.py) only where
``time.perf_counter_ns`` is CLOCK_MONOTONIC (their stamps must be in that domain). ``LLM_COMPARE_HTTP_NATIVE=0`` turns both off (A/B measurements). The Python path
gives the same events with the same stamps; tests/backends/http/test_http_native.py checks both on the same
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
RxThread: Any = None  # _rxthread.c's type, or None
status = "off"
# the build's SOURCE_SHA is the sha256 of these, concatenated (the .c files are compiled; the header is theirs)
SOURCES = ("_stamp.h", "_fastsse.h", "_native.c", "_rxthread.c")


def _load() -> None:
    global recv_stamped, frame_chunks, RxThread, status
    recv_stamped = frame_chunks = RxThread = None
    if os.environ.get(ENV, "1").strip() == "0":
        status = f"off ({ENV}=0)"
        return
    try:
        import _llm_compare_http as m
    except ImportError:
        status = "not built (scripts/setup.d/50-http-native.sh)"
        return
    srcs = [Path(__file__).with_name(n) for n in SOURCES]
    if not all(p.exists() for p in srcs) or m.SOURCE_SHA != hashlib.sha256(b"".join(
            p.read_bytes() for p in srcs)).hexdigest():
        status = "stale build ignored (re-run scripts/setup.d/50-http-native.sh)"
        return
    frame_chunks = m.frame_chunks
    if time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)":
        recv_stamped = m.recv_stamped
        RxThread = getattr(m, "RxThread", None)
    status = "on" if recv_stamped is not None else "framing only (perf_counter is not CLOCK_MONOTONIC)"


_load()

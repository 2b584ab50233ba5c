"""TGI's clients against the calibration server's ``/generate_stream`` (compare/running/calibration/server.py):
the stamped reader and text-generation's AsyncClient, measured the same way.

Every token event carries the server's send stamp in its token text (text-generation's client drops
SSE ids), so ``event stamp - send stamp`` is each client's timing error, read from the TokenEvents
the backend yields -- what the run records. Streams run concurrently, one request each.
"""
from __future__ import annotations

import asyncio
import gc
from typing import Any


async def measure_tgi(base_url: str, streams: int, tokens: int, client: str, timeout_s: float = 120.0) -> dict[str, Any]:
    import numpy as np

    from backends.http_backends import TextGenerationStreaming
    from core.records import GenerationRequest, TokenEvent

    backend = TextGenerationStreaming(None, "calibration", protocol="tgi", base_url=base_url, metrics=None,
                                      max_connections=streams + 16)
    backend.client = client
    errors: list[float] = []
    failed: dict[str, int] = {}

    async def one(i: int) -> None:
        req = GenerationRequest(request_id=f"cal-{i}", max_tokens=tokens, prompt_text="calibration", ignore_eos=False)
        try:
            async with asyncio.timeout(timeout_s):
                async for ev in backend.stream(req):
                    if isinstance(ev, TokenEvent) and ev.text.isdigit():
                        errors.append((ev.t_ns - int(ev.text)) / 1e6)
        except Exception as e:  # counted per kind: a client that fails is part of the result
            kind = str(getattr(e, "kind", type(e).__name__))
            failed[kind] = failed.get(kind, 0) + 1

    async with backend:
        gc.collect()
        t0 = asyncio.get_running_loop().time()
        await asyncio.gather(*(one(i) for i in range(streams)))
        wall = asyncio.get_running_loop().time() - t0
        clock = backend.describe().extra.get("event_clock", {})
    err = np.asarray(errors)
    pct = (lambda q: float(np.percentile(err, q))) if err.size else (lambda q: float("nan"))
    return {"client": client, "streams": streams, "tokens_per_stream": tokens, "events": int(err.size),
            "failed": failed, "wall_s": round(wall, 3), "event_clock": clock,
            "timing_error_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99),
                                "max": float(err.max()) if err.size else float("nan")}}

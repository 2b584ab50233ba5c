"""Benchmark: llama-server's two streams on the same server, the same requests.

``/completion`` (native: token ids per event, ``timings`` at the end) against ``/v1/completions``
(OpenAI-compatible: text only), both through the project's HTTP client (HttpStreamBackend, the same
SSE reader as every run). Per stream: requests whose streamed token count equals the tokens
generated, events, empty-text events, and client TTFT / ITL means. The backend uses the native
stream; docs/engines.md#llamacpp records a run of this script.

    .venv/bin/python benchmarks/bench_llamacpp_streams.py [--requests 16] [--tokens 64] [--json OUT]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time

from adapters.spec import ServingSpec
from backends.http_backends import HttpStreamBackend
from backends.llamacpp.server import LlamaCppBackend
from backends.models.tiny import ensure_tiny_model
from core.records import GenerationRequest, StreamEnd


async def _one(backend, req):
    t0 = time.perf_counter_ns()
    events, ids, end = [], [], None
    async for item in backend.stream(req):
        if isinstance(item, StreamEnd):
            end = item
        else:
            events.append(item)
            ids += list(item.token_ids)
    return t0, events, ids, end


def _summary(rows, n_tokens):
    ttft = [(ev[0].t_ns - t0) / 1e6 for t0, ev, _, _ in rows if ev]
    itl = [(b.t_ns - a.t_ns) / 1e6 for _, ev, _, _ in rows for a, b in zip(ev, ev[1:])]
    return {"requests": len(rows), "exact_token_count": sum(1 for _, _, ids, _ in rows if len(ids) == n_tokens),
            "token_ids_known": sum(1 for _, _, ids, _ in rows if ids and -1 not in ids),
            "events": sum(len(ev) for _, ev, _, _ in rows),
            "empty_text_events": sum(1 for _, ev, _, _ in rows for e in ev if not e.text),
            "ttft_ms_mean": statistics.fmean(ttft) if ttft else None,
            "itl_ms_mean": statistics.fmean(itl) if itl else None,
            "server_timings": bool(rows and rows[0][3] and rows[0][3].engine_metrics)}


async def main(n: int, tokens: int, reverse: bool = False) -> dict:
    model = ensure_tiny_model()
    spec = ServingSpec(model=str(model), dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20)
    reqs = [GenerationRequest(f"r{i}", max_tokens=tokens, prompt_token_ids=tuple(range(5 + i, 37 + i)),
                              ignore_eos=True) for i in range(n)]
    out = {"machine": platform.node(), "cpu": platform.processor(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                          time.gmtime())}
    async with LlamaCppBackend(spec) as native:
        oai = HttpStreamBackend(spec, "llamacpp-openai", protocol="openai", base_url=native.base_url, metrics=None)
        async with oai:
            pairs = [("native /completion", native), ("openai /v1/completions", oai)]
            for name, b in (pairs[::-1] if reverse else pairs):  # --reverse: the order's effect
                rows = [await _one(b, r) for r in reqs]  # one at a time: no queueing in the numbers
                out[name] = _summary(rows, tokens)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--json", default=None)
    ap.add_argument("--reverse", action="store_true", help="measure the OpenAI stream first")
    a = ap.parse_args()
    res = asyncio.run(main(a.requests, a.tokens, a.reverse))
    print(json.dumps(res, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)

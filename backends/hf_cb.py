"""transformers' continuous batching (``ContinuousBatchingManager``) in an engine process of its own.

A third real scheduler next to vLLM and OpenVINO GenAI, from the same library as the ``hf``
quality reference: a paged KV cache, a FIFO scheduler that batches prefill and decode of several
requests per forward pass, prompts split at ``max_batch_tokens``, prefix block sharing. The manager
runs in backends/hf_cb_engine.py's process (its generation thread would otherwise compete with the
measuring event loop for the GIL); that process forwards the manager's per-token stamps (the
engine-side stamp) and the stream stamps each token again when it takes it (the delivery stamp, as
for every backend). The engine process dies with ours; when it dies first, every request in it
fails as ``engine_dead`` and so do later ones.
"""
from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

from adapters.hf_cb import HFCBPlan, hf_cb_plan
from adapters.spec import ServingSpec
from backends.openvino_engine import decode, encode
from backends.registry import BackendEntry, register
from core.errors import BackendRequestError, BackendStartError, FailureKind
from core.lazy import importable, require
from core.records import BackendDescription, Capabilities, GenerationRequest, StreamEnd, StreamItem, TokenEvent

CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
                    notes=("greedy decoding only: transformers' continuous batching sets sampling for the whole "
                           "engine, so a request with temperature > 0 fails as a validation error",))
START_TIMEOUT_S = 600.0  # loading a 7B checkpoint on CPU takes minutes


@dataclass
class _Req:
    out: asyncio.Queue
    t_first_ns: int = 0
    t_last_ns: int = 0
    t_added_ns: int = 0
    n_tokens: int = 0
    n_prompt: int | None = None
    finish: str | None = None


class HFCBBackend:
    name = "hf-cb"

    def __init__(self, spec: ServingSpec, name: str = "hf-cb", native: HFCBPlan | None = None) -> None:
        from backends.models.probe import probe

        self.spec = spec
        self.name = name
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = native or hf_cb_plan(spec, probe(spec.model))
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._reqs: dict[int, _Req] = {}
        self._dead: str | None = None
        self._fatal: str | None = None
        self._n = 0
        self._info: dict[str, Any] = {}
        self.cancelled_in_engine = 0  # cancels that reached a request still in the engine

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "HFCBBackend":
        for module in ("transformers", "torch"):  # the engine process imports them, this one need not
            if not importable(module):
                require(module, "hf")
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "backends.hf_cb_engine", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        self._send(("config", self.plan.as_dict() | {
            "dtype": self.plan.dtype, "attn_implementation": self.plan.attn_implementation,
            "cb_config": dict(self.plan.cb_config), "load_kwargs": dict(self.plan.load_kwargs)}))
        try:
            first = await asyncio.wait_for(self._frame(self._proc.stdout), START_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            first = None
        if not first or first[0] != "ready":
            code = await self._stop()
            why = first[1] if first and first[0] == "fatal" else f"the engine process exited (code {code})"
            raise BackendStartError(f"transformers continuous batching failed to start: {why}")
        self._info = first[1]
        self._reader = asyncio.create_task(self._read_events(self._proc))
        return self

    def _send(self, msg: Any) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(encode(msg))

    @staticmethod
    async def _frame(stdout: asyncio.StreamReader) -> Any:
        head = await stdout.readexactly(4)
        return decode(await stdout.readexactly(int.from_bytes(head, "little")))

    async def _read_events(self, proc: asyncio.subprocess.Process) -> None:
        try:
            while True:
                msg = await self._frame(proc.stdout)
                kind = msg[0]
                if kind == "tokens":
                    for rid, ids, t_first, t_last in msg[1]:
                        if (r := self._reqs.get(rid)) is not None:
                            r.t_first_ns = r.t_first_ns or t_first
                            r.t_last_ns = t_last
                            r.n_tokens += len(ids)
                            r.out.put_nowait(tuple(ids))
                elif kind == "end":
                    if (r := self._reqs.pop(msg[1], None)) is not None:
                        r.finish = msg[2]
                        r.out.put_nowait(None)
                elif kind == "added":
                    if (r := self._reqs.get(msg[1])) is not None:
                        r.n_prompt = msg[2]
                elif kind == "error":
                    if (r := self._reqs.pop(msg[1], None)) is not None:
                        r.out.put_nowait(BackendRequestError(msg[2], msg[3]))
                elif kind == "cancelled":
                    self.cancelled_in_engine += 1
                elif kind == "fatal":
                    self._fatal = msg[1]
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        code = await proc.wait()
        self._dead = f"the transformers engine process exited (code {code})" + (
            f": {self._fatal}" if self._fatal else "")
        for r in self._reqs.values():
            r.out.put_nowait(BackendRequestError(FailureKind.ENGINE_DEAD, self._dead))
        self._reqs.clear()

    async def _stop(self) -> int | None:
        p, self._proc = self._proc, None
        if p is None:
            return None
        if p.returncode is None:
            try:
                p.stdin.write(encode(("stop",)))
                p.stdin.close()
            except (ConnectionError, RuntimeError):
                pass
            try:
                await asyncio.wait_for(p.wait(), 40)
            except asyncio.TimeoutError:
                p.kill()
                await p.wait()
        return p.returncode

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()
        if self._reader is not None:  # ends at the process's EOF
            try:
                await asyncio.wait_for(self._reader, 10)
            except asyncio.TimeoutError:
                pass
            self._reader = None

    # ------------------------------------------------------------------ requests
    async def stream(self, req: GenerationRequest) -> AsyncIterator[StreamItem]:
        if self._proc is None or self._dead:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, self._dead or "engine is not running")
        if req.prompt_token_ids is not None:
            prompt: dict[str, Any] = {"ids": list(req.prompt_token_ids)}
        elif req.messages is not None:
            prompt = {"messages": [list(m) for m in req.messages]}
        else:
            prompt = {"text": req.prompt_text}
        self._n += 1
        rid = self._n
        r = self._reqs[rid] = _Req(asyncio.Queue(), t_added_ns=time.perf_counter_ns())
        self._send(("add", rid, prompt, {"max_new_tokens": req.max_tokens, "ignore_eos": req.ignore_eos,
                                         "temperature": req.temperature}))
        done = False
        first = last = 0
        try:
            while True:
                item = await r.out.get()
                if isinstance(item, BaseException):
                    done = True
                    raise item
                if item is None:
                    done = True
                    break
                last = time.perf_counter_ns()
                first = first or last
                yield TokenEvent(t_ns=last, token_ids=item)
        finally:
            if not done and self._proc is not None and not self._dead:  # the consumer went away
                self._reqs.pop(rid, None)
                self._send(("cancel", rid))  # frees the engine's blocks
        yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=r.finish, prompt_tokens=r.n_prompt,
                        completion_tokens=r.n_tokens, engine_metrics=_engine_metrics(r, first, last))

    def describe(self) -> BackendDescription:
        return BackendDescription(
            name=self.name, framework="transformers-cb", version=self._info.get("version", "unknown"),
            native_config={**self.plan.as_dict(), "resolved": self._info.get("resolved", {})},
            extra={"engine_pid": self._info.get("pid"), "torch": self._info.get("torch"),
                   "engine": "transformers ContinuousBatchingManager"})


def _engine_metrics(r: _Req, first_ns: int, last_ns: int) -> dict[str, float]:
    """The manager's own per-token stamps, same keys as the vLLM and openvino backends'."""
    if not r.t_first_ns:
        return {}
    out = {"first_token_latency_s": (r.t_first_ns - r.t_added_ns) / 1e9,
           "engine_first_token_ts": r.t_first_ns / 1e9, "engine_last_token_ts": r.t_last_ns / 1e9,
           "decode_s": (r.t_last_ns - r.t_first_ns) / 1e9, "num_generation_tokens": float(r.n_tokens)}
    if first_ns:  # perf_counter is CLOCK_MONOTONIC on both sides: the event loop's delivery delay
        out["first_token_delivery_s"] = (first_ns - r.t_first_ns) / 1e9
        out["last_token_delivery_s"] = (last_ns - r.t_last_ns) / 1e9
    return out


def plan(spec: ServingSpec, native: HFCBPlan) -> dict[str, Any]:
    """`compare plan`: the manager's native configuration (nothing is loaded)."""
    return {"engine": "transformers ContinuousBatchingManager (init_continuous_batching)", **native.as_dict()}


register(BackendEntry(
    name="hf-cb", summary="transformers continuous batching (ContinuousBatchingManager in its own engine process)",
    factory="backends.hf_cb:HFCBBackend", plan="backends.hf_cb:plan", resolve="adapters.hf_cb:hf_cb_plan",
    requires=("transformers", "torch"), extra="pip install 'llm-compare[hf]'", capabilities=CAPS,
))

"""The fake engine: a TEST INSTRUMENT, not a serving framework. No model runs; each request's
tokens are stamped on a schedule computed from the timing model (backends/fake/model.py), so
runner, executor, signals, --vary, --find-max-rate, repeats, the gate, the verdict and the
reports can be exercised in seconds, with the same typed records a real engine yields.

Schedule of one request, from the moment it gets one of ``seqs`` sequence slots (before that it
queues, so offered load beyond ``seqs / (ttft + n*itl)`` shows up as waiting, as on an engine):
first token at ``ttft + prefill * prompt_tokens``, then one token every
``itl * (1 + batch * (running - 1))``, plus ``stall`` in the middle of a stalled request. Each
event carries its scheduled time (never later than when it is yielded), so a loaded machine
delays the run but not the recorded timings of a request that got its slot.
"""
from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any, AsyncIterator

from adapters.spec import ServingSpec
from core.errors import BackendRequestError, BackendStartError, FailureKind
from core.records import (BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamEnd, StreamItem,
                          TokenEvent)

from backends.base import BackendBase
from backends.fake import CAPS
from backends.fake.model import timing_model

VOCAB = 4096  # token ids stay inside the tiny model's vocabulary
_MS = 1_000_000  # ns per ms


def _share(request_id: str, salt: str) -> float:
    """A request's fixed place in [0, 1): which requests fail or stall depends on the id alone."""
    return zlib.crc32(f"{salt}:{request_id}".encode()) / 2**32


def _prompt_tokens(req: GenerationRequest) -> int:
    if req.prompt_token_ids is not None:
        return len(req.prompt_token_ids)
    if req.messages is not None:
        return sum(len(c.split()) for _, c in req.messages) or 1
    return len((req.prompt_text or "").split()) or 1


async def _until(t_ns: int) -> None:
    delay = (t_ns - time.perf_counter_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


class FakeBackend(BackendBase):
    name = "fake"

    def __init__(self, spec: ServingSpec, name: str = "fake", target: str | None = None) -> None:
        self.spec = spec
        self.name = name
        self.model = timing_model(spec, target)  # a bad option fails here, before any run starts
        self._slots: asyncio.Semaphore | None = None
        self._running = 0
        self._served = 0
        self._dead = False
        self._started = False

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "FakeBackend":
        await asyncio.sleep(self.model.start / 1e3)
        if self.model.start_fail:
            raise BackendStartError("the fake engine did not start (start_fail is set)")
        self._slots = asyncio.Semaphore(self.model.seqs)
        self._started = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._started = False
        await asyncio.sleep(self.model.stop / 1e3)

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        t_ask = time.perf_counter_ns()
        if ctx is not None:
            ctx.sent_ns = t_ask
        if not self._started or self._slots is None:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, "the fake engine is not started")
        m = self.model
        n_prompt = _prompt_tokens(req)
        if m.max_model_len and n_prompt + req.max_tokens > m.max_model_len:
            raise BackendRequestError(FailureKind.HTTP_4XX, f"prompt ({n_prompt}) + max_tokens ({req.max_tokens}) "
                                      f"exceeds max_model_len {m.max_model_len}")
        self._served += 1
        if self._dead or (m.die_after is not None and self._served > m.die_after):
            self._dead = True
            raise BackendRequestError(FailureKind.ENGINE_DEAD, f"the fake engine died (die_after={m.die_after})")
        fails = _share(req.request_id, "fail") < m.fail
        stalls = m.stall > 0 and _share(req.request_id, "stall") < m.stall_frac
        first = zlib.crc32(req.request_id.encode()) % VOCAB
        async with self._slots:
            self._running += 1
            try:
                due = time.perf_counter_ns() + int((m.ttft + m.prefill * n_prompt) * _MS)
                for i in range(req.max_tokens):
                    if i:
                        due += int(m.itl * (1 + m.batch * (self._running - 1)) * _MS)
                    if stalls and i == req.max_tokens // 2:
                        due += int(m.stall * _MS)
                    await _until(due)
                    tok = (first + i) % VOCAB
                    yield TokenEvent(t_ns=due, token_ids=(tok,), text=f" t{tok}")
                    if fails:
                        raise BackendRequestError(FailureKind.ENGINE, "the fake engine failed this request "
                                                  f"(fail={m.fail:g})")
                yield StreamEnd(t_ns=due, finish_reason="length", prompt_tokens=n_prompt,
                                completion_tokens=req.max_tokens)
            finally:
                self._running -= 1

    def describe(self) -> BackendDescription:
        return BackendDescription(
            name=self.name, framework="fake (test instrument)", version="0",
            native_config={**self.model.as_dict(), "test_instrument": True,
                           "resolved": {"max_num_seqs": self.model.seqs, "max_model_len": self.model.max_model_len}},
            extra={"test_instrument": "no model runs: timings come from the configured timing model"})


def plan(spec: ServingSpec, native: None = None, target: str | None = None) -> dict[str, Any]:
    return {**timing_model(spec, target).as_dict(), "test_instrument": True}

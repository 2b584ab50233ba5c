"""transformers reference backend: a real second framework that runs anywhere torch runs.

One request at a time (no continuous batching), greedy or sampled via ``model.generate``; each
new token is stamped with ``perf_counter_ns()`` inside the streamer the moment ``generate``
produces it, then handed to the event loop.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, AsyncIterator

from adapters.hf import hf_model_kwargs
from adapters.spec import ServingSpec
from adapters.target import Target
from backends.base import BackendBase
from backends.hf import CAPS
from core.records import (BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamEnd, StreamItem,
                          TokenEvent)
from core.errors import BackendRequestError, BackendStartError, FailureKind
from core.lazy import require
from core.engine_guard import check_start



_DONE = object()


class HFBackend(BackendBase):
    name = "hf"

    def __init__(self, spec: ServingSpec, name: str = "hf", native: dict[str, Any] | None = None,
                 device: str | None = None) -> None:
        self.spec = spec
        # None: the GPU when torch sees one, else the CPU; "cpu" / "cuda": exactly there (the
        # quality reference is placed by compare/quality/deferred.py after the engines stopped)
        self._want_device = device
        self.name = name
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.config = dict(native) if native is not None else hf_model_kwargs(spec)
        self._model: Any = None
        self._tok: Any = None
        self._lock = asyncio.Lock()
        self._version = "unknown"
        self._device = "cpu"

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "HFBackend":
        transformers = require("transformers", "hf")
        torch = require("torch", "hf")
        check_start("the transformers engine (in-process)")
        self._version = transformers.__version__
        try:
            loop = asyncio.get_running_loop()
            self._tok, self._model = await loop.run_in_executor(None, self._load, transformers, torch)
        except Exception as e:
            raise BackendStartError(f"transformers could not load {self.spec.model}: "
                                    f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        return self

    def _load(self, transformers: Any, torch: Any) -> tuple[Any, Any]:
        torch.manual_seed(self.config["seed"])
        tok = transformers.AutoTokenizer.from_pretrained(self.config["tokenizer"])
        model = transformers.AutoModelForCausalLM.from_pretrained(
            self.config["model"], **self.config["from_pretrained"])
        if self._want_device == "cuda" or (self._want_device is None and torch.cuda.is_available()):
            model = model.to("cuda")
            self._device = "cuda"
        model.eval()
        return tok, model

    async def __aexit__(self, *exc: object) -> None:
        on_gpu = self._device == "cuda" and self._model is not None
        self._model = None
        self._tok = None
        if on_gpu:  # hand the memory back now: an engine may start on this GPU next
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()

    def _input_ids(self, req: GenerationRequest) -> list[int]:
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        if req.messages is not None:
            ids = self._tok.apply_chat_template([{"role": r, "content": c} for r, c in req.messages],
                                                add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        return list(self._tok(req.prompt_text, add_special_tokens=True)["input_ids"])

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        if self._model is None:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, "model is not loaded")
        ids = self._input_ids(req)
        max_len = self.config["max_model_len"]
        if max_len and len(ids) + req.max_tokens > max_len:
            raise BackendRequestError(FailureKind.HTTP_4XX, f"prompt ({len(ids)}) + max_tokens ({req.max_tokens}) "
                                      f"exceeds max_model_len {max_len}")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        async with self._lock:  # one request at a time: the reference has no batching
            stop = threading.Event()
            fut = loop.run_in_executor(None, self._generate, ids, req, queue, loop, stop)
            n_out = 0
            try:
                while True:
                    item = await queue.get()
                    if item is _DONE:
                        break
                    n_out += 1
                    yield item
                finish = await fut
            except BaseException:
                stop.set()  # make generate() return early on cancellation
                raise
            yield StreamEnd(t_ns=time.perf_counter_ns(), finish_reason=finish,
                            prompt_tokens=len(ids), completion_tokens=n_out)

    def _generate(self, ids: list[int], req: GenerationRequest, queue: asyncio.Queue,
                  loop: asyncio.AbstractEventLoop, stop: threading.Event) -> str:
        import torch
        from transformers.generation.streamers import BaseStreamer
        from transformers import StoppingCriteria, StoppingCriteriaList

        eos = self._model.generation_config.eos_token_id
        eos_set = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        last: list[int] = []

        class Streamer(BaseStreamer):
            first = True

            def put(self, value: Any) -> None:
                t = time.perf_counter_ns()
                if self.first:  # generate() first puts the prompt
                    self.first = False
                    return
                tok = int(value.reshape(-1)[0])
                last[:] = [tok]
                loop.call_soon_threadsafe(queue.put_nowait, TokenEvent(t_ns=t, token_ids=(tok,)))

            def end(self) -> None:
                pass

        class Stop(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kw: Any) -> Any:
                return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool,
                                  device=input_ids.device)

        gen_kw: dict[str, Any] = {"max_new_tokens": req.max_tokens, "streamer": Streamer(),
                                  "stopping_criteria": StoppingCriteriaList([Stop()]),
                                  "pad_token_id": self._tok.pad_token_id}
        if req.ignore_eos:
            gen_kw["min_new_tokens"] = req.max_tokens
        if req.temperature > 0:
            gen_kw.update(do_sample=True, temperature=req.temperature, top_p=req.top_p)
            if req.seed is not None:
                torch.manual_seed(req.seed)
        else:
            gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        try:
            with torch.inference_mode():
                x = torch.tensor([ids], device=self._device)
                out = self._model.generate(x, attention_mask=torch.ones_like(x), **gen_kw)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)
        n = out.shape[1] - len(ids)
        if stop.is_set():
            return "abort"
        return "stop" if (last and last[0] in eos_set and n < req.max_tokens) else "length"

    async def score(self, req: GenerationRequest, continuation: list[int],
                    want: list[list[int]] | None = None) -> list[dict[str, Any]]:
        """Teacher-forced reference logprobs for a continuation another backend produced.

        One forward pass over prompt + continuation. For each continuation position: the
        reference's argmax token and its logprob, the logprob it gives the continuation's token,
        and the logprobs of the token ids in ``want[i]`` (e.g. the candidate's top-k, for KL).
        """
        if self._model is None:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, "model is not loaded")
        ids = self._input_ids(req)
        async with self._lock:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self._score, ids, list(continuation), want)

    def _score(self, ids: list[int], cont: list[int], want: list[list[int]] | None) -> list[dict[str, Any]]:
        import torch

        with torch.inference_mode():
            x = torch.tensor([ids + cont], device=self._device)
            logits = self._model(x, attention_mask=torch.ones_like(x)).logits[0].float()
            # position p predicts token p+1: the continuation is predicted by [len(ids)-1, ...)
            lp = torch.log_softmax(logits[len(ids) - 1: len(ids) - 1 + len(cont)], dim=-1).cpu()
        out = []
        for i, tok in enumerate(cont):
            row = lp[i]
            top = int(row.argmax())
            d = {"token": tok, "logprob": float(row[tok]), "argmax": top, "argmax_logprob": float(row[top])}
            if want is not None and i < len(want):
                d["want"] = {int(t): float(row[int(t)]) for t in want[i]}
            out.append(d)
        return out

    def describe(self) -> BackendDescription:
        cfg = dict(self.config)
        if self._model is not None:
            cfg["resolved"] = {"dtype": str(self._model.dtype).replace("torch.", ""),
                               "device": self._device}
        return BackendDescription(name=self.name, framework="transformers", version=self._version,
                                  native_config=cfg)


def resolve(spec: ServingSpec, target: Target) -> dict[str, Any]:
    """The reference's configuration depends on the spec alone."""
    return hf_model_kwargs(spec)


def plan(spec: ServingSpec, native: dict[str, Any], target: None = None) -> dict[str, Any]:
    return native

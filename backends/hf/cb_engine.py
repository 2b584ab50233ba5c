"""The transformers continuous-batching engine process: owns the ``ContinuousBatchingManager``.

``python -m backends.hf.cb_engine`` is started by backends/hf/cb.py. The manager schedules and
runs the model in a Python thread of its own; in the measuring process that thread would compete
with the client's event loop for the GIL (a forward pass of the model holds it for most of a step),
so it gets a process of its own (backends/engine_process.py: the frames, the process set-up, the
parent side). Tokens carry the manager's own per-token stamps (``record_timestamps``:
``time.perf_counter()`` when the generation thread appends the token, CLOCK_MONOTONIC on Linux, the
parent's ``perf_counter_ns`` clock too). A fatal error of the generation thread is reported and ends
the process, so the parent fails what is in flight as ``engine_dead``. Generation parameters:
{"max_new_tokens", "ignore_eos", "temperature"}.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

from backends.engine_process import encode, engine_process_setup, fatal_line, read_frame
from core.process_exit import exit_without_teardown
from core.quant_report import QuantReport

READY_TIMEOUT_S = 300.0
# ContinuousBatchingConfig fields under an earlier name: transformers 5.17 has ``block_size`` where
# 5.19 has ``page_size`` (tokens per KV-cache block)
EARLIER_NAMES = {"page_size": ("block_size",)}
# fields whose requested value is the installed version's only behaviour when it lacks them
# (None: any value); anything else it lacks is refused
WITHOUT_FIELD = {"auto_switch_to_flash": None}


def cb_kwargs(cb: dict[str, Any], fields: set[str], version: str) -> tuple[dict[str, Any], list[str]]:
    """The plan's ContinuousBatchingConfig arguments as the installed transformers names them, and
    notes on what it cannot be told. A field it has under neither name is refused (ValueError)."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in cb.items():
        name = key if key in fields else next((n for n in EARLIER_NAMES.get(key, ()) if n in fields), None)
        if name is not None:
            out[name] = value
        elif key in WITHOUT_FIELD:
            notes.append(f"transformers {version} has no ContinuousBatchingConfig.{key}: its own behaviour "
                         f"applies (see resolved.attn_implementation)")
        else:
            raise ValueError(f"transformers {version}'s ContinuousBatchingConfig has no {key!r} "
                             f"(it has: {', '.join(sorted(fields))}); drop native hf-cb.{key} or use another version")
    return out, notes


def _cache_bytes(cache: Any) -> int | None:
    """Bytes of the paged KV cache: one uint8 tensor since transformers 5.19, per-layer key/value
    tensors before (5.17)."""
    if getattr(cache, "cache_tensor", None) is not None:
        return int(cache.cache_tensor.numel())
    layers = list(getattr(cache, "key_cache", [])) + list(getattr(cache, "value_cache", []))
    return sum(int(t.numel()) * t.element_size() for t in layers) or None


def config_fields(cls: Any) -> set[str]:
    import dataclasses
    import inspect

    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return {p for p in inspect.signature(cls).parameters if p != "self"}


class _Engine:
    def __init__(self, plan: dict[str, Any], send: Any) -> None:
        import torch
        import transformers
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        self.send = send
        self.plan = plan
        if plan.get("num_threads"):
            torch.set_num_threads(int(plan["num_threads"]))
        torch.manual_seed(plan["cb_config"].get("seed") or 0)
        self.tok = transformers.AutoTokenizer.from_pretrained(plan["tokenizer"])
        model = transformers.AutoModelForCausalLM.from_pretrained(
            plan["model"], dtype=plan["dtype"], attn_implementation=plan["attn_implementation"],
            **plan.get("load_kwargs", {}))
        if plan["device"] != "cpu":
            model = model.to(plan["device"])
        self.model = model.eval()
        gc = transformers.GenerationConfig(max_new_tokens=16, do_sample=False,
                                           eos_token_id=model.generation_config.eos_token_id)
        self.eos = gc.eos_token_id if gc.eos_token_id is not None else -1
        kwargs, self.notes = cb_kwargs(dict(plan["cb_config"]), config_fields(ContinuousBatchingConfig),
                                       transformers.__version__)
        self.mgr = model.init_continuous_batching(
            generation_config=gc, continuous_batching_config=ContinuousBatchingConfig(**kwargs))
        self.lock = threading.Lock()  # guards live and the order of frames about one request
        self.live: dict[int, list[int]] = {}  # rid -> [tokens sent, max_new_tokens]
        self.stopping = False

    def start(self) -> dict[str, Any]:
        self.mgr.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self.mgr.batch_processor is None:  # created by the generation thread (the cache is allocated then)
            fatal = self.mgr.background_thread_status.fatal_error
            if fatal is not None or not self.mgr.is_running() or time.monotonic() > deadline:
                raise RuntimeError(f"the generation loop did not start: {fatal or 'no detail'}")
            time.sleep(0.01)
        cache = self.mgr.batch_processor.cache
        cfg = self.mgr.continuous_batching_config
        page = int(getattr(cfg, "page_size", None) or cfg.block_size)  # block_size: transformers <= 5.17
        self.capacity = int(cache.num_blocks) * page
        import torch
        import transformers

        resolved = {"num_blocks": int(cache.num_blocks), "page_size": page,
                    "max_batch_tokens": int(cache.max_batch_tokens),
                    "max_requests_per_batch": int(cfg.max_requests_per_batch),
                    "block_sharing": bool(cache.use_prefix_sharing), "kv_cache_tokens": self.capacity,
                    "kv_cache_bytes": _cache_bytes(cache), "scheduler_type": cfg.scheduler_type,
                    "attn_implementation": self.model.config._attn_implementation,
                    "dtype": str(self.model.dtype).replace("torch.", ""), "device": str(self.model.device),
                    "use_async_batching": bool(cfg.use_async_batching),
                    "use_cuda_graph": list(cfg.cuda_graph_booleans), "torch_num_threads": torch.get_num_threads()}
        return {"version": transformers.__version__, "torch": torch.__version__.split("+")[0],
                "resolved": resolved, "pid": os.getpid(), "quantization": self._load_report(),
                **({"notes": self.notes} if self.notes else {})}

    def _load_report(self) -> dict[str, Any]:
        """What was loaded, read from the model's own parameters (compare/quality/verify.py checks
        it): the dtype, the weights' bytes, and the linear layers' bytes against their dense size
        in that dtype (1.0: nothing quantized)."""
        import torch

        dtype = self.model.dtype
        linear = [m.weight for m in self.model.modules() if isinstance(m, torch.nn.Linear)]
        lin_bytes = sum(w.numel() * w.element_size() for w in linear)
        dense = sum(w.numel() for w in linear) * torch.empty((), dtype=dtype).element_size()
        return QuantReport(
            method=None, dtype=str(dtype).replace("torch.", ""), kernels=[],
            weight_bytes=sum(p.numel() * p.element_size() for p in self.model.parameters()),
            linear_weight_bytes=lin_bytes, linear_dense_bytes=dense,
            linear_ratio=round(lin_bytes / dense, 4) if dense else None,
            source="the loaded model's parameters (torch.nn.Linear weights)").as_json()

    # ------------------------------------------------------------------ commands (stdin thread)
    def add(self, rid: int, prompt: dict[str, Any], params: dict[str, Any]) -> None:
        try:
            if "ids" in prompt:
                ids = [int(t) for t in prompt["ids"]]
            elif "messages" in prompt:
                out = self.tok.apply_chat_template([{"role": r, "content": c} for r, c in prompt["messages"]],
                                                   add_generation_prompt=True, tokenize=True)
                ids = list(out["input_ids"] if hasattr(out, "keys") else out)
            else:
                ids = list(self.tok(prompt["text"], add_special_tokens=True)["input_ids"])
        except Exception as e:
            self.send(("error", rid, "prompt", f"{type(e).__name__}: {str(e)[:300]}"))
            return
        n, new = len(ids), int(params["max_new_tokens"])
        limit = self.plan.get("max_model_len")
        if params.get("temperature", 0) > 0:
            self.send(("error", rid, "validation", "this engine decodes greedily: transformers' continuous "
                       "batching sets sampling for the whole engine, not per request (use temperature 0)"))
        elif limit and n + new > limit:
            self.send(("error", rid, "validation", f"prompt ({n}) + max_tokens ({new}) exceeds max_model_len {limit}"))
        elif n + new > self.capacity:
            self.send(("error", rid, "engine", f"prompt ({n}) + max_tokens ({new}) do not fit the KV cache "
                       f"({self.capacity} tokens)"))
        else:
            with self.lock:
                self.live[rid] = [0, new]
                got = self.mgr.add_request(input_ids=ids, request_id=str(rid), max_new_tokens=new, streaming=True,
                                           record_timestamps=True,
                                           eos_token_id=-1 if params.get("ignore_eos") else self.eos)
                if got is None:
                    del self.live[rid]
                    self.send(("error", rid, "engine", "the engine refused the request (it is stopping)"))
                else:
                    self.send(("added", rid, n))

    def cancel(self, rid: int) -> None:
        with self.lock:
            if self.live.pop(rid, None) is not None:
                self.mgr.cancel_request(str(rid))
                self.send(("cancelled", rid))

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            for rid in list(self.live):
                self.mgr.cancel_request(str(rid))
            self.live.clear()
        self.mgr.stop(block=True, timeout=30, hard_stop=True)

    # ------------------------------------------------------------------ results (main thread)
    def pump(self) -> bool:
        """Forwards what the generation thread produced; False once the generation loop is gone."""
        first = self.mgr.get_result(timeout=0.05)
        if first is None:
            return self.mgr.is_running() or self.stopping
        results = [first]
        while (r := self.mgr.get_result(timeout=0)) is not None:
            results.append(r)
        batch, frames = [], []
        with self.lock:
            for r in results:
                rid = int(r.request_id)
                state = self.live.get(rid)
                if state is None:  # cancelled: a step already under way may still report it
                    continue
                sent, limit = state
                if r.status.name == "FAILED":
                    del self.live[rid]
                    frames.append(("error", rid, "engine", str(r.error)[:500]))
                    continue
                new = r.generated_tokens[sent:]
                if new:
                    ts = (r.timestamps or [])[sent:] or [time.perf_counter()]
                    batch.append((rid, new, int(ts[0] * 1e9), int(ts[-1] * 1e9)))
                    state[0] = len(r.generated_tokens)
                if r.is_finished():
                    del self.live[rid]
                    frames.append(("end", rid, "length" if len(r.generated_tokens) >= limit else "stop"))
            if batch:
                self.send(("tokens", batch))
            for f in frames:
                self.send(f)
        return True


def _commands(engine: _Engine, fd: int, done: threading.Event) -> None:
    try:
        while (msg := read_frame(fd)) is not None and msg[0] != "stop":
            if msg[0] == "add":
                engine.add(msg[1], msg[2], msg[3])
            elif msg[0] == "cancel":
                engine.cancel(msg[1])
    finally:
        done.set()


def main() -> int:
    cmd_in, out = engine_process_setup()
    out_lock = threading.Lock()

    def send(msg: Any) -> None:
        with out_lock:
            out.write(encode(msg))
            out.flush()

    first = read_frame(cmd_in)
    if not first or first[0] != "config":
        return 2
    try:
        engine = _Engine(first[1], send)
        info = engine.start()
    except Exception as e:
        send(("fatal", fatal_line(e)))
        return 1
    send(("ready", info))
    done = threading.Event()
    threading.Thread(target=_commands, args=(engine, cmd_in, done), daemon=True, name="commands").start()
    while not done.is_set():
        if not engine.pump():
            fatal = engine.mgr.background_thread_status.fatal_error
            send(("fatal", f"the generation loop stopped: {type(fatal).__name__ if fatal else 'no error'}: "
                           f"{str(fatal)[:300] if fatal else ''}"))
            return 3
    engine.stop()
    return 0


if __name__ == "__main__":
    exit_without_teardown(main())  # (the engine is stopped by now: core/process_exit.py)

"""The OpenVINO GenAI engine process: owns the ``ContinuousBatchingPipeline`` and steps it.

``python -m backends.openvino.engine`` is started by backends/openvino/backend.py. The pipeline's
``step()`` holds the GIL for the whole step (measured: a thread stepping the tiny model left the
main thread the interpreter only every ~5 ms switch interval), so driving it from a thread of the
measuring process would stall the client's event loop for a step at a time. Here it has a process
of its own, as vLLM's engine core does: commands arrive on stdin, events leave on stdout, both as
length-prefixed msgpack frames. Tokens are stamped with ``perf_counter_ns()`` when ``step()`` hands
them over; on Linux that clock (CLOCK_MONOTONIC) is the parent's too.

The frames and the process set-up are backends/engine_process.py's; ("end", ...) carries the
pipeline's KV-cache statistics, and a request the scheduler ignores (it cannot fit the KV cache)
comes back as an ``engine`` error.
"""
from __future__ import annotations

import os
import time
from typing import Any

from backends.engine_process import encode, engine_process_setup, fatal_line, read_frame
from core.process_exit import exit_without_teardown


def compiled_linear_precisions(ov: Any, config: dict[str, Any]) -> dict[str, int]:
    """What the plugin runs the linear layers in: the IR compiled with the pipeline's own device and
    properties, counted by the runtime precision of its FullyConnected nodes (f32/bf16 unquantized,
    u8/i8 int8 weights, u4/i4 int4 weights). The pipeline does not expose its compiled model, so
    this is a second compile of the same file (~0.4 s on the tiny model; weights are mmapped)."""
    compiled = ov.Core().compile_model(config["model"] + "/openvino_model.xml", config["device"],
                                       config["properties"])
    counts: dict[str, int] = {}
    for op in compiled.get_runtime_model().get_ops():
        rt = op.get_rt_info()
        if "layerType" in rt and rt["layerType"].astype(str) == "FullyConnected":
            prec = rt["runtimePrecision"].astype(str) if "runtimePrecision" in rt else "?"
            counts[prec] = counts.get(prec, 0) + 1
    del compiled
    return counts


def _finish(reason: Any) -> str | None:
    name = getattr(reason, "name", str(reason))
    return {"LENGTH": "length", "STOP": "stop", "NONE": None}.get(name, name.lower())


def main() -> int:
    cmd_in, out = engine_process_setup()

    def send(msg: Any) -> None:
        out.write(encode(msg))
        out.flush()

    first = read_frame(cmd_in)
    if not first or first[0] != "config":
        return 2
    config = first[1]
    try:
        import numpy as np
        import openvino as ov
        import openvino_genai as ovg

        sc = ovg.SchedulerConfig()
        for k, v in config["scheduler"].items():
            setattr(sc, k, v)
        pipe = ovg.ContinuousBatchingPipeline(config["model"], sc, config["device"], config["properties"])
        tok = pipe.get_tokenizer()
        compiled = compiled_linear_precisions(ov, config) if config.get("verify", True) else None
    except Exception as e:
        send(("fatal", fatal_line(e)))
        return 1
    resolved = {k: getattr(sc, k) for k in ("max_num_seqs", "max_num_batched_tokens", "cache_size",
                                            "num_kv_blocks", "dynamic_split_fuse", "enable_prefix_caching")}
    send(("ready", {"version": ovg.__version__.split("-")[0], "openvino": ov.__version__.split("-")[0],
                    "scheduler": resolved, "pid": os.getpid(), "compiled_linear_precisions": compiled}))

    import selectors

    sel = selectors.DefaultSelector()
    sel.register(cmd_in, selectors.EVENT_READ)
    live: dict[int, Any] = {}
    while True:
        busy = bool(live) or pipe.has_non_finished_requests()
        # commands: wait for one when idle, else only take what has arrived
        while sel.select(timeout=None if not busy else 0):
            msg = read_frame(cmd_in)
            if msg is None or msg[0] == "stop":
                for h in live.values():
                    h.cancel()
                for _ in range(100):  # let the scheduler drop what was cancelled and free its blocks
                    if not pipe.has_non_finished_requests():
                        break
                    pipe.step()
                return 0
            if msg[0] == "cancel":
                h = live.pop(msg[1], None)
                if h is not None:
                    h.cancel()
                    send(("cancelled", msg[1]))
            elif msg[0] == "add":
                _, rid, prompt, params = msg
                try:
                    if "ids" in prompt:
                        x = ov.Tensor(np.asarray([prompt["ids"]], dtype=np.int64))
                    elif "messages" in prompt:
                        text = tok.apply_chat_template([{"role": r, "content": c} for r, c in prompt["messages"]],
                                                       add_generation_prompt=True)
                        x = tok.encode(text, add_special_tokens=False).input_ids
                    else:
                        x = tok.encode(prompt["text"]).input_ids
                    gc = ovg.GenerationConfig()
                    for k, v in params.items():
                        setattr(gc, k, v)
                    n = int(x.shape[1])
                    limit = config.get("max_model_len")
                    if limit and n + gc.max_new_tokens > limit:
                        send(("error", rid, "validation", f"prompt ({n}) + max_tokens ({gc.max_new_tokens}) "
                              f"exceeds max_model_len {limit}"))
                        continue
                    live[rid] = pipe.add_request(rid, x, gc)
                    send(("added", rid, n))
                except Exception as e:
                    send(("error", rid, "validation", f"{type(e).__name__}: {str(e)[:300]}"))
            busy = bool(live) or pipe.has_non_finished_requests()
        if not busy:
            continue
        pipe.step()
        t = time.perf_counter_ns()
        batch, ended, ignored = [], [], []
        for rid, h in list(live.items()):
            ids: list[int] = []
            finish = None
            while h.can_read():
                for o in h.read().values():
                    ids.extend(o.generated_ids)
                    finish = _finish(o.finish_reason) or finish
            if ids:
                batch.append((rid, ids, t, t))
            status = h.get_status().name
            if status == "IGNORED":  # the scheduler dropped it: it can never fit the KV cache
                ignored.append(rid)
                del live[rid]
            elif status != "RUNNING":
                ended.append((rid, finish))
                del live[rid]
        if batch:
            send(("tokens", batch))
        for rid in ignored:
            send(("error", rid, "engine", "the engine ignored the request: prompt + output do not fit its KV cache"))
        if ended:
            m = pipe.get_metrics()
            stats = {"kv_cache_size_in_bytes": int(m.kv_cache_size_in_bytes),
                     "max_cache_usage": float(m.max_cache_usage)}
            for rid, finish in ended:
                send(("end", rid, finish, stats))


if __name__ == "__main__":
    exit_without_teardown(main())  # (the engine is stopped by now: core/process_exit.py)

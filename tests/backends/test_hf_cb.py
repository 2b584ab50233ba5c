"""The hf-cb backend against transformers' real continuous-batching engine (CPU, fp32).

Several concurrent streams in one engine produce transformers' generate() greedy tokens, with the
manager's own per-token stamps; a cancelled stream frees its request in the engine; requests the
engine cannot serve fail alone; a killed engine process fails its requests and later ones.
"""
from __future__ import annotations

import asyncio

import pytest

from adapters.spec import ServingSpec
from backends.hf.cb import HFCBBackend
from core.errors import BackendRequestError, FailureKind
from core.records import GenerationRequest, StreamEnd, TokenEvent
from tests.reference import collect, reference_greedy

pytestmark = pytest.mark.engine
SPEC = dict(dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20, max_num_batched_tokens=256)


def test_streams_concurrent_requests_with_the_reference_greedy_tokens(tiny_model):
    # one prompt longer than max_num_batched_tokens: its prefill is split across steps
    prompts = [tuple(range(1 + i, 40 + 3 * i)) for i in range(3)] + [tuple(range(5, 305))]
    reqs = [GenerationRequest(f"r{i}", max_tokens=24, prompt_token_ids=p) for i, p in enumerate(prompts)]

    async def go():
        async with HFCBBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
            return await asyncio.gather(*(collect(b, r) for r in reqs)), b.describe()

    outs, desc = asyncio.run(go())
    ref = reference_greedy(tiny_model, prompts, 24)
    for items, want, prompt in zip(outs, ref, prompts):
        events, end = items[:-1], items[-1]
        assert all(isinstance(e, TokenEvent) for e in events) and isinstance(end, StreamEnd)
        assert [t for e in events for t in e.token_ids] == want  # fp32 greedy: identical tokens
        stamps = [e.t_ns for e in events]
        assert stamps == sorted(stamps) and end.t_ns >= stamps[-1]
        assert end.finish_reason == "length" and end.completion_tokens == 24 and end.prompt_tokens == len(prompt)
        m = end.engine_metrics  # the manager's token stamps, and our delivery after them
        assert m["engine_last_token_ts"] > m["engine_first_token_ts"] and m["num_generation_tokens"] == 24
        assert 0 <= m["first_token_delivery_s"] < 5 and 0 <= m["last_token_delivery_s"] < 5
    assert desc.framework == "transformers-cb" and desc.version.startswith("5.")
    resolved = desc.native_config["resolved"]
    # the cache is the size the plan asked for, not one sized from the host's free memory
    assert resolved["num_blocks"] == desc.native_config["continuous_batching_config"]["num_blocks"]
    assert resolved["kv_cache_tokens"] == 64 << 20 >> 11  # 2 KiB a token in fp32
    assert resolved["max_batch_tokens"] == 256 and resolved["dtype"] == "float32"
    assert resolved["attn_implementation"] == "sdpa"
    # what was loaded, read back from the model's parameters: fp32, nothing quantized, and valid
    from compare.quality.verify import verify

    q = desc.extra["quantization"]
    assert q["dtype"] == "float32" and q["method"] is None and q["linear_ratio"] == 1.0 and q["weight_bytes"] > 0
    assert verify(ServingSpec(model=str(tiny_model), **SPEC), q, framework="transformers-cb")["status"] == "valid"
    assert verify(ServingSpec(model=str(tiny_model), **{**SPEC, "dtype": "bfloat16"}), q,
                  framework="transformers-cb")["status"] == "invalid"


def test_cancelling_frees_the_engine_and_bad_requests_fail_alone(tiny_model):
    async def go():
        async with HFCBBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
            gen = b.stream(GenerationRequest("long", max_tokens=480, prompt_token_ids=(1, 2, 3)))
            got = 0
            async for item in gen:
                got += len(item.token_ids)
                if got >= 3:
                    break
            await gen.aclose()  # what the executor does to a request it cancels or times out
            errors = []
            for bad in (GenerationRequest("sampled", max_tokens=4, prompt_token_ids=(1, 2), temperature=0.7),
                        GenerationRequest("too-long", max_tokens=500, prompt_token_ids=tuple(range(1, 40)))):
                with pytest.raises(BackendRequestError) as e:
                    await collect(b, bad)
                errors.append(e.value)
            after = await collect(b, GenerationRequest("after", max_tokens=5, prompt_token_ids=(4, 5, 6)))
            return got, b.cancelled_in_engine, errors, after

    got, cancelled, errors, after = asyncio.run(go())
    assert 3 <= got < 480
    assert cancelled == 1, "the cancel did not reach the request in the engine"
    assert [e.kind for e in errors] == [FailureKind.VALIDATION, FailureKind.VALIDATION]
    assert "greedily" in errors[0].message and "max_model_len 512" in errors[1].message
    assert sum(len(i.token_ids) for i in after[:-1]) == 5 and after[-1].finish_reason == "length"


def test_engine_process_crash_fails_its_requests_and_later_ones(tiny_model):
    import os
    import signal

    import psutil

    async def go():
        async with HFCBBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
            pid = b.describe().extra["engine_pid"]
            gen = b.stream(GenerationRequest("long", max_tokens=480, prompt_token_ids=(1, 2, 3)))
            with pytest.raises(BackendRequestError) as during:
                async for _ in gen:
                    os.kill(pid, signal.SIGKILL)  # the engine dies mid-stream
            with pytest.raises(BackendRequestError) as after:
                await collect(b, GenerationRequest("next", max_tokens=4, prompt_token_ids=(1, 2)))
            return pid, during.value, after.value

    pid, during, after = asyncio.run(go())
    assert during.kind is FailureKind.ENGINE_DEAD and "exited" in during.message
    assert after.kind is FailureKind.ENGINE_DEAD
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_engine_process_dies_with_the_tool(tiny_model, tmp_path):
    """SIGKILL of `compare run` (no handler can run) must not orphan the engine process."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    from tests.conftest import TINY_SPEC_ARGS, VENV_BIN

    p = subprocess.Popen([str(VENV_BIN / "compare"), "run", "--backends", "hf-cb", "--model", str(tiny_model),
                          *TINY_SPEC_ARGS, "--num-requests", "64", "--concurrency", "1", "--output-len", "400",
                          "--out", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        engine = None
        for _ in range(1200):
            kids = psutil.Process(p.pid).children(recursive=True)
            engine = next((k for k in kids if "backends.hf.cb_engine" in " ".join(k.cmdline())), None)
            if engine is not None and any(f.stat().st_size for f in tmp_path.glob("*/requests.jsonl")):
                break
            time.sleep(0.1)
        assert engine is not None, "the engine process never started"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        gone = False
        for _ in range(100):
            if not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE:
                gone = True
                break
            time.sleep(0.05)
        assert gone, f"engine process {engine.pid} outlived the tool"
    finally:
        if p.poll() is None:
            p.kill()

"""The openvino backend against the real OpenVINO GenAI engine (the model exported by optimum-intel).

Streaming, concurrent requests, greedy tokens equal to transformers' fp32 tokens, cancellation
that frees the engine's slot, a request the engine drops, timeouts through the CLI, and int8 /
int4 runs whose loaded precision is read from the exported model's weights.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from adapters.spec import ServingSpec
from backends.openvino.backend import OpenVINOBackend
from core.errors import BackendRequestError, FailureKind
from core.records import GenerationRequest, StreamEnd, TokenEvent
from tests.conftest import TINY_SPEC_ARGS, run_cli
from tests.reference import collect, reference_greedy

pytestmark = pytest.mark.engine
SPEC = dict(dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20)


def test_streams_concurrent_requests_with_the_reference_greedy_tokens(tiny_model):
    prompts = [tuple(range(1 + i, 40 + 3 * i)) for i in range(4)]
    reqs = [GenerationRequest(f"r{i}", max_tokens=24, prompt_token_ids=p) for i, p in enumerate(prompts)]

    async def go():
        async with OpenVINOBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
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
        m = end.engine_metrics  # engine hand-over stamps, and our delivery after them
        assert m["engine_last_token_ts"] >= m["engine_first_token_ts"] and m["num_generation_tokens"] == 24
        assert 0 <= m["first_token_delivery_s"] < 5 and 0 <= m["last_token_delivery_s"] < 5
    assert desc.framework == "openvino-genai" and desc.version.startswith("2026.")
    assert desc.native_config["properties"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert desc.native_config["resolved"]["max_num_seqs"] > 0
    export = desc.extra["export"]
    assert set(export["weight_types"]) == {"f32"} and export["loaded_compression"] is None
    # the compiled model's linear layers run in f32 (the plugin's bf16 default is pinned away)
    assert set(export["compiled_linear_precisions"]) == {"f32"}


def test_cancelling_a_stream_frees_the_engine(tiny_model):
    async def go():
        async with OpenVINOBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
            gen = b.stream(GenerationRequest("long", max_tokens=480, prompt_token_ids=(1, 2, 3)))
            got = 0
            async for item in gen:
                got += len(item.token_ids)
                if got >= 3:
                    break
            await gen.aclose()  # what the executor does to a request it cancels or times out
            after = await collect(b, GenerationRequest("after", max_tokens=5, prompt_token_ids=(4, 5, 6)))
            return got, b.cancelled_in_engine, after

    got, cancelled, after = asyncio.run(go())
    assert 3 <= got < 480
    assert cancelled == 1, "the cancel did not reach the request in the engine"
    assert sum(len(i.token_ids) for i in after[:-1]) == 5 and after[-1].finish_reason == "length"


def test_a_request_the_engine_drops_fails_alone(tiny_model):
    # one KV block (32 tokens): a 100-token prompt can never fit; the engine ignores it
    spec = ServingSpec(model=str(tiny_model), dtype="float32", native={"openvino": {"num_kv_blocks": 1}})

    async def go():
        async with OpenVINOBackend(spec) as b:
            with pytest.raises(BackendRequestError) as e:
                await collect(b, GenerationRequest("big", max_tokens=4, prompt_token_ids=tuple(range(1, 101))))
            small = await collect(b, GenerationRequest("small", max_tokens=4, prompt_token_ids=(1, 2)))
            return e.value, small

    err, small = asyncio.run(go())
    assert err.kind is FailureKind.ENGINE and "KV cache" in err.message
    assert sum(len(i.token_ids) for i in small[:-1]) == 4


def test_timeouts_are_recorded_and_the_run_goes_on(tiny_model, tmp_path):
    r = run_cli("run", "--backends", "openvino", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--num-requests", "2", "--concurrency", "1", "--input-len", "8", "--output-len", "400",
                "--warmup", "0", "--timeout", "0.05", "--out", str(tmp_path), "--run-id", "to")
    assert r.returncode == 1, r.stderr[-2000:]
    recs = [json.loads(line) for line in (tmp_path / "to" / "requests.jsonl").read_text().splitlines()]
    assert recs and all(x["error_kind"] == "timeout" for x in recs)
    assert json.loads((tmp_path / "to" / "run.json").read_text())["backends"]["openvino"]["status"] == "failed"


@pytest.mark.parametrize("scheme,compressed,wtype", [("w8a16-int8", "int8", ("u8", "i8")), ("w4a16", "int4", ("u4", "i4"))])
def test_quantized_runs_load_the_compressed_weights(tiny_model, tmp_path, scheme, compressed, wtype):  # noqa: E501
    r = run_cli("run", "--backends", "openvino", "--model", str(tiny_model), *TINY_SPEC_ARGS,
                "--quantization", scheme, "--num-requests", "4", "--concurrency", "2", "--input-len", "16",
                "--output-len", "8", "--out", str(tmp_path), "--run-id", "q", "--format", "json")
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads((tmp_path / "q" / "run.json").read_text())
    extra = run["backends"]["openvino"]["describe"]["extra"]
    # read back from the compiled model (and the exported weights), not from what was asked
    assert extra["quantization"]["method"] == compressed and extra["quantization"]["requested"] == scheme
    types = extra["export"]["weight_types"]
    assert sum(types.get(t, 0) for t in wtype) >= 4 * 7  # 4 layers x 7 linear layers
    # and what the plugin compiled: the linear layers run on compressed weights
    compiled = extra["export"]["compiled_linear_precisions"]
    assert sum(compiled.get(t, 0) for t in wtype) >= 4 * 7 and "f32" not in compiled
    assert run["backends"]["openvino"]["levels"]["c2"]["ok"] == 4
    # the export the run used is listed in the engine cache, with the exporter's own log
    ls = run_cli("cache", "ls", "--json")
    rows = [x for x in json.loads(ls.stdout) if x["kind"] == "openvino-ir"]
    mine = [x for x in rows if x["model"] == str(tiny_model.resolve()) and x["quant"] == compressed]
    assert len(mine) == 1 and "optimum-intel" in mine[0]["built_by"] and mine[0]["size_bytes"] > 0
    assert (Path(mine[0]["path"]) / "export.log").is_file()


def test_engine_process_crash_fails_its_requests_and_later_ones(tiny_model):
    import os
    import signal

    import psutil

    async def go():
        async with OpenVINOBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
            pid = b.describe().extra["engine_pid"]
            gen = b.stream(GenerationRequest("long", max_tokens=480, prompt_token_ids=(1, 2, 3)))
            with pytest.raises(BackendRequestError) as during:
                async for item in gen:
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

    from tests.conftest import VENV_BIN

    p = subprocess.Popen([str(VENV_BIN / "compare"), "run", "--backends", "openvino", "--model", str(tiny_model),
                          *TINY_SPEC_ARGS, "--num-requests", "64", "--concurrency", "1", "--output-len", "400",
                          "--out", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        engine = None
        def cmdline(k: psutil.Process) -> str:
            try:
                return " ".join(k.cmdline())
            except psutil.Error:  # a short-lived child (a helper the tool ran) ended while we looked
                return ""

        for _ in range(600):
            kids = psutil.Process(p.pid).children(recursive=True)
            engine = next((k for k in kids if "backends.openvino.engine" in cmdline(k)), None)
            if engine is not None and (tmp_path.glob("*/requests.jsonl") and any(
                    f.stat().st_size for f in tmp_path.glob("*/requests.jsonl"))):
                break
            time.sleep(0.1)
        assert engine is not None, "the engine process never started"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        gone = False
        for _ in range(100):
            try:
                if not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE:
                    gone = True
            except (psutil.ZombieProcess, psutil.NoSuchProcess):  # (dead between the two calls)
                gone = True
            if gone:
                break
            time.sleep(0.05)
        assert gone, f"engine process {engine.pid} outlived the tool"
    finally:
        if p.poll() is None:
            p.kill()

"""The llamacpp backend against the real llama-server (built by scripts/setup.d/70-llamacpp.sh into
the engine cache, or $LLM_COMPARE_LLAMA_SERVER), serving the tiny model's f32 GGUF.

One server start covers streaming, concurrency, greedy tokens equal to transformers' fp32 tokens,
the per-request server timings, cancellation, tokenization and what the server reports it loaded; the process
tests check that no llama-server outlives the tool, however it ends.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from adapters.spec import ServingSpec
from backends.llamacpp.server import LlamaCppBackend
from compare.running.multiproc import not_shardable, run_level_procs
from compare.workload.schedule import LoadLevel
from core.records import GenerationRequest, StreamEnd, TokenEvent
from tests.conftest import TINY_SPEC_ARGS, VENV_BIN, run_cli
from tests.reference import collect, reference_greedy

pytestmark = pytest.mark.engine
TEXT = "def main(argv):\n    return {'a': 1, \"b\": [2, 3]}  # it's 42\t\u00e9t\u00e9 \u2713\n\n  x"
SPEC = dict(dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20, max_num_seqs=4)


def test_one_server_streams_greedy_tokens_with_its_own_timings(tiny_model):
    prompts = [tuple(range(1 + i, 40 + 3 * i)) for i in range(4)]
    reqs = [GenerationRequest(f"r{i}", max_tokens=24, prompt_token_ids=p, ignore_eos=True)
            for i, p in enumerate(prompts)]

    async def go():
        async with LlamaCppBackend(ServingSpec(model=str(tiny_model), **SPEC)) as b:
            await b.on_level_start("c4")
            outs = await asyncio.gather(*(collect(b, r) for r in reqs))
            level = await b.on_level_end("c4")
            # a stream the consumer abandons (what the executor does on a timeout) frees its slot
            gen = b.stream(GenerationRequest("long", max_tokens=400, prompt_token_ids=(1, 2, 3), ignore_eos=True))
            async for _ in gen:
                break
            await gen.aclose()
            for _ in range(100):  # the server notices the closed connection within its next steps
                slots = (await b._client.get("/slots")).json()
                if not any(s.get("is_processing") for s in slots):
                    break
                await asyncio.sleep(0.1)
            after = await collect(b, GenerationRequest("after", max_tokens=5, prompt_token_ids=(4, 5, 6)))
            # the same requests sent by two client processes (each rebuilds the client by protocol name)
            assert not_shardable(b) is None
            await b.on_level_start("c4-procs")
            two = await run_level_procs(b, reqs, LoadLevel("concurrency", 4), procs=2, seed=0, timeout_s=120,
                                        max_errors=0)
            two_level = await b.on_level_end("c4-procs")
            # the declared pre-tokenizer is the right one: llama-server's /tokenize equals transformers'
            r = await b._client.post("/tokenize", json={"content": TEXT, "add_special": False})
            return outs, level, after, slots, r.json()["tokens"], b.describe(), two, two_level

    outs, level, after, slots, server_ids, desc, two, two_level = asyncio.run(go())
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    ref = reference_greedy(tiny_model, prompts, 24)
    unknown = 0
    for items, want, prompt in zip(outs, ref, prompts):
        events, end = items[:-1], items[-1]
        assert all(isinstance(e, TokenEvent) for e in events) and isinstance(end, StreamEnd)
        got = [t for e in events for t in e.token_ids]
        assert len(got) == len(want) == 24
        for i, (g, w) in enumerate(zip(got, want)):
            if g == -1:  # not streamed by llama-server: transformers' token ends inside a UTF-8 character
                unknown += 1
                assert tok.decode(want[:i + 1]).endswith("\ufffd"), (i, w)
            else:
                assert g == w, (i, got, want)  # fp32 greedy: transformers' tokens
        stamps = [e.t_ns for e in events]
        assert stamps == sorted(stamps) and end.t_ns >= stamps[-1]
        assert end.finish_reason == "length" and end.completion_tokens == 24 and end.prompt_tokens == len(prompt)
        m = end.engine_metrics  # the server's own per-request timings
        assert m["prefill_s"] > 0 and m["decode_s"] > 0 and m["num_generation_tokens"] == 24
        assert m["prompt_processed_tokens"] + m["prompt_cached_tokens"] == len(prompt)
    assert unknown < 4 * 24 // 4  # most ids are streamed
    assert two.aborted is None and two.client_procs["n"] == 2
    by_id = {r.request_id: r for r in two.records}
    for req, items in zip(reqs, outs):  # what the client processes read is what this process read
        rec, one = by_id[req.request_id], [t for e in items[:-1] for t in e.token_ids]
        assert rec.ok and sum(rec.event_token_counts) == rec.usage_completion_tokens == 24, rec
        assert list(rec.token_ids) == one and rec.engine_metrics["num_generation_tokens"] == 24
    assert two_level["server_decode_ms"]["count"] == 4
    assert sum(len(i.token_ids) for i in after[:-1]) == 5 and after[-1].finish_reason == "length"
    assert not any(s.get("is_processing") for s in slots), slots  # the abandoned request was stopped
    # per level: exact means of the timings, and the Prometheus counters of /metrics
    assert level["server_prefill_ms"]["count"] == 4 and level["server_decode_ms"]["mean"] > 0
    assert level["available"] and level["counters"].get("llamacpp:tokens_predicted_total") == 4 * 24
    assert desc.framework == "llamacpp" and desc.version != "unknown"
    resolved = desc.native_config["resolved"]
    assert resolved["total_slots"] == 4 and resolved["n_ctx"] == 512  # --kv-unified-per-slot: the request limit
    q = desc.extra["quantization"]  # what the server says it loaded
    assert q["file_type"] == "all F32" and q["dtype"] == "float32" and q["method"] is None
    assert 31 < q["bits_per_weight"] <= 33 and set(q["tensor_types"]) == {"f32"} and q["kv_cache_dtype"] == "f32"
    assert desc.extra["gguf"]["declared_pre_tokenizer"] == "qwen2"  # transformers loads it as Qwen2Tokenizer
    assert server_ids == tok(TEXT)["input_ids"]


def _llama_servers(tree):
    out = []
    for p in tree:
        try:
            if "llama-server" in p.name() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


# SIGINT and SIGHUP take SIGTERM's path (one handler; every signal is run on the fake engine in
# tests/compare/running/test_signals_fake.py): the server's teardown needs one of them
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_llama_server_outlives_the_tool(tiny_model, tmp_path, sig):
    """SIGKILL (no handler can run: the guard and the reaper) and SIGTERM (the run's own teardown)."""
    # signalled once the first request is written: short requests, no warm-up, many of them so the
    # level is still running then
    p = subprocess.Popen([str(VENV_BIN / "compare"), "run", "--backends", "llamacpp", "--model", str(tiny_model),
                          *TINY_SPEC_ARGS, "--num-requests", "400", "--concurrency", "1", "--output-len", "64",
                          "--warmup", "0", "--out", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        servers = []
        deadline = time.time() + 1800  # the first use may build llama.cpp
        while time.time() < deadline:
            assert p.poll() is None, "compare run ended before it was signalled"
            servers = _llama_servers(psutil.Process(p.pid).children(recursive=True))
            done = [f for f in tmp_path.glob("*/requests.jsonl") if f.stat().st_size]
            if servers and done:
                break
            time.sleep(0.2)
        assert servers, "llama-server never started"
        os.kill(p.pid, sig)
        p.wait(120)
        gone = False
        for _ in range(300):
            if not _llama_servers(servers):
                gone = True
                break
            time.sleep(0.1)
        assert gone, f"llama-server {servers[0].pid} outlived the tool ({signal.Signals(sig).name})"
        if sig != signal.SIGKILL:
            assert p.returncode == 128 + sig
            run = json.loads(next(tmp_path.glob("*/run.json")).read_text())
            assert run["status"] == "interrupted"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def test_llama_server_killed_mid_level_ends_the_level_as_engine_died(tiny_model, tmp_path):
    """The engine dies, not the tool: llama-server SIGKILLed once records are being written. The
    level stops at the first refused request (engine_dead), the run is `partial` with the backend
    `failed` ("engine died"), the records measured before are kept, exit 1, no traceback of ours,
    and no llama-server is left."""
    p = subprocess.Popen([str(VENV_BIN / "compare"), "run", "--backends", "llamacpp", "--model", str(tiny_model),
                          *TINY_SPEC_ARGS, "--num-requests", "400", "--concurrency", "1", "--output-len", "64",
                          "--warmup", "0", "--quality", "off", "--out", str(tmp_path), "--run-id", "died"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reqs = tmp_path / "died" / "requests.jsonl"
    try:
        servers = []
        deadline = time.time() + 1800  # the first use may build llama.cpp
        while time.time() < deadline and p.poll() is None:
            servers = _llama_servers(psutil.Process(p.pid).children(recursive=True))
            if servers and reqs.exists() and reqs.read_text().count("\n") >= 2:
                break
            time.sleep(0.2)
        assert servers, "llama-server never started"
        servers[0].kill()
        output, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 1, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    run = json.loads((tmp_path / "died" / "run.json").read_text())
    b = run["backends"]["llamacpp"]
    assert run["status"] == "partial" and b["status"] == "failed" and "engine died" in b["error"], b.get("error")
    lines = [json.loads(x) for x in reqs.read_text().splitlines()]
    assert sum(1 for x in lines if x["error_kind"] is None) >= 2 and len(lines) < 400  # measured work kept
    assert any(x["error_kind"] == "engine_dead" for x in lines)
    assert b["levels"]["c1"]["aborted"]
    time.sleep(0.5)
    assert not _llama_servers(servers)


def test_gguf_builds_are_listed_in_the_engine_cache(tiny_model):
    from backends.llamacpp.gguf import prepare_gguf

    entry, _ = prepare_gguf(str(tiny_model), "f32")
    ls = run_cli("cache", "ls", "--json")
    assert ls.returncode == 0, ls.stderr
    rows = {x["key"]: x for x in json.loads(ls.stdout) if x["kind"] == "gguf"}
    mine = rows[entry.key]
    assert mine["model"] == str(tiny_model.resolve()) and mine["quant"] == "f32" and mine["size_bytes"] > 0
    assert "llama.cpp b11434" in mine["built_by"] and (entry.path / "convert.log").is_file()
    builds = [x for x in json.loads(ls.stdout) if x["kind"] == "llama.cpp-build"]
    assert builds and all((Path(b["path"]) / "build.log").is_file() for b in builds)

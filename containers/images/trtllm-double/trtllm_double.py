"""TEST DOUBLE of TensorRT-LLM's command-line tools. THIS IS NOT TensorRT-LLM.

It lets the quantize -> build -> serve pipeline run for real on a CPU machine (real containers,
real mounts, the real engine cache, a real OpenAI-compatible server). It quantizes and compiles
nothing. What it does check: every flag it is given must be one the real tool defines (names and
choices read from the sources cited per tool), like argparse/click reject unknown options there;
the LlmArgs YAML may only hold LlmArgs fields (TRT-LLM's LlmArgs is a strict pydantic model).

    quantize.py   examples/quantization/quantize.py (TRT-LLM 0.18 .. 1.3.0rc20): copies the checkpoint
    trtllm-build  tensorrt_llm/commands/build.py: writes engine/config.json + a copy of the weights
    hf_ptq.py     NVIDIA/Model-Optimizer examples/llm_ptq/hf_ptq.py: copies the checkpoint
    trtllm-serve  tensorrt_llm/commands/serve.py: the REAL vLLM OpenAI server on the weights behind a
                  front that reproduces trtllm-serve's stream ids and /metrics per release

Each tool writes ``trtllm_double.json`` (its exact argv) into its output so tests can check that
what the backend generated is what ran in the container.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import yaml

QFORMATS = ["nvfp4", "fp8", "int8_sq", "int4_awq", "w4a8_awq", "int8_wo", "int4_wo", "full_prec"]
# LlmArgs / KvCacheConfig fields the backend may emit (llmapi/llm_args.py; KvCacheConfig reference 1.3.0rc27)
LLM_ARGS = {"dtype", "max_batch_size", "max_num_tokens", "max_seq_len", "tensor_parallel_size",
            "enable_chunked_prefill", "kv_cache_config", "cuda_graph_config", "load_format", "print_iter_log",
            "enable_iter_perf_stats", "enable_iter_req_stats", "return_perf_metrics",
            "trust_remote_code", "max_beam_width", "pipeline_parallel_size", "backend"}
KV_CACHE = {"free_gpu_memory_fraction", "enable_block_reuse", "dtype", "tokens_per_block",
            "max_gpu_total_bytes", "max_tokens"}


def _copy_checkpoint(src: str, dst: str) -> None:
    if not os.path.isfile(os.path.join(src, "config.json")):
        sys.exit(f"[double] {src} has no config.json: not a HF checkpoint")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if os.path.isfile(p) and name != "trtllm_double.json":
            shutil.copy2(p, os.path.join(dst, name))


def _record(dst: str, tool: str, argv: list[str]) -> None:
    with open(os.path.join(dst, "trtllm_double.json"), "w") as f:
        json.dump({"tool": tool, "argv": argv, "note": "test double: nothing was quantized or compiled"}, f)


def quantize(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="quantize.py")
    p.add_argument("--model_dir", default=None)
    p.add_argument("--output_dir", default="exported_model")
    p.add_argument("--dtype", default="auto", choices=["auto", "float16", "bfloat16", "float32"])
    p.add_argument("--qformat", default="full_prec", choices=QFORMATS)
    p.add_argument("--kv_cache_dtype", default=None, choices=["int8", "fp8"])
    for flag in ("--tp_size", "--pp_size", "--cp_size", "--calib_size", "--batch_size", "--awq_block_size",
                 "--seed", "--calib_max_seq_length", "--tokenizer_max_seq_length"):
        p.add_argument(flag, type=int)
    p.add_argument("--calib_dataset", default="cnn_dailymail")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = p.parse_args(argv)
    if a.model_dir is None:
        sys.exit("One of source checkpoint (model_dir, nemo_ckpt_path) must be specified")
    _copy_checkpoint(a.model_dir, a.output_dir)
    _record(a.output_dir, "quantize.py", argv)
    print(f"[double] quantize.py: copied {a.model_dir} -> {a.output_dir} (qformat {a.qformat} NOT applied)")
    return 0


def build(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="trtllm-build")
    p.add_argument("--checkpoint_dir", default=None)
    p.add_argument("--output_dir", default="engine_outputs")
    for flag in ("--max_batch_size", "--max_input_len", "--max_seq_len", "--max_beam_width", "--max_num_tokens",
                 "--opt_num_tokens", "--tokens_per_block", "--workers", "--max_draft_len"):
        p.add_argument(flag, type=int)
    for flag in ("--use_paged_context_fmha", "--use_fused_mlp", "--remove_input_padding"):
        p.add_argument(flag, choices=["enable", "disable"])
    for flag in ("--gemm_plugin", "--gpt_attention_plugin"):
        p.add_argument(flag)
    for flag in ("--strip_plan", "--weight_sparsity", "--weight_streaming", "--fast_build", "--monitor_memory"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--log_level", default="info")
    a = p.parse_args(argv)
    if a.checkpoint_dir is None or not os.path.isdir(a.checkpoint_dir):
        sys.exit(f"[double] trtllm-build: checkpoint_dir {a.checkpoint_dir} does not exist")
    _copy_checkpoint(a.checkpoint_dir, os.path.join(a.output_dir, "hf"))
    with open(os.path.join(a.output_dir, "config.json"), "w") as f:
        json.dump({"build_config": {k: v for k, v in vars(a).items() if v is not None}, "double": True}, f)
    _record(a.output_dir, "trtllm-build", argv)
    print(f"[double] trtllm-build: wrote {a.output_dir} (no TensorRT engine was compiled)")
    return 0


def hf_ptq(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hf_ptq.py")
    p.add_argument("--pyt_ckpt_path", "--model", required=True)
    p.add_argument("--qformat", default="fp8")
    p.add_argument("--kv_cache_qformat", default="fp8_cast",
                   choices=["none", "fp8_cast", "fp8", "fp8_affine", "nvfp4_cast", "nvfp4", "nvfp4_affine", "nvfp4_rotate"])
    p.add_argument("--export_path", default="exported_model")
    p.add_argument("--export_fmt", default="hf", choices=["tensorrt_llm", "hf"])
    p.add_argument("--calib_size", default="512")
    p.add_argument("--dataset", default=None)
    p.add_argument("--inference_tensor_parallel", type=int, default=1)
    p.add_argument("--inference_pipeline_parallel", type=int, default=1)
    p.add_argument("--awq_block_size", type=int, default=0)
    p.add_argument("--batch_size", type=int, default=0)
    a = p.parse_args(argv)
    _copy_checkpoint(a.pyt_ckpt_path, a.export_path)
    _record(a.export_path, "hf_ptq.py", argv)
    print(f"[double] hf_ptq.py: copied {a.pyt_ckpt_path} -> {a.export_path} (qformat {a.qformat} NOT applied)")
    return 0


# What the double reproduces of trtllm-serve's HTTP surface, per release (adapters/facts/trtllm-*.yaml):
# * completions stream: before upstream PR #14708 (merged 2026-05-28; releases 1.0, 1.1, 1.2.x) every
#   chunk is a new CompletionStreamResponse with a fresh random id, the final usage-only chunk a
#   ChatCompletionStreamResponse (its own id); continuous usage carries the running completion total.
# * GET /metrics: the JSON iteration stats drained by each read; [] unless the LlmArgs YAML sets
#   enable_iter_perf_stats (default false). GET /prometheus/metrics: only with return_perf_metrics.
# The release is TRTLLM_DOUBLE_RELEASE (default 1.2.0, the backend's default release). Chunk ids:
# a fresh id per chunk for 1.0 .. 1.2.x, one per request from 1.3.0 (the PR landed before it). The
# 1.3.0 release candidates straddle the PR, so for them TRTLLM_DOUBLE_CHUNK_IDS must say which.
CHUNK_IDS = ("fresh-per-chunk", "per-request")


def release_series(release: str) -> tuple[int, int]:
    parts = release.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        sys.exit(f"[double] TRTLLM_DOUBLE_RELEASE={release!r}: expected a release like 1.2.0")


def chunk_ids_of(release: str, override: str | None = None) -> str:
    if override:
        if override not in CHUNK_IDS:
            sys.exit(f"[double] TRTLLM_DOUBLE_CHUNK_IDS={override!r}: expected one of {', '.join(CHUNK_IDS)}")
        return override
    major, minor = release_series(release)
    if (major, minor) < (1, 3):
        return "fresh-per-chunk"
    if (major, minor) == (1, 3) and any(tag in release for tag in ("rc", "dev", "a", "b")):
        sys.exit(f"[double] TRTLLM_DOUBLE_RELEASE={release!r}: the 1.3.0 release candidates straddle upstream "
                 f"PR #14708; set TRTLLM_DOUBLE_CHUNK_IDS=fresh-per-chunk or per-request")
    return "per-request"


class ServeQuirks:
    """Per-server state of the double's trtllm-serve: chunk rewriting and iteration stats."""

    def __init__(self, release: str, llm_args: dict, chunk_ids: str | None = None) -> None:
        self.release = release
        self.fresh_chunk_ids = chunk_ids_of(release, chunk_ids) == "fresh-per-chunk"
        self.iter_stats = bool(llm_args.get("enable_iter_perf_stats"))
        self.prometheus = bool(llm_args.get("return_perf_metrics"))
        self._stats: list[dict] = []
        self._iter = 0
        self._last = time.monotonic()
        self.active = 0

    def chunk(self, obj: dict) -> dict:
        """One streamed completions chunk as this release's postprocessor would build it."""
        usage_only = not obj.get("choices") and obj.get("usage") is not None
        if self.fresh_chunk_ids:
            obj = dict(obj, id=f"{'chatcmpl' if usage_only else 'cmpl'}-{uuid.uuid4().hex}")
            if usage_only:
                obj["object"] = "chat.completion.chunk"
        if self.iter_stats and not usage_only:
            now = time.monotonic()
            self._iter += 1
            self._stats.append({"iter": self._iter, "iterLatencyMS": round((now - self._last) * 1e3, 3),
                                "numActiveRequests": self.active, "numQueuedRequests": 0,
                                "double": "synthesised from streamed chunks, not engine iterations"})
            self._last = now
        return obj

    def drain_stats(self) -> list[dict]:
        out, self._stats = self._stats, []
        return out


def serve_app(upstream: str, quirks: ServeQuirks, transport=None):
    """The double's trtllm-serve front: the real vLLM server behind it, trtllm-serve's quirks in front."""
    import httpx
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()
    client = httpx.AsyncClient(base_url=upstream, timeout=None, transport=transport)

    @app.get("/health")
    async def health():
        try:
            r = await client.get("/health")
            return Response(status_code=r.status_code)
        except httpx.HTTPError:
            return Response(status_code=503)

    @app.get("/metrics")
    async def metrics():
        return JSONResponse(quirks.drain_stats())

    @app.get("/prometheus/metrics")
    async def prometheus():
        if not quirks.prometheus:
            return Response(status_code=404)
        r = await client.get("/metrics")
        return Response(r.text, media_type="text/plain")

    @app.get("/v1/models")
    async def models():
        r = await client.get("/v1/models")
        return JSONResponse(r.json(), status_code=r.status_code)

    async def completions(request):
        body = await request.json()
        if not body.get("stream"):
            r = await client.post("/v1/completions", json=body)
            return JSONResponse(r.json(), status_code=r.status_code)
        req = client.build_request("POST", "/v1/completions", json=body)
        r = await client.send(req, stream=True)
        if r.status_code != 200:
            data = await r.aread()
            await r.aclose()
            return Response(data, status_code=r.status_code, media_type="application/json")

        async def events():
            quirks.active += 1
            try:
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[len("data: "):]
                    if payload.strip() != "[DONE]":
                        payload = json.dumps(quirks.chunk(json.loads(payload)))
                    yield f"data: {payload}\n\n"
            finally:
                quirks.active -= 1
                await r.aclose()
        return StreamingResponse(events(), media_type="text/event-stream")

    # annotations are strings in this module (postponed evaluation): FastAPI needs the class itself
    completions.__annotations__["request"] = Request
    app.post("/v1/completions")(completions)
    return app


def serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="trtllm-serve")
    p.add_argument("model")
    p.add_argument("--tokenizer")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", default="pytorch", choices=["pytorch", "tensorrt", "trt", "_autodeploy"])
    for flag in ("--max_batch_size", "--max_num_tokens", "--max_seq_len", "--max_beam_width"):
        p.add_argument(flag, type=int)
    p.add_argument("--tp_size", "--tensor_parallel_size", dest="tp_size", type=int, default=1)
    p.add_argument("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", type=float, default=0.9)
    p.add_argument("--config", "--extra_llm_api_options", dest="config")
    p.add_argument("--log_level", default="info")
    a = p.parse_args(argv)
    release = os.environ.get("TRTLLM_DOUBLE_RELEASE", "1.2.0")
    if "--config" in argv and release_series(release) < (1, 2):
        # the --config alias of --extra_llm_api_options arrived in 1.2.0 (click: unknown option)
        sys.exit(f"Error: No such option: --config (trtllm-serve {release})")
    extra = {}
    if a.config:
        with open(a.config) as f:
            extra = yaml.safe_load(f) or {}
        bad = sorted(set(extra) - LLM_ARGS) + sorted(set(extra.get("kv_cache_config") or {}) - KV_CACHE)
        if bad:
            sys.exit(f"[double] LlmArgs: extra inputs are not permitted: {bad}")
    quirks = ServeQuirks(release, extra,
                         os.environ.get("TRTLLM_DOUBLE_CHUNK_IDS"))
    weights = os.path.join(a.model, "hf") if os.path.isdir(os.path.join(a.model, "hf")) else a.model
    kv = extra.get("kv_cache_config") or {}
    inner = a.port + 1  # vLLM listens inside the container only; the front answers on a.port
    vllm = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", weights,
            "--served-model-name", a.model, "--host", "127.0.0.1", "--port", str(inner),
            "--kv-cache-memory-bytes", os.environ.get("TRTLLM_DOUBLE_KV_BYTES", str(64 * 2**20))]
    if a.tokenizer:
        vllm += ["--tokenizer", a.tokenizer]
    for key, flag, cli in (("max_batch_size", "--max-num-seqs", a.max_batch_size),
                           ("max_seq_len", "--max-model-len", a.max_seq_len),
                           ("max_num_tokens", "--max-num-batched-tokens", a.max_num_tokens),
                           ("dtype", "--dtype", None)):
        value = extra.get(key, cli)
        if value is not None:
            vllm += [flag, str(value)]
    if "enable_block_reuse" in kv:
        vllm.append("--enable-prefix-caching" if kv["enable_block_reuse"] else "--no-enable-prefix-caching")
    vllm.append("--enforce-eager")  # always: torch.compile on a shared 2-core CPU is too slow for tests
    print(f"[double] trtllm-serve {quirks.release} (fresh chunk ids: {quirks.fresh_chunk_ids}, iteration "
          f"stats: {quirks.iter_stats}) -> " + " ".join(vllm), flush=True)
    child = subprocess.Popen(vllm)
    try:
        import uvicorn

        uvicorn.run(serve_app(f"http://127.0.0.1:{inner}", quirks), host=a.host, port=a.port, log_level="warning")
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
    return 0


def main(argv: list[str]) -> int:
    tools = {"quantize": quantize, "build": build, "hf_ptq": hf_ptq, "serve": serve}
    if not argv or argv[0] not in tools:
        sys.exit(f"usage: trtllm_double.py {{{','.join(tools)}}} ARGS...")
    return tools[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

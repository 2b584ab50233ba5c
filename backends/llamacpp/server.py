"""``llamacpp``: llama.cpp's ``llama-server`` launched here, streamed over HTTP (native ``/completion``).

Lifecycle (as ``vllm-server``, backends/vllm/server.py, both on backends/server_process.py): the binary (this machine's build from the
engine cache, or a prebuilt one) and the GGUF (converted once, cached) are resolved first; the
server binds 127.0.0.1 on a free port, runs in its own process group under the guard process that
kills the group when this process disappears (even by SIGKILL), carries the run's owner tag for the
reaper, logs to ``<results>/logs/<name>.log``, is health-polled until ready, and is torn down on
every exit path.

Server-side timing: every request's last event carries the slot's ``timings`` (prompt processing
and generation time, cached/processed prompt tokens), kept in the request's ``engine_metrics`` and
summarised per level (``server_prefill_ms``, ``server_decode_ms``: exact means over the level's
requests); ``/metrics`` (``llamacpp:*`` counters and gauges) is scraped around each level like any
Prometheus server. llama.cpp does not expose queue time, time to first token or end-to-end latency
per request, and has no histograms: those stay client-side.

What was loaded is read back, not assumed: the file type the server loaded (``/props``
model_ftype) and its bytes per parameter (``/v1/models`` meta), the context and slots from
``/props``, and the tensor types of the GGUF it was given, into ``describe().extra["quantization"]``
(compare/quality/verify.py checks it). At its default log level the server does not log the loaded
tensor types, the KV cache type or the resolved flash-attention choice.
"""
from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx

from adapters.llamacpp import LlamaCppPlan, llamacpp_plan
from adapters.spec import ServingSpec
from backends.http.protocol import BadEvent
from backends.http.sse import status_error
from backends.http_backends import HttpStreamBackend
from backends.llamacpp import CAPS
from backends.llamacpp.protocol import COMPLETION, unary_payload, unary_token_ids
from core.errors import BackendRequestError, FailureKind
from core.quant_report import QuantReport
from core.records import BackendDescription, Capabilities, GenerationRequest

HOST = "127.0.0.1"
# llama.cpp's file-type name (``/props`` model_ftype) -> (neutral dtype, quantization method)
FILE_TYPES = {"all F32": ("float32", None), "F16": ("float16", None), "BF16": ("bfloat16", None),
              "Q8_0": (None, "Q8_0"), "Q4_K - Medium": (None, "Q4_K_M")}


_BITS = {"float32": 32, "float16": 16, "bfloat16": 16}
_BASE_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def loaded_report(props: dict[str, Any], meta: dict[str, Any], tensor_types: dict[str, int] | None = None,
                  kv_type: str | None = None, linear_bits: float | None = None,
                  base_type: str | None = None) -> QuantReport | None:
    """What the server loaded: its file type (``/props`` model_ftype), its size per parameter
    (``/v1/models`` meta: bytes in memory / parameters), the tensor types of the GGUF it was given
    and the bits a weight of the decoder's linear layers take in it (``linear_bits``).

    ``dtype`` is the model's: the file's for an unquantized GGUF; for a quantized one the GGUF it
    was quantized from (``base_type``; its norms stay f32 and ggml computes in f32 either way), so
    ``linear_ratio`` is, as for vLLM, the linear weights' size against that dtype
    (compare/quality/verify.py checks it against the scheme's bits)."""
    ftype = props.get("model_ftype")
    if not isinstance(ftype, str) or not ftype:
        return None
    ftype = ftype.removeprefix("(guessed) ")
    dtype, method = FILE_TYPES.get(ftype, (None, ftype))
    rep: dict[str, Any] = {"method": method, "file_type": ftype, "kernels": [],
                           "source": "llama-server /props model_ftype and /v1/models size / n_params; "
                                     "the GGUF's tensor types"}
    rep["dtype"] = dtype or _BASE_DTYPE.get(base_type or "", "float32")
    size, n = meta.get("size"), meta.get("n_params")
    bits = None
    if isinstance(size, (int, float)) and isinstance(n, (int, float)) and n > 0:
        rep["weight_bytes"] = size
        rep["bits_per_weight"] = bits = round(size * 8 / n, 3)
    if linear_bits is not None:
        rep["linear_bits_per_weight"] = round(linear_bits, 3)
    measured = linear_bits if linear_bits is not None else bits  # (the whole file when the layers are not known)
    if measured is not None:
        rep["linear_ratio"] = round(measured / _BITS[rep["dtype"]], 4)
    if tensor_types:
        rep["tensor_types"] = tensor_types
    if kv_type:
        rep["kv_cache_dtype"] = kv_type  # as configured (--cache-type-k); the server does not report it
    return QuantReport(**rep)  # (only the keys set here: run.json keeps the same object)


def gguf_tensor_types(path: Path) -> tuple[dict[str, int], float | None]:
    """(tensor types counted in a GGUF's header, bits a weight of the decoder layers' 2-D weights
    take: blk.N.*.weight, norms excluded) -- gguf-py of the pinned source."""
    import sys

    from backends.llamacpp.build import converter_dir

    gguf_py = str(converter_dir() / "gguf-py")
    if gguf_py not in sys.path:
        sys.path.append(gguf_py)
    from gguf import GGUFReader  # type: ignore[import-not-found]

    counts: dict[str, int] = {}
    nbytes = nelem = 0
    for t in GGUFReader(str(path)).tensors:
        counts[t.tensor_type.name.lower()] = counts.get(t.tensor_type.name.lower(), 0) + 1
        shape = [int(x) for x in t.shape if int(x) > 1]
        if t.name.startswith("blk.") and t.name.endswith(".weight") and len(shape) == 2:
            nbytes += int(t.n_bytes)
            nelem += int(t.n_elements)
    return counts, (nbytes * 8 / nelem if nelem else None)


def level_timings(per_request: list[dict[str, float]]) -> dict[str, Any]:
    """Exact means over a level's requests of the server's own per-request timings."""
    out: dict[str, Any] = {}
    for key, field in (("server_prefill_ms", "prefill_s"), ("server_decode_ms", "decode_s")):
        vals = [m[field] * 1e3 for m in per_request if field in m]
        if vals:
            out[key] = {"count": len(vals), "mean": statistics.fmean(vals), "max": max(vals),
                        "source": "per-request timings of llama-server's stream (not a histogram)"}
    cached = sum(m.get("prompt_cached_tokens", 0.0) for m in per_request)
    processed = sum(m.get("prompt_processed_tokens", 0.0) for m in per_request)
    if per_request:
        out["prompt_cache"] = {"cached_tokens": cached, "processed_tokens": processed,
                               "hit_rate": cached / (cached + processed) if cached + processed else None}
    return out


class LlamaCppBackend(HttpStreamBackend):
    framework = "llamacpp"

    def __init__(self, spec: ServingSpec, name: str = "llamacpp", native: LlamaCppPlan | None = None,
                 **kw: Any) -> None:
        from backends.models.probe import probe

        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = native or llamacpp_plan(spec, probe(spec.model))
        super().__init__(spec, name, protocol=COMPLETION, model=spec.model, metrics="prometheus", **kw)
        self.results_dir: Path | None = None
        self._server: Any = None
        self._argv: list[str] = []
        self._health_s: float | None = None
        self._origin: dict[str, Any] = {}
        self._props: dict[str, Any] = {}
        self._model_meta: dict[str, Any] = {}
        self._tensor_types: dict[str, int] = {}
        self._linear_bits: float | None = None
        self._level: list[dict[str, float]] = []

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    def attach_results_dir(self, path: Path) -> None:
        self.results_dir = Path(path)

    def _prepare(self, stop: threading.Event) -> tuple[Path, Path]:
        """(server binary, GGUF): resolved (built / converted when missing) off the event loop; a
        build or conversion under way ends when ``stop`` is set."""
        from backends.llamacpp.build import quantize_binary, server_binary
        from backends.llamacpp.gguf import MODEL_FILE, prepare_gguf

        server, origin = server_binary(self.plan.server_bin, cuda=self.plan.device == "cuda", stop=stop)
        self._origin = {"server_bin": str(server), "server_from": origin}
        if self.plan.gguf:
            self._origin["gguf"] = {"path": self.plan.gguf, "from": "native llamacpp.gguf (served as is)"}
            return server, Path(self.plan.gguf)
        quant = quantize_binary(server) if self.plan.gguf_type not in ("f32", "f16", "bf16") else None
        entry, hit = prepare_gguf(self.spec.model, self.plan.gguf_type, quant, base_type=self.plan.base_type or "f32",
                                  stop=stop)
        self._tensor_types, self._linear_bits = gguf_tensor_types(entry.path / MODEL_FILE)
        self._origin["gguf"] = {"path": str(entry.path / MODEL_FILE), "cache_key": entry.key, "cache_hit": hit,
                                "type": self.plan.gguf_type,
                                "declared_pre_tokenizer": entry.meta.get("declared_pre_tokenizer")}
        return server, entry.path / MODEL_FILE

    async def _start_server(self) -> None:
        from backends.server_process import START_TIMEOUT_S, ServerProcess, free_port

        loop = asyncio.get_running_loop()
        stop = threading.Event()
        prep = loop.run_in_executor(None, self._prepare, stop)
        try:
            server, gguf = await asyncio.shield(prep)
        except asyncio.CancelledError:
            # the run is stopping (a signal to this process only, which the converter or the
            # build does not get): end that step now, and let its temp dir go, before exiting;
            # else the stop would wait for a conversion or build of many minutes, then publish it
            stop.set()
            await asyncio.wait([prep], timeout=60)
            if prep.done() and not prep.cancelled():
                prep.exception()  # (BuildStopped, or what the step had already failed with: the stop wins)
            raise
        port = free_port()
        self._argv = [str(server), "--model", str(gguf), "--host", HOST, "--port", str(port), *self.plan.argv()]
        safe = self.name.replace("/", "_").replace(":", "_").replace("@", "_")
        log_dir = self.results_dir or Path(tempfile.mkdtemp(prefix="llm-compare-server-"))
        self._server = ServerProcess(self._argv, log_dir / f"{safe}.log", env=dict(self.plan.env))
        self._server.start()
        self.base_url = f"http://{HOST}:{port}"
        self._health_s = await self._server.wait_healthy(self.base_url + "/health", START_TIMEOUT_S)

    async def _stop_server(self) -> None:
        if self._server is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._server.stop)

    async def _probe(self) -> None:
        assert self._client is not None
        try:
            r = await self._client.get("/props", timeout=10.0)
            props = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):  # identity only; /health already answered
            props = {}
        self._props = props if isinstance(props, dict) else {}
        try:
            r = await self._client.get("/v1/models", timeout=10.0)
            data = (r.json().get("data") or [{}]) if r.status_code == 200 else [{}]
            self._model_meta = (data[0] or {}).get("meta") or {}
        except (httpx.HTTPError, ValueError, AttributeError, IndexError, TypeError):  # reported as absent
            self._model_meta = {}
        self._version = str(self._props.get("build_info") or "unknown")
        self._info = {k: v for k, v in self._props.items() if isinstance(v, (str, int, float, bool))
                      and k not in ("chat_template",)}

    # A quality probe needs every generated id, and the stream leaves out each token whose text ends
    # inside a UTF-8 character (its id is unknown, -1, there): a byte-level vocabulary samples such
    # tokens often. So probes are one non-streamed /completion each, whose answer lists them all.
    unary_quality_probes = True

    async def generate_once(self, req: GenerationRequest) -> dict[str, Any]:
        """One quality probe, not streamed (no timing is taken from it): every sampled token id."""
        if self._client is None:
            raise BackendRequestError(FailureKind.CONNECT, f"{self.name} is not started")
        r = await self._client.post(COMPLETION.path, json=unary_payload(self._adapt(req), self.model or ""),
                                    timeout=httpx.Timeout(10.0, read=None))
        if r.status_code != 200:
            raise status_error(r.status_code, r.content)  # (the streamed path's words for the same answer)
        try:
            ids = unary_token_ids(r.json())
        except (ValueError, BadEvent) as e:
            raise BackendRequestError(FailureKind.PROTOCOL, f"{self.name} /completion: {e}") from None
        return {"token_ids": list(ids), "logprobs": [None] * len(ids), "top": []}

    # streams go through HttpStreamBackend.stream with COMPLETION's per-stream parser; its timings
    # (the parser's engine_metrics) are each request's and, summed here, the level's
    def stream_metrics(self, metrics: dict[str, float]) -> None:
        self._level.append(metrics)

    async def on_level_start(self, label: str) -> None:
        self._level = []
        await super().on_level_start(label)

    async def on_level_end(self, label: str) -> dict[str, Any]:
        out = await super().on_level_end(label)
        out.update(level_timings(self._level))
        self._level = []
        return out

    def describe(self) -> BackendDescription:
        dgs = self._props.get("default_generation_settings") or {}
        resolved = {"n_ctx": dgs.get("n_ctx") if isinstance(dgs, dict) else None,
                    "total_slots": self._props.get("total_slots"), "model_ftype": self._props.get("model_ftype"),
                    "build_info": self._props.get("build_info"), "model_meta": self._model_meta}
        quant = loaded_report(self._props, self._model_meta, self._tensor_types, self.plan.flags.get("--cache-type-k"),
                              self._linear_bits, self.plan.base_type)
        return BackendDescription(
            name=self.name, framework=self.framework, version=self._version,
            native_config={**self.plan.as_dict(), "server_argv": self._argv[1:], "resolved": resolved,
                           "protocol": "llama.cpp native /completion (stream, return_tokens)",
                           "base_url": self.base_url},
            extra={**self._origin, "server_log": str(self._server.log_path) if self._server else None,
                   "health_after_s": self._health_s, "quantization": quant.as_json() if quant is not None else None,
                   "event_clock": self._transport.clock() if self._transport is not None else None})

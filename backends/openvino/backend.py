"""OpenVINO GenAI: ``ContinuousBatchingPipeline`` in an engine process of its own, on CPU.

A second, independent serving engine (paged KV cache, continuous batching, prefix caching, chunked
prefill as "dynamic split-fuse", its own tokenizer conversion and NNCF weight compression). The
checkpoint is exported to OpenVINO IR once (backends/openvino/export.py, cached). The
pipeline runs in backends/openvino/engine.py's process (its ``step()`` holds the GIL, so stepping it
in this process would stall the measuring event loop); that process stamps every token with
``perf_counter_ns()`` when ``step()`` hands it over (the engine-side stamp) and the stream stamps
it again when it takes it (the delivery stamp, as for every backend). The engine process dies with
ours; when it dies first, every request in it fails as ``engine_dead`` and so do later ones.
"""
from __future__ import annotations

from typing import Any

from adapters.openvino import OpenVINOPlan, openvino_plan
from adapters.spec import ServingSpec
from backends.engine_process import EngineProcessBackend
from backends.openvino import CAPS
from core.lazy import require
from core.records import BackendDescription, Capabilities, GenerationRequest
from core.engine_guard import check_start
from core.quant_report import QuantReport



class OpenVINOBackend(EngineProcessBackend):
    name = "openvino"
    engine_module = "backends.openvino.engine"
    engine_label = "the OpenVINO engine"

    def __init__(self, spec: ServingSpec, name: str = "openvino", native: OpenVINOPlan | None = None) -> None:
        from backends.models.probe import probe

        super().__init__(spec, name)
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = native or openvino_plan(spec, probe(spec.model))
        self._export: dict[str, Any] = {}

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "OpenVINOBackend":
        import asyncio

        from backends.openvino.export import MODEL_XML, export_model, weight_types

        require("openvino_genai", "openvino")
        check_start("the OpenVINO GenAI engine")
        loop = asyncio.get_running_loop()
        entry, hit = await loop.run_in_executor(None, export_model, self.spec.model, dict(self.plan.export))
        ir = entry.path / "model"
        types = await loop.run_in_executor(None, weight_types, ir / MODEL_XML)
        self._export = {"cache_key": entry.key, "cache_hit": hit, "exporter": entry.meta.get("exporter"),
                        "argv": entry.meta.get("argv"), "weight_types": types,
                        "loaded_compression": _compression(types)}
        scheduler = dict(self.plan.scheduler)
        if "cache_size" not in scheduler and "num_kv_blocks" not in scheduler:
            scheduler["cache_size"] = 1  # GiB; the engine's default (0) sizes the cache from free memory
        await self._start({"model": str(ir), "scheduler": scheduler, "device": self.plan.device,
                           "properties": dict(self.plan.properties), "max_model_len": self.plan.max_model_len,
                           "verify": self.plan.verify}, env={"OPENVINO_TELEMETRY_OPT_OUT": "1"})
        compiled = self._info.get("compiled_linear_precisions")
        self._export["compiled_linear_precisions"] = compiled
        if compiled is not None:  # what the plugin compiled, not what the IR or the request says
            self._export["loaded_compression"] = _compression(compiled)
        return self

    def _params(self, req: GenerationRequest) -> dict[str, Any]:
        p: dict[str, Any] = {"max_new_tokens": req.max_tokens, "ignore_eos": req.ignore_eos,
                             "rng_seed": req.seed if req.seed is not None else self.plan.seed}
        if req.temperature > 0:
            p.update(do_sample=True, temperature=req.temperature, top_p=req.top_p)
        return p

    def describe(self) -> BackendDescription:
        return BackendDescription(
            name=self.name, framework="openvino-genai", version=self._info.get("version", "unknown"),
            native_config={**self.plan.as_dict(), "resolved": {**self._info.get("scheduler", {}), **self._stats}},
            extra={"engine_pid": self._info.get("pid"), "openvino": self._info.get("openvino"),
                   "export": self._export, "quantization": QuantReport(
                       method=self._export.get("loaded_compression"), requested=self.spec.quantization,
                       inference_precision=self.plan.properties.get("INFERENCE_PRECISION_HINT")).as_json()})


def _compression(types: dict[str, int]) -> str | None:
    """int4 / int8 when weights are compressed that way, else None (unquantized). ``types``: element
    types counted, of the IR's weight matrices or of the compiled linear layers (NNCF keeps a layer
    or two, e.g. the output projection, at 8 bits in an int4 model)."""
    int4, int8 = types.get("u4", 0) + types.get("i4", 0), types.get("u8", 0) + types.get("i8", 0)
    if int4 and int4 >= int8:
        return "int4"
    return "int8" if int8 else None


def plan(spec: ServingSpec, native: OpenVINOPlan, target: None = None) -> dict[str, Any]:
    """`compare plan`: the pipeline's native configuration (nothing is exported)."""
    return {"engine": "openvino_genai.ContinuousBatchingPipeline", **native.as_dict()}


def check() -> tuple[bool, str]:
    from backends.openvino.export import exporter_path

    cli = exporter_path()
    if not cli.is_file():
        return False, f"exporter missing ({cli}): bash scripts/setup.d/45-openvino.sh"
    return True, "ready"

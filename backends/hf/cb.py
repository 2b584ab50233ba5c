"""transformers' continuous batching (``ContinuousBatchingManager``) in an engine process of its own.

A third real scheduler next to vLLM and OpenVINO GenAI, from the same library as the ``hf``
quality reference: a paged KV cache, a FIFO scheduler that batches prefill and decode of several
requests per forward pass, prompts split at ``max_batch_tokens``, prefix block sharing. The manager
runs in backends/hf/cb_engine.py's process (its generation thread would otherwise compete with the
measuring event loop for the GIL); that process forwards the manager's per-token stamps (the
engine-side stamp) and the stream stamps each token again when it takes it (the delivery stamp, as
for every backend). The engine process dies with ours; when it dies first, every request in it
fails as ``engine_dead`` and so do later ones.
"""
from __future__ import annotations

from typing import Any

from adapters.hf_cb import HFCBPlan, hf_cb_plan
from adapters.spec import ServingSpec
from backends.engine_process import EngineProcessBackend
from backends.hf import CB_CAPS as CAPS
from core.lazy import importable, require
from core.quant_report import QuantReport
from core.records import BackendDescription, Capabilities, GenerationRequest



class HFCBBackend(EngineProcessBackend):
    name = "hf-cb"
    engine_module = "backends.hf.cb_engine"
    engine_label = "the transformers engine"
    stop_timeout_s = 40.0  # the manager's hard stop waits up to 30 s for its generation thread

    def __init__(self, spec: ServingSpec, name: str = "hf-cb", native: HFCBPlan | None = None) -> None:
        from backends.models.probe import probe

        super().__init__(spec, name)
        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.plan = native or hf_cb_plan(spec, probe(spec.model))

    @property
    def capabilities(self) -> Capabilities:
        return CAPS

    async def __aenter__(self) -> "HFCBBackend":
        for module in ("transformers", "torch"):  # the engine process imports them, this one need not
            if not importable(module):
                require(module, "hf")
        await self._start(self.plan.as_dict() | {
            "dtype": self.plan.dtype, "attn_implementation": self.plan.attn_implementation,
            "cb_config": dict(self.plan.cb_config), "load_kwargs": dict(self.plan.load_kwargs)})
        return self

    def _params(self, req: GenerationRequest) -> dict[str, Any]:
        return {"max_new_tokens": req.max_tokens, "ignore_eos": req.ignore_eos, "temperature": req.temperature}

    def describe(self) -> BackendDescription:
        return BackendDescription(
            name=self.name, framework="transformers-cb", version=self._info.get("version", "unknown"),
            native_config={**self.plan.as_dict(), "resolved": self._info.get("resolved", {})},
            extra={"engine_pid": self._info.get("pid"), "torch": self._info.get("torch"),
                   "engine": "transformers ContinuousBatchingManager",
                   **({"quantization": QuantReport.model_validate(self._info["quantization"]).as_json()}
                      if self._info.get("quantization") else {}),
                   **({"version_notes": self._info["notes"]} if self._info.get("notes") else {})})


def plan(spec: ServingSpec, native: HFCBPlan, target: None = None) -> dict[str, Any]:
    """`compare plan`: the manager's native configuration (nothing is loaded)."""
    return {"engine": "transformers ContinuousBatchingManager (init_continuous_batching)", **native.as_dict()}

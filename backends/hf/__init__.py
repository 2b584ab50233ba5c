"""transformers: the reference (reference.py: model.generate, one request at a time, the float32
quality reference) and continuous batching (cb.py, its manager in cb_engine.py's process);
adapters/hf.py and adapters/hf_cb.py are the pure plans."""
from __future__ import annotations

from backends.registry import BackendEntry, register
from core.records import Capabilities

CAPS = Capabilities(
    forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=False,
    notes=("reference implementation: one request at a time, no paged KV cache",),
)
CB_CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
                       notes=("greedy decoding only: transformers' continuous batching sets sampling for the whole "
                              "engine, so a request with temperature > 0 fails as a validation error",))

register(BackendEntry(
    name="hf", summary="transformers reference (model.generate, one request at a time); quality reference",
    factory="backends.hf.reference:HFBackend", plan="backends.hf.reference:plan", resolve="backends.hf.reference:resolve",
    requires=("transformers", "torch"), extra="pip install 'llm-compare[hf]'",
    capabilities=CAPS, roles=("reference",), default_rank=3, heldout="backends.hf.heldout:HELDOUT",
    native_keys="backends.hf.native:checked_keys",
))
register(BackendEntry(
    name="hf-cb", summary="transformers continuous batching (ContinuousBatchingManager in its own engine process)",
    factory="backends.hf.cb:HFCBBackend", plan="backends.hf.cb:plan", resolve="adapters.hf_cb:hf_cb_plan",
    requires=("transformers", "torch"), extra="pip install 'llm-compare[hf]'", capabilities=CB_CAPS,
))

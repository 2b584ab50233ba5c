"""The launcher flags `compare tune` searches for TGI and the rules TGI 3.3 enforces at start.

No --max-batch-total-tokens: TGI 3.3 ignores it for flash-attention models and sizes the KV cache
from --cuda-memory-fraction (adapters/facts/tgi-v3.3.7.json, behaviour.kv_budget), so that fraction
is the KV knob here (GPU only)."""
from __future__ import annotations

from adapters.spec import ServingSpec
from adapters.tuning import Config, Knob, Space


def _rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    pre = cfg.get("max-batch-prefill-tokens")
    # backends/v3/src/main.rs: the prefill budget must hold max-input-tokens (max_model_len - 1)
    # only when the backend cannot chunk prefills; with chunking (TGI's default) smaller is valid
    if spec.chunked_prefill is False and spec.max_model_len and pre is not None and pre < spec.max_model_len - 1:
        return (f"max-batch-prefill-tokens={pre} < max-input-tokens={spec.max_model_len - 1} "
                "(TGI requires >= without prefill chunking)")
    return None


SPACE = Space("tgi", (
    Knob("max-batch-prefill-tokens", (2048, 4096, 8192), int, native="--max-batch-prefill-tokens"),
    Knob("cuda-memory-fraction", (0.8, 0.95), float, native="--cuda-memory-fraction", gpu_only=True,
         help="TGI's KV cache gets the free memory x this x 0.90"),
    Knob("max-waiting-tokens", (5, 20, 50), int, native="--max-waiting-tokens"),
    Knob("waiting-served-ratio", (0.3, 1.2), float, native="--waiting-served-ratio"),
), _rules)

"""The launcher flags `compare tune` searches for TGI and the rules its launcher enforces."""
from __future__ import annotations

from adapters.spec import ServingSpec
from adapters.tuning import Config, Knob, Space


def _rules(cfg: Config, spec: ServingSpec, gpu: bool) -> str | None:
    # text-generation-launcher: the prefill budget must fit in the total batch budget
    pre, tot = cfg.get("max-batch-prefill-tokens"), cfg.get("max-batch-total-tokens")
    if pre is not None and tot is not None and pre > tot:
        return f"max-batch-prefill-tokens={pre} > max-batch-total-tokens={tot} (TGI requires <=)"
    if spec.max_model_len and pre is not None and pre < spec.max_model_len:
        # the launcher refuses a prefill budget smaller than max-input-tokens (max_model_len - 1)
        return f"max-batch-prefill-tokens={pre} < max_model_len={spec.max_model_len} (TGI requires >= max-input-tokens)"
    return None


SPACE = Space("tgi", (
    Knob("max-batch-prefill-tokens", (2048, 4096, 8192), int, native="--max-batch-prefill-tokens"),
    Knob("max-batch-total-tokens", (16384, 65536), int, native="--max-batch-total-tokens"),
    Knob("max-waiting-tokens", (5, 20, 50), int, native="--max-waiting-tokens"),
    Knob("waiting-served-ratio", (0.3, 1.2), float, native="--waiting-served-ratio"),
), _rules)

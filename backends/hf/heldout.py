"""The reference's held-out rows: transformers, float32, the unquantized checkpoint, one forward
pass per window (full distributions)."""
from __future__ import annotations

from typing import Any, Callable

from adapters.spec import ServingSpec
from backends.heldout import HeldOut, Row, row_from_logits


def score(spec: ServingSpec, windows: list[list[int]], top_k: int = 5,
          log: Callable[[str], None] | None = None) -> tuple[list[Row], dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(spec.model, dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for w in windows:
            logits = m(input_ids=torch.tensor([w], dtype=torch.long)).logits[0]
            rows.append(row_from_logits(logits.numpy(), w, keep_full=True))
    return rows, {"reference": True}


HELDOUT = HeldOut(score=score, label="transformers")

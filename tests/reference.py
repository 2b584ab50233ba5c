"""What engine tests compare against: transformers' own greedy tokens (fp32), and a backend's
whole stream collected."""
from __future__ import annotations

from typing import Any


def reference_greedy(model_dir: Any, prompts: list, n: int) -> list[list[int]]:
    """``n`` greedy tokens per prompt from transformers' generate() in float32."""
    import torch
    import transformers

    m = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    out = []
    for p in prompts:
        ids = m.generate(torch.tensor([p]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        out.append(ids[0, len(p):].tolist())
    return out


async def collect(backend: Any, req: Any) -> list:
    return [item async for item in backend.stream(req)]

"""vLLM's held-out rows: the serving engine itself (inproc.py starts it, so what is loaded is
verified the usual way) asked for ``prompt_logprobs=k``: the top-k and the true token's log-prob at
every prompt position, from the same forward pass that serves requests."""
from __future__ import annotations

from typing import Any, Callable

from adapters.spec import ServingSpec
from backends.heldout import HeldOut, Row


async def score(spec: ServingSpec, windows: list[list[int]], top_k: int = 5,
                log: Callable[[str], None] | None = None) -> tuple[list[Row], dict[str, Any]]:
    """(rows, the backend's description) from vLLM's prompt logprobs."""
    from vllm import SamplingParams

    from backends.vllm.inproc import VllmBackend

    rows: list[Row] = []
    async with VllmBackend(spec, name="vllm") as b:
        # the running engine (AsyncLLM): prompt logprobs are not part of the streaming interface
        engine = b._engine
        sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=top_k, detokenize=False)
        for i, w in enumerate(windows):
            final = None
            async for out in engine.generate({"prompt_token_ids": list(w)}, sp, request_id=f"heldout-{i}"):
                final = out
            plp = final.prompt_logprobs if final is not None else None
            if not plp or len(plp) != len(w):
                raise RuntimeError(f"vLLM returned {len(plp or [])} prompt logprobs for {len(w)} tokens")
            lp, am, top = [], [], []
            for pos in range(1, len(w)):
                d = plp[pos]
                lp.append(float(d[w[pos]].logprob))
                am.append(next(t for t, v in d.items() if v.rank == 1))
                top.append({t: float(v.logprob) for t, v in d.items() if v.rank is not None and v.rank <= top_k})
            rows.append({"lp": lp, "argmax": am, "top": top, "full": None})
        desc = b.describe().as_dict()
        engine = None  # the backend stops the engine; hold no reference past that
    return rows, desc


# vLLM's quantized kernels take bfloat16 / float16 activations only (on CPU too): its rows compute
# in bfloat16 unless the scheme sets a dtype (a `bf16` row shows what bfloat16 alone costs)
HELDOUT = HeldOut(score=score, schemes="fp32,bf16,w8a8-int8,w4a16", rank=1, dtype="bfloat16", checkpoints=True,
                  describes=True)

"""Held-out text scored by each engine's own numerics, teacher-forced: per position, the log-prob
of the true next token and the engine's argmax (and what it exposes of the distribution).

* reference: transformers, float32, the unquantized checkpoint (full distributions);
* vLLM: the serving engine itself (backends/vllm/inproc.py starts it, so what is loaded is
  verified the usual way) asked for ``prompt_logprobs=k``: the top-k and the true token's
  log-prob at every prompt position, from the same forward pass that serves requests;
* OpenVINO: the IR that the openvino backend serves (the same export options, from the same
  cache) compiled by OpenVINO's runtime with the plan's precision properties; one forward pass of
  the stateful model over a window gives every position's logits (full distributions). The GenAI
  pipeline runs the same IR and precision with paged-attention kernels; its free-running greedy
  output is compared by ``compare run``'s quality step (parity.py), which needs no logprobs.

Rows are aggregated against the reference by ``parity.heldout_parity``.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from adapters.spec import ServingSpec

Row = dict[str, Any]  # {"lp": [..], "argmax": [..], "top": [{id: lp}] | None, "full": ndarray | None}


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _row_from_logits(logits: Any, window: list[int], keep_full: bool) -> Row:
    """Row of a window from its [L, V] logits (position i predicts token i + 1)."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)[: len(window) - 1]
    logp = x - x.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    nxt = np.asarray(window[1:])
    return {"lp": logp[np.arange(len(nxt)), nxt].tolist(), "argmax": logp.argmax(axis=1).tolist(),
            "top": None, "full": logp.astype(np.float32) if keep_full else None}


def score_reference(model: str, windows: list[list[int]]) -> list[Row]:
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for w in windows:
            logits = m(input_ids=torch.tensor([w], dtype=torch.long)).logits[0]
            rows.append(_row_from_logits(logits.numpy(), w, keep_full=True))
    return rows


async def score_vllm(spec: ServingSpec, windows: list[list[int]], top_k: int = 5) -> tuple[list[Row], dict[str, Any]]:
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


def score_openvino(spec: ServingSpec, windows: list[list[int]],
                   log: Callable[[str], None] = _log) -> tuple[list[Row], dict[str, Any]]:
    """(rows, what ran: export options, weight element types, compile properties)."""
    import numpy as np
    import openvino as ov

    from adapters.openvino import openvino_plan
    from backends.openvino.export import MODEL_XML, export_model, weight_types
    from backends.models.probe import probe

    plan = openvino_plan(spec, probe(spec.model))
    entry, hit = export_model(spec.model, dict(plan.export), log=log)
    xml = entry.path / "model" / MODEL_XML
    compiled = ov.Core().compile_model(str(xml), plan.device, dict(plan.properties))
    names = {n for p in compiled.inputs for n in p.get_names()}
    req = compiled.create_infer_request()
    rows = []
    for w in windows:
        req.reset_state()  # stateful IR: the KV cache lives in the request; each window starts empty
        ids = np.asarray([w], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "position_ids": np.arange(len(w), dtype=np.int64)[None], "beam_idx": np.zeros(1, dtype=np.int32)}
        res = req.infer({k: v for k, v in feed.items() if k in names})
        logits = res[compiled.output("logits")][0]
        if logits.shape[0] != len(w):
            raise RuntimeError(f"the IR returned logits for {logits.shape[0]} of {len(w)} positions")
        rows.append(_row_from_logits(logits, w, keep_full=True))
    return rows, {"export": dict(plan.export), "properties": dict(plan.properties), "ir_cache_hit": hit,
                  "weight_types": weight_types(xml), "openvino": ov.get_version()}

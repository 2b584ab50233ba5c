"""OpenVINO's held-out rows: the IR that the openvino backend serves (the same export options,
from the same cache) compiled by OpenVINO's runtime with the plan's precision properties; one
forward pass of the stateful model over a window gives every position's logits (full
distributions). The GenAI pipeline runs the same IR and precision with paged-attention kernels;
its free-running greedy output is compared by ``compare run``'s quality step
(compare/quality/parity.py), which needs no logprobs."""
from __future__ import annotations

import sys
from typing import Any, Callable

from adapters.spec import ServingSpec
from backends.heldout import HeldOut, Row, row_from_logits


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def score(spec: ServingSpec, windows: list[list[int]], top_k: int = 5,
          log: Callable[[str], None] | None = None) -> tuple[list[Row], dict[str, Any]]:
    """(rows, what ran: export options, weight element types, compile properties)."""
    import numpy as np
    import openvino as ov

    from adapters.openvino import openvino_plan
    from backends.models.probe import probe
    from backends.openvino.export import MODEL_XML, export_model, weight_types

    plan = openvino_plan(spec, probe(spec.model))
    entry, hit = export_model(spec.model, dict(plan.export), log=log or _log)
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
        rows.append(row_from_logits(logits, w, keep_full=True))
    return rows, {"export": dict(plan.export), "properties": dict(plan.properties), "ir_cache_hit": hit,
                  "weight_types": weight_types(xml), "openvino": ov.get_version()}


HELDOUT = HeldOut(score=score, schemes="fp32,w8a16-int8,w4a16", rank=2)

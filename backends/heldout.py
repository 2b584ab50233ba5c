"""Held-out text scored by an engine's own numerics, teacher-forced: per position, the log-prob of
the true next token and the engine's argmax (and what it exposes of the distribution).

An engine that can do this declares a :class:`HeldOut` (its package's ``heldout.py``, named by the
registry entry's ``heldout`` hook); ``compare quant quality`` scores every such engine's schemes on
the same windows and compares each with the entry that plays the "reference" role
(compare/quality/parity.py ``heldout_parity``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

Row = dict[str, Any]  # {"lp": [..], "argmax": [..], "top": [{id: lp}] | None, "full": ndarray | None}
# (spec, windows, top_k, log) -> (rows, what was loaded: the backend's description when
# ``describes`` is set, else the engine's own account of what ran), or a coroutine of that (run
# under the tool's signal policy)
Score = Callable[..., "tuple[list[Row], dict[str, Any]]"]


@dataclass(frozen=True)
class HeldOut:
    score: Score
    schemes: str = ""  # the schemes scored by default, comma-separated ('' for the reference)
    rank: int = 0  # row (and option) order in `compare quant quality`, after the reference
    dtype: str = "float32"  # the compute dtype of a scheme that sets none
    checkpoints: bool = False  # weight-quantized schemes load a checkpoint made by `compare quantize`
    describes: bool = False  # score returns the backend's description, verified like a run's
    label: str = ""  # the engine column's text; default: the entry's name


def row_from_logits(logits: Any, window: list[int], keep_full: bool) -> Row:
    """Row of a window from its [L, V] logits (position i predicts token i + 1)."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)[: len(window) - 1]
    logp = x - x.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    nxt = np.asarray(window[1:])
    return {"lp": logp[np.arange(len(nxt)), nxt].tolist(), "argmax": logp.argmax(axis=1).tolist(),
            "top": None, "full": logp.astype(np.float32) if keep_full else None}

"""A backend's quality entry in run.json (``backends[NAME].quality``): parity of its greedy output
with the float32 reference (compare/quality/parity.py computes the numbers, deferred.py scores them
once every engine has stopped), or why it was not measured.

Closed: every key any writer has produced is declared. Results written before the reference was
scored after the engines stopped have a reference without ``device``/``placement``/``when``.
"""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

from core.results.base import Closed as _Closed


class QualityReference(_Closed):
    """The model the backend was compared with, and where it ran."""

    model: str
    framework: str  # "transformers"
    dtype: str  # "float32"
    # absent in results written while the reference ran beside the engine
    device: str | None = None  # cuda | cpu
    placement: str | None = None  # why there: its size vs free GPU memory / RAM
    when: str | None = None


class PromptParity(_Closed):
    tokens: int
    first_divergence: int | None  # first position whose token is not the reference's argmax; None: none
    agreement: float


class Discordant(_Closed):
    only_reference_correct: int
    only_candidate_correct: int


class AccuracyResult(_Closed):
    """Exact-match accuracy on a user task, paired with the reference's own answers."""

    n: int
    accuracy: float | None
    reference_accuracy: float | None
    difference: float | None
    discordant: Discordant
    mcnemar_p: float
    test: str


class Parity(_Closed):
    """Agreement and divergence of a backend's greedy output with the reference (parity.parity):
    the logprob figures only where the backend streams logprobs, the reference's judgement of the
    output where it scored one."""

    prompts: int | None = None
    tokens: int | None = None
    token_agreement: float | None = None
    exact_sequence_match: float | None = None
    mean_first_divergence: float | None = None
    per_prompt: list[PromptParity] = Field(default_factory=list)
    mean_logprob_diff: float | None = None
    mean_abs_logprob_diff: float | None = None
    kl_topk: float | None = None
    reference_perplexity_of_output: float | None = None
    mean_reference_regret: float | None = None


class _Head(_Closed):
    # pending: probes answered, the reference scores them once every engine has stopped
    status: Literal["measured", "pending", "skipped", "refused", "failed"]
    reason: str | None = None  # why not measured (every status but "measured")
    reference: QualityReference | None = None
    greedy: bool | None = None
    top_k: int | None = None  # logprobs per position the backend streamed; None: none


# counts and settings, not quality: left out of the figures the verdict compares
_BOOKKEEPING = ("prompts", "tokens", "top_k")


class Quality(Parity, _Head):  # fields in _Head's order, then Parity's, then accuracy: as written
    accuracy: AccuracyResult | None = None

    @classmethod
    def measured(cls, reference: QualityReference, top_k: int | None, parity: Parity,
                 accuracy: AccuracyResult | None = None) -> Quality:
        fields: dict[str, Any] = {k: getattr(parity, k) for k in parity.model_fields_set}
        if accuracy is not None:
            fields["accuracy"] = accuracy
        return cls(status="measured", reference=reference, greedy=True, top_k=top_k, **fields)

    def figures(self) -> dict[str, float]:
        """Every finite number of the entry by dotted name ("kl_topk", "accuracy.mcnemar_p"), in
        field order; counts, settings and per-prompt rows left out."""
        out: dict[str, float] = {}

        def walk(m: BaseModel, prefix: str) -> None:
            for k in type(m).model_fields:
                if k not in m.model_fields_set or (not prefix and k in _BOOKKEEPING):
                    continue
                v = getattr(m, k)
                if isinstance(v, BaseModel):
                    walk(v, f"{prefix}{k}.")
                elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    out[f"{prefix}{k}"] = float(v)

        walk(self, "")
        return out

"""What a backend says about itself: its capabilities and what actually ran (its description).
One type each, for the backend that makes them and for run.json that stores them (a backend
section's ``capabilities`` and ``describe``: core/results/models.py)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Capabilities(BaseModel):
    # closed and frozen, as every run.json section (core/results/base.py; not imported here:
    # core.records, which core.results reads, imports this module)
    model_config = ConfigDict(frozen=True, extra="forbid")

    # (defaults: what a run.json written before a capability was recorded is read as)
    forced_output_length: bool = True  # honours ignore_eos + max_tokens exactly
    token_id_prompts: bool = False  # accepts prompts as token ids (no re-tokenisation)
    logprobs: bool = False
    continuous_batching: bool = False  # serves several requests at once
    server_metrics: bool = False  # exposes Prometheus/JSON metrics we scrape
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class BackendDescription(BaseModel):
    """What actually ran: stored in run.json next to the numbers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # our backend name, e.g. "vllm"
    framework: str  # e.g. "vllm", "transformers", "text-generation-inference"
    version: str
    # the resolved configuration the engine was started with (engine-specific, open)
    native_config: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)  # e.g. loaded quantization, kernel, /info, clocks

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

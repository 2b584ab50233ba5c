"""What an engine says it loaded: a backend's quantization report (``describe().extra
["quantization"]``), built by the backends (llama.cpp from ``/props``, ``/v1/models`` and the GGUF's
header; vLLM from its worker; TGI and TensorRT-LLM from their launch flags and configs) and read by
the verification of loaded against requested quantization (compare/quality/verify.py and its
callers). run.json keeps it as the JSON object it always was: only the keys a backend set."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class QuantReport(BaseModel):
    # open: an engine may say more than the fields below (vLLM's per-layer groups carry its own
    # keys, TGI a note on its default dtype); frozen as every results record
    model_config = ConfigDict(frozen=True, extra="allow")

    method: str | None = None  # the engine's quantization method (None: unquantized weights)
    dtype: str | None = None  # the model's dtype (a quantized file: the one it was quantized from)
    kv_cache_dtype: str | None = None
    file_type: str | None = None  # llama.cpp: the GGUF's file type as /props names it
    weight_bytes: int | float | None = None
    linear_weight_bytes: int | float | None = None
    linear_dense_bytes: int | float | None = None
    bits_per_weight: float | None = None  # the whole file's size per parameter
    linear_bits_per_weight: float | None = None  # the decoder's linear layers' weights only
    linear_ratio: float | None = None  # linear weights' size against their size in ``dtype``
    kernels: list[str] = Field(default_factory=list)
    linear_groups: list[dict[str, Any]] = Field(default_factory=list)  # vLLM: {method, kernel, layers, ...}
    tensor_types: dict[str, int] | None = None  # llama.cpp: tensor type -> count in the GGUF
    source: str | None = None  # where the numbers come from
    error: str | None = None  # the engine could not be asked

    def as_json(self) -> dict[str, Any]:
        """The report as run.json stores it: the keys that were set, nothing else."""
        return self.model_dump(mode="json", exclude_unset=True)

    @classmethod
    def read(cls, report: "QuantReport | dict[str, Any] | None") -> "QuantReport | None":
        """A report as a backend or run.json gave it (a dict from JSON) as this type."""
        return report if report is None or isinstance(report, cls) else cls.model_validate(report)

    @classmethod
    def of_description(cls, description: dict[str, Any]) -> "QuantReport | None":
        """The report in a backend's description (``describe().as_dict()`` or run.json's ``describe``)."""
        return cls.read((description.get("extra") or {}).get("quantization"))

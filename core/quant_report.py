"""What an engine says it loaded: a backend's quantization report (``describe().extra
["quantization"]``), built by the backends (llama.cpp from ``/props``, ``/v1/models`` and the GGUF's
header; vLLM from its worker; OpenVINO GenAI from the exported IR's weight types; transformers'
continuous batching from the loaded parameters) and read by the verification of loaded against requested
quantization (compare/quality/verify.py and its callers). run.json keeps it as the JSON object it
always was: only the keys a backend set, in the order it gave them."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator


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
    packed_estimated_bytes: int | None = None  # vLLM: CPU kernels' prepacked weights, estimated (in weight_bytes)
    dtype_note: str | None = None  # TGI: why no dtype is given (its /info does not say)
    source: str | None = None  # where the numbers come from
    error: str | None = None  # the engine could not be asked
    # the keys in the order the backend gave them: run.json's object stays byte for byte what it was
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: Any) -> Any:
        report = handler(data)
        if isinstance(data, dict) and isinstance(report, cls) and report.__pydantic_private__ is not None:
            report.__pydantic_private__["_order"] = tuple(data)  # (private: not a field, frozen or not)
        return report

    def as_json(self) -> dict[str, Any]:
        """The report as run.json stores it: the keys that were set, nothing else, in the given order."""
        out = self.model_dump(mode="json", exclude_unset=True)
        return {**{k: out[k] for k in self._order if k in out}, **out}

    @classmethod
    def read(cls, report: "QuantReport | dict[str, Any] | None") -> "QuantReport | None":
        """A report as a backend or run.json gave it (a dict from JSON) as this type."""
        return report if report is None or isinstance(report, cls) else cls.model_validate(report)

    @classmethod
    def of_description(cls, description: dict[str, Any]) -> "QuantReport | None":
        """The report in a backend's description (``describe().as_dict()`` or run.json's ``describe``)."""
        return cls.read((description.get("extra") or {}).get("quantization"))

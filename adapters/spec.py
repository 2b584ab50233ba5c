"""The framework-neutral serving spec. Adapters translate it into each framework's own flags."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.quant_matrix import QUANTIZATION_VALUES
from core.errors import UserError


class UnsupportedSpecError(UserError, ValueError):
    """A spec option a backend cannot honour. Never silently dropped."""

    def __init__(self, backend: str, option: str, reason: str, alternative: str | None = None):
        msg = f"{backend} cannot honour {option}: {reason}"
        if alternative:
            msg += f" (nearest supported: {alternative})"
        super().__init__(msg)
        self.backend = backend
        self.option = option
        self.reason = reason
        self.alternative = alternative


Dtype = Literal["auto", "float32", "float16", "bfloat16"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]

# Framework-neutral quantization names: "none" and the weight schemes of the one quantization
# table (adapters/quant_matrix.py), which also holds every backend's native mapping.
Quantization = Literal[QUANTIZATION_VALUES]  # type: ignore[valid-type]


class ServingSpec(BaseModel):
    """Everything that decides how an engine serves. ``None`` means "the framework's default"."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str = Field(description="local model directory (HF layout) or model id")
    tokenizer: str | None = None
    dtype: Dtype = "auto"
    quantization: Quantization = "none"
    max_model_len: int | None = Field(None, gt=0)
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)
    block_size: int | None = Field(None, gt=0)
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(None, gt=0)
    tensor_parallel: int = Field(1, gt=0)
    kv_cache_dtype: KvCacheDtype = "auto"
    enforce_eager: bool | None = None
    seed: int = Field(0, ge=0)
    load_format: Literal["auto", "safetensors", "dummy"] = "auto"
    # explicit per-backend overrides: {"vllm": {"swap_space": 0}, "tgi": {"--max-waiting-tokens": 20}}
    native: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("native")
    @classmethod
    def _native_keys(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for k, val in v.items():
            if not isinstance(val, dict):
                raise ValueError(f"native.{k} must be a mapping of option -> value")
        return v

    def native_for(self, backend: str) -> dict[str, Any]:
        return dict(self.native.get(backend, {}))


# Fields that can be set from the CLI as --field-name VALUE (bools as true/false).
SPEC_CLI_FIELDS: tuple[str, ...] = tuple(
    name for name in ServingSpec.model_fields if name not in ("native",)
)

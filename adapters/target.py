"""What the adapters know about the model and the machine: a value, gathered once by the I/O layer.

The adapters translate a spec into native config without touching the disk or the GPU driver; the
facts that translation depends on (the checkpoint's config.json, how it was quantized, whether the
model is a local directory, the device kind, GPU and CPU instruction sets) are probed once per run by
``backends.models.probe.probe`` and handed in as a :class:`Target`. ``Target.unprobed`` is what an
adapter assumes when nothing was probed: a model it cannot look into, on a CPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

@dataclass(frozen=True)
class ModelInfo:
    """The checkpoint as found on disk (read-only views; nothing here is read again later)."""

    path: str
    local: bool = False  # a local directory (else a hub id or a path that does not exist here)
    config: Mapping[str, Any] | None = None  # config.json, None when absent or unreadable
    hf_quant_config: Mapping[str, Any] | None = None  # ModelOpt's hf_quant_config.json
    made_with_gptq: bool = False  # provenance (llm_compare_quant.json / recipe.yaml) names GPTQ

    def __post_init__(self) -> None:
        for name in ("config", "hf_quant_config"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    def config_dict(self) -> dict[str, Any] | None:
        """A mutable copy of config.json (for derived configs, e.g. a dummy-weight copy)."""
        return None if self.config is None else dict(self.config)


@dataclass(frozen=True)
class Machine:
    """Where the engine runs: kernel support and some native options differ per device."""

    device: str = "cpu"  # "cuda" | "cpu"
    gpu_name: str | None = None
    compute_capability: str | None = None  # "9.0"
    # the x86 CPU's /proc/cpuinfo flags (core/hardware.py); None: not known, and then no CPU
    # kernel is refused for an instruction set it might lack. Lowered by LLM_COMPARE_CPU_ISA: what
    # the tool judges kernel support by.
    cpu_flags: frozenset[str] | None = None
    # the flags as the CPU has them, whatever the switch says: what an engine built for this CPU
    # (llama.cpp's GGML_NATIVE) will do on it. None: the same as cpu_flags.
    native_cpu_flags: frozenset[str] | None = None

    @property
    def built_for(self) -> frozenset[str] | None:
        """The flags a natively built engine sees (native_cpu_flags, else cpu_flags)."""
        return self.native_cpu_flags if self.native_cpu_flags is not None else self.cpu_flags


@dataclass(frozen=True)
class Load:
    """The load a run will offer, for engines whose admission limits must follow it (TGI refuses
    requests beyond --max-concurrent-requests). ``None``: not known (e.g. `compare plan` alone)."""

    max_in_flight: int | None = None  # highest concurrency; an open-loop level: all its requests
    max_request_tokens: int | None = None  # longest request, prompt + output tokens (nominal)


@dataclass(frozen=True)
class Target:
    model: ModelInfo
    machine: Machine = field(default_factory=Machine)
    load: Load = field(default_factory=Load)

    @classmethod
    def unprobed(cls, model: str, device: str = "cpu") -> "Target":
        """Nothing looked at: a model that cannot be inspected, on ``device``."""
        return cls(ModelInfo(model), Machine(device))

    @property
    def device(self) -> str:
        return self.machine.device


def kv_elements_per_token(config: Mapping[str, Any] | None) -> int | None:
    """K and V values of every layer for one token, from the model's config.json (None when it
    does not say): what each engine's KV cache stores per token, times its element width."""
    cfg = config or {}
    try:
        layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return 2 * layers * kv_heads * head_dim

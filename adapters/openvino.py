"""ServingSpec -> OpenVINO GenAI: ``SchedulerConfig`` fields, compile properties, export options.

OpenVINO GenAI's ``ContinuousBatchingPipeline`` serves an OpenVINO IR model that optimum-intel's
exporter writes from the HF checkpoint (``optimum-cli export openvino``); weight compression (NNCF)
happens at export, so a quantization scheme becomes an export option, not a load flag. Pure: starts
nothing, reads nothing; every spec field is either mapped or refused with the reason.

Two engine defaults a fair comparison must not hide (both measured on the embedded model):
- the CPU plugin computes an fp32 model in bf16 where the CPU has bf16 units
  (``INFERENCE_PRECISION_HINT``); the plan pins the precision the spec asks for (or, for
  ``dtype=auto``, the checkpoint's own dtype, which is what vLLM's ``auto`` means);
- ``max_num_seqs`` has no effect while ``dynamic_split_fuse`` (chunked prefill) is on: the batch
  is then bounded by ``max_num_batched_tokens`` only. A spec that sets max_num_seqs therefore gets
  dynamic_split_fuse off unless it asks for chunked prefill too, which is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from adapters.quant_matrix import SCHEMES
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target, kv_elements_per_token

NAME = "openvino"
# SchedulerConfig attributes (openvino_genai 2026.4) a native override may set directly
SCHEDULER_FIELDS = ("max_num_batched_tokens", "num_kv_blocks", "cache_size", "dynamic_split_fuse",
                    "max_num_seqs", "enable_prefix_caching", "use_cache_eviction")
# optimum-cli export options a native override may set
EXPORT_FIELDS = ("weight_format", "group_size", "ratio", "sym")
# spec dtype -> (CPU plugin inference precision, export weight format without compression)
_PRECISION = {"float32": ("f32", "fp32"), "bfloat16": ("bf16", "fp16"), "float16": ("f16", "fp16")}
_BYTES = {"f32": 4, "bf16": 2, "f16": 2}
# tokens per KV-cache block of the CPU plugin (2026.4; measured: kv_cache_size_in_bytes of N blocks)
CPU_BLOCK_TOKENS = 32
# the exporter options of each weight format the quantization table names for openvino (NNCF
# weight-only compression: activations stay in the inference precision, W8A16 / W4A16 numerics)
EXPORT_OPTIONS: dict[str, dict[str, object]] = {"int8": {"weight_format": "int8"},
                  "int4": {"weight_format": "int4", "group_size": 128, "sym": True, "ratio": 1.0}}


@dataclass(frozen=True)
class OpenVINOPlan:
    """What the backend hands the engine, and what it hands the exporter."""

    scheduler: Mapping[str, Any]  # SchedulerConfig attributes
    properties: Mapping[str, Any]  # compile properties (the CPU plugin's config)
    export: Mapping[str, Any]  # optimum-cli export openvino options (weight_format, group_size...)
    device: str = "CPU"
    seed: int = 0
    max_model_len: int | None = None  # enforced per request by the backend (the engine has none)
    # compile the IR once more at start to read back the linear layers' runtime precision
    verify: bool = True
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("scheduler", "properties", "export"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "scheduler_config": dict(self.scheduler),
                "properties": dict(self.properties), "export": dict(self.export), "seed": self.seed,
                "max_model_len": self.max_model_len, "verify": self.verify, "notes": list(self.notes)}


def _refuse(option: str, reason: str, alternative: str | None = None) -> UnsupportedSpecError:
    return UnsupportedSpecError(NAME, option, reason, alternative=alternative)


def _checkpoint_dtype(target: Target) -> str | None:
    cfg = target.model.config or {}
    d = cfg.get("torch_dtype") or cfg.get("dtype")
    return str(d) if d in _PRECISION else None


def _kv_bytes_per_block(target: Target, precision: str) -> int | None:
    values = kv_elements_per_token(target.model.config)
    return None if values is None else values * _BYTES[precision] * CPU_BLOCK_TOKENS


def openvino_plan(spec: ServingSpec, target: Target) -> OpenVINOPlan:
    notes: list[str] = []
    if target.device != "cpu":
        raise _refuse(f"device={target.device}", "this backend drives OpenVINO's CPU plugin only")
    if spec.tensor_parallel != 1:
        raise _refuse(f"tensor_parallel={spec.tensor_parallel}", "one CPU socket, no tensor parallelism",
                      alternative="tensor_parallel=1")
    if spec.load_format == "dummy":
        raise _refuse("load_format=dummy", "the exporter converts real weights", alternative="load_format=auto")
    if spec.tokenizer not in (None, spec.model):
        raise _refuse(f"tokenizer={spec.tokenizer}", "the exporter converts the checkpoint's own tokenizer",
                      alternative="a checkpoint directory that holds its tokenizer")
    if spec.block_size is not None:
        raise _refuse(f"block_size={spec.block_size}", "the CPU plugin chooses its own KV block size")
    if spec.gpu_memory_utilization is not None:
        raise _refuse("gpu_memory_utilization", "the KV cache is sized in bytes on CPU",
                      alternative="kv_cache_memory_bytes")
    if spec.kv_cache_dtype != "auto":
        raise _refuse(f"kv_cache_dtype={spec.kv_cache_dtype}", "the CPU plugin has no fp8 KV cache",
                      alternative="native openvino.KV_CACHE_PRECISION=u8")
    if spec.enforce_eager is not None:
        notes.append(f"enforce_eager={spec.enforce_eager}: not applicable (OpenVINO always runs its compiled "
                     "graph; there is no capture step to skip)")

    dtype = spec.dtype if spec.dtype != "auto" else (_checkpoint_dtype(target) or "float32")
    if spec.dtype == "auto":
        notes.append(f"dtype=auto: the checkpoint's {dtype} (the CPU plugin's own default would be bf16 "
                     "where the CPU has bf16 units)")
    precision, plain_format = _PRECISION[dtype]
    # the KV cache follows the model's precision, as vLLM's kv_cache_dtype=auto does (the CPU
    # plugin's own default is a 16-bit cache even when it computes in f32)
    properties: dict[str, Any] = {"INFERENCE_PRECISION_HINT": precision, "KV_CACHE_PRECISION": precision}

    if spec.quantization == "none":
        export: dict[str, Any] = {"weight_format": plain_format}
    else:
        side = SCHEMES[spec.quantization].on(NAME)
        cell = side.cell(target.device)
        if cell is None or not cell.supported or side.native not in EXPORT_OPTIONS:
            raise _refuse(f"quantization={spec.quantization}", cell.reason if cell else "not in the quantization "
                          "table", alternative=cell.alternative if cell else None)
        export = dict(EXPORT_OPTIONS[side.native])
        notes.append(f"{spec.quantization}: NNCF weight-only compression at export; matmuls run in {precision}")

    scheduler: dict[str, Any] = {}
    if spec.max_num_batched_tokens is not None:
        scheduler["max_num_batched_tokens"] = spec.max_num_batched_tokens
    if spec.prefix_caching is not None:
        scheduler["enable_prefix_caching"] = spec.prefix_caching
    if spec.kv_cache_memory_bytes is not None:
        per_block = _kv_bytes_per_block(target, precision)
        if per_block is None:
            raise _refuse("kv_cache_memory_bytes", "the checkpoint's config.json (layers, KV heads, head size) "
                          "is needed to size the cache in blocks", alternative="native openvino.num_kv_blocks=N")
        scheduler["num_kv_blocks"] = max(1, spec.kv_cache_memory_bytes // per_block)
    if spec.max_num_seqs is not None:
        if spec.chunked_prefill:
            raise _refuse("max_num_seqs with chunked_prefill=true",
                          "with dynamic_split_fuse on, OpenVINO bounds the batch by max_num_batched_tokens "
                          "only and ignores max_num_seqs", alternative="chunked_prefill=false")
        scheduler["max_num_seqs"] = spec.max_num_seqs
        scheduler["dynamic_split_fuse"] = False
        if spec.chunked_prefill is None:
            notes.append("max_num_seqs set: dynamic_split_fuse off (with it on, max_num_seqs has no effect)")
    elif spec.chunked_prefill is not None:
        scheduler["dynamic_split_fuse"] = spec.chunked_prefill

    device, verify = "CPU", True
    for key, value in spec.native_for(NAME).items():
        if key in SCHEDULER_FIELDS:
            scheduler[key] = value
        elif key in EXPORT_FIELDS:
            export[key] = value
        elif key == "device":
            device = str(value)
        elif key == "verify":
            verify = bool(value)
        elif key.isupper():  # OpenVINO property names are upper case (KV_CACHE_PRECISION, ...)
            properties[key] = value
        else:
            raise _refuse(f"native {key}", "not a SchedulerConfig field, export option or OpenVINO property",
                          alternative=", ".join(SCHEDULER_FIELDS + EXPORT_FIELDS) + ", or an UPPER_CASE property")
    if scheduler.get("dynamic_split_fuse", True) and "max_num_seqs" in scheduler and spec.max_num_seqs is None:
        notes.append("max_num_seqs has no effect while dynamic_split_fuse is on")
    return OpenVINOPlan(scheduler=scheduler, properties=properties, export=export, device=device,
                        seed=spec.seed, max_model_len=spec.max_model_len, verify=verify, notes=tuple(notes))

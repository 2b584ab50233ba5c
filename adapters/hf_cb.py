"""ServingSpec -> transformers' continuous batching: ``ContinuousBatchingConfig`` and load options.

transformers ships a continuous-batching scheduler of its own (``ContinuousBatchingManager``: a
paged KV cache, a FIFO scheduler, prefill split at ``max_batch_tokens``, prefix block sharing). Pure:
starts nothing, reads nothing; every spec field is either mapped or refused with the reason.

Two engine defaults a CPU run must not keep (both measured on the embedded model):
- left unset, ``num_blocks`` is sized from "free device memory", which on CPU is most of the host's
  RAM (tens of GB for a 4-layer model; the manager then sat for 40 s without a result). The cache
  is therefore always sized here in blocks, from ``kv_cache_memory_bytes`` or :data:`DEFAULT_KV_CACHE_BYTES`;
- the SDPA path allocates an attention mask of ``max_batch_tokens x (cache tokens + max_batch_tokens)``;
  with the engine's default of 8192 batch tokens that is gigabytes for any useful cache, so a CPU
  plan pins :data:`CPU_MAX_BATCH_TOKENS` unless the spec sets ``max_num_batched_tokens``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target, kv_elements_per_token

NAME = "hf-cb"
PAGE_SIZE = 256  # ContinuousBatchingConfig.page_size default (transformers 5.19), tokens per block
DEFAULT_KV_CACHE_BYTES = 1 << 30  # the same 1 GiB the openvino backend gives its CPU cache by default
CPU_MAX_BATCH_TOKENS = 512
# ContinuousBatchingConfig fields a native override may set directly
CB_FIELDS = ("page_size", "num_blocks", "max_batch_tokens", "max_memory_percent", "max_requests_per_batch",
             "max_blocks_per_request", "allow_block_sharing", "use_async_batching", "use_cuda_graph",
             "default_compile_level", "scheduler_type", "safety_margin", "cpu_offload_space", "max_queue_size")
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class HFCBPlan:
    """What the backend hands the engine process."""

    model: str
    tokenizer: str
    dtype: str  # from_pretrained dtype ("auto" = the checkpoint's)
    cb_config: Mapping[str, Any]  # ContinuousBatchingConfig keyword arguments
    attn_implementation: str = "sdpa"
    device: str = "cpu"
    max_model_len: int | None = None  # enforced per request by the engine process (transformers has none)
    kv_cache_bytes: int | None = None  # what num_blocks was sized from (None: the engine sizes it, GPU only)
    notes: tuple[str, ...] = ()
    load_kwargs: Mapping[str, Any] = field(default_factory=dict)  # extra from_pretrained keyword arguments
    # torch.set_num_threads in the engine process; None: torch's default (one per core). On a busy
    # CPU fewer threads can be much faster (measured on 2 loaded cores: 8 ms a token with 1, 445 with 2)
    num_threads: int | None = None

    def __post_init__(self) -> None:
        for name in ("cb_config", "load_kwargs"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "tokenizer": self.tokenizer, "device": self.device,
                "from_pretrained": {"dtype": self.dtype, "attn_implementation": self.attn_implementation,
                                    **self.load_kwargs},
                "continuous_batching_config": dict(self.cb_config), "kv_cache_bytes": self.kv_cache_bytes,
                "max_model_len": self.max_model_len, "num_threads": self.num_threads, "notes": list(self.notes)}


def _refuse(option: str, reason: str, alternative: str | None = None) -> UnsupportedSpecError:
    return UnsupportedSpecError(NAME, option, reason, alternative=alternative)


def kv_bytes_per_token(config: Mapping[str, Any] | None, dtype: str) -> int | None:
    """K and V of every layer for one token, as transformers' paged cache stores them."""
    values = kv_elements_per_token(config)
    return None if values is None else values * _BYTES[dtype]


def _checkpoint_dtype(target: Target) -> str | None:
    cfg = target.model.config or {}
    d = cfg.get("torch_dtype") or cfg.get("dtype")
    return str(d) if d in _BYTES else None


def hf_cb_plan(spec: ServingSpec, target: Target) -> HFCBPlan:
    notes: list[str] = []
    device = target.device
    if spec.quantization != "none":
        raise _refuse(f"quantization={spec.quantization}", "this backend serves the unquantized checkpoint",
                      alternative="quantization=none")
    if spec.kv_cache_dtype != "auto":
        raise _refuse(f"kv_cache_dtype={spec.kv_cache_dtype}", "the paged cache is kept in the model dtype",
                      alternative="kv_cache_dtype=auto")
    if spec.tensor_parallel != 1:
        raise _refuse(f"tensor_parallel={spec.tensor_parallel}", "this backend drives one device",
                      alternative="tensor_parallel=1")
    if spec.load_format == "dummy":
        raise _refuse("load_format=dummy", "the engine loads real weights", alternative="load_format=auto")
    if spec.chunked_prefill is False:
        raise _refuse("chunked_prefill=false", "transformers' scheduler always splits a prompt longer than "
                      "max_batch_tokens across steps", alternative="chunked_prefill unset or true")
    if spec.chunked_prefill:
        notes.append("chunked_prefill=true: always on (a prompt longer than max_batch_tokens is split)")

    dtype = spec.dtype if spec.dtype != "auto" else (_checkpoint_dtype(target) or "auto")
    page_size = spec.block_size or PAGE_SIZE
    cb: dict[str, Any] = {"page_size": page_size, "seed": spec.seed, "auto_switch_to_flash": False}
    if spec.max_num_seqs is not None:
        cb["max_requests_per_batch"] = spec.max_num_seqs
    if spec.max_num_batched_tokens is not None:
        cb["max_batch_tokens"] = spec.max_num_batched_tokens
    elif device == "cpu":
        cb["max_batch_tokens"] = CPU_MAX_BATCH_TOKENS
        notes.append(f"max_num_batched_tokens unset: {CPU_MAX_BATCH_TOKENS} on CPU (the engine's 8192 would size "
                     "an 8192 x cache-tokens attention mask)")
    if spec.prefix_caching is not None:
        cb["allow_block_sharing"] = spec.prefix_caching
    if spec.enforce_eager:
        cb.update(use_cuda_graph=False, default_compile_level=0)
    elif spec.enforce_eager is False:
        notes.append("enforce_eager=false: the engine decides on graphs and compilation (none on CPU)")

    kv_bytes = spec.kv_cache_memory_bytes
    if spec.gpu_memory_utilization is not None:
        if device == "cpu":
            raise _refuse("gpu_memory_utilization", "the KV cache is sized in bytes on CPU",
                          alternative="kv_cache_memory_bytes")
        if kv_bytes is not None:
            raise _refuse("gpu_memory_utilization with kv_cache_memory_bytes", "the cache is sized one way or the "
                          "other", alternative="one of the two")
        cb["max_memory_percent"] = spec.gpu_memory_utilization
    elif kv_bytes is None and device == "cpu":
        kv_bytes = DEFAULT_KV_CACHE_BYTES
        notes.append(f"kv_cache_memory_bytes unset: {DEFAULT_KV_CACHE_BYTES >> 20} MiB on CPU (the engine would "
                     "size its cache from the host's free memory)")
    if kv_bytes is not None:
        per_token = kv_bytes_per_token(target.model.config, dtype if dtype in _BYTES else "float32")
        if per_token is None or dtype == "auto":
            raise _refuse("kv_cache_memory_bytes", "the checkpoint's config.json (layers, KV heads, head size, "
                          "dtype) is needed to size the cache in blocks", alternative="native hf-cb.num_blocks=N")
        cb["num_blocks"] = max(1, kv_bytes // (per_token * page_size))

    attn, load_kwargs, threads = "sdpa", {}, None
    for key, value in spec.native_for(NAME).items():
        if key in CB_FIELDS:
            cb[key] = value
        elif key == "attn_implementation":
            attn = str(value)
        elif key in ("revision", "trust_remote_code"):
            load_kwargs[key] = value
        elif key == "num_threads":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _refuse(f"native num_threads={value!r}", "a thread count is a positive integer")
            threads = value
        else:
            raise _refuse(f"native {key}", "not a ContinuousBatchingConfig field or load option",
                          alternative=", ".join(CB_FIELDS + ("attn_implementation", "num_threads", "revision",
                                                              "trust_remote_code")))
    if device == "cpu" and not cb.get("num_blocks"):
        raise _refuse("native num_blocks=None", "on CPU the engine would size its cache from the host's free "
                      "memory", alternative="kv_cache_memory_bytes or native hf-cb.num_blocks")
    if spec.max_model_len is not None:
        notes.append(f"max_model_len={spec.max_model_len}: enforced per request (transformers has no such limit)")
    return HFCBPlan(model=spec.model, tokenizer=spec.tokenizer or spec.model, dtype=dtype, cb_config=cb,
                    attn_implementation=attn, device=device, max_model_len=spec.max_model_len,
                    kv_cache_bytes=kv_bytes if "num_blocks" not in spec.native_for(NAME) else None,
                    notes=tuple(notes), load_kwargs=load_kwargs, num_threads=threads)

"""ServingSpec -> llama.cpp's ``llama-server`` flags and the GGUF the server loads. Pure.

llama.cpp serves a GGUF file, not the HF checkpoint: the checkpoint is converted once (f32 / f16 /
bf16 by ``convert_hf_to_gguf.py``; Q8_0 / Q4_K_M by ``llama-quantize`` from the GGUF of the model's
dtype: f32 for an f32 checkpoint, bf16 for a bf16 one, so no copy twice the checkpoint's size), so
dtype and quantization become the GGUF type. Every spec field is mapped or refused with its
reason. Server defaults a fair comparison must not hide (llama.cpp b11434, ``llama-server --help``):

- ``--ctx-size`` is the KV cache of ALL slots together. With ``--parallel N`` and no unified KV
  each slot owns ctx/N tokens; with ``--kv-unified`` the slots share one pool. The plan sizes it
  like vLLM's pool: kv_cache_memory_bytes -> a token count for the pool (``--kv-unified``) and
  max_model_len -> ``--kv-unified-per-slot`` (the per-request limit); max_model_len alone ->
  ``--ctx-size N*max_model_len`` with N private slots. Unset: the server's own default (4 slots,
  unified, the model's trained context, shrunk to fit free memory).
- the KV cache type defaults to f16 even for an f32 model; on the CPU the plan follows the model's
  dtype (``--cache-type-k/-v``), as vLLM's kv_cache_dtype=auto does. On CUDA a 16-bit model keeps
  f16: the CUDA flash-attention kernels other than the vector one convert a bf16 cache to f16 on
  every step (ggml-cuda/fattn.cu), and f16 is the same 2 bytes a token.
- ``--n-gpu-layers`` defaults to "auto" (as many as fit): pinned to 0 on CPU and all on CUDA.
- flash attention defaults to auto, which turns ggml's flash-attention kernel on for the CPU; that
  kernel does not compute in f32 (it flipped a near-tie against transformers' fp32 greedy token on
  the tiny model; with it off llama.cpp's log-probs equal transformers' to 1e-5), so an f32 model
  gets ``--flash-attn off``; other types keep ``auto``, written out.
- prompt caching is on by default (``--cache-prompt``, plus a host-RAM prompt cache ``--cache-ram``);
  prefix_caching=false turns both off.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from adapters.quant_matrix import SCHEMES
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target, kv_elements_per_token

NAME = "llamacpp"
# spec dtype -> GGUF file type written by convert_hf_to_gguf.py --outtype, and the KV cache type
_DTYPE = {"float32": ("f32", "f32"), "float16": ("f16", "f16"), "bfloat16": ("bf16", "bf16")}
# quantization scheme -> llama-quantize type (applied to the GGUF of the model's dtype)
QUANT_TYPES = {"gguf-q8_0": "Q8_0", "gguf-q4_k_m": "Q4_K_M"}
_KV_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
# native options that are not server flags
SPECIAL_NATIVE = ("server_bin", "gguf")


@dataclass(frozen=True)
class LlamaCppPlan:
    """The GGUF to prepare and the server flags (host/port/model path added at start)."""

    gguf_type: str  # "f32" | "f16" | "bf16" (converter) or "Q8_0" | "Q4_K_M" (llama-quantize)
    flags: Mapping[str, Any]  # "--flag" -> value (True: a bare switch)
    base_type: str | None = None  # the converter's GGUF a quantized type is made from
    device: str = "cpu"
    env: Mapping[str, str] = field(default_factory=dict)
    server_bin: str | None = None  # a prebuilt llama-server (native llamacpp.server_bin)
    gguf: str | None = None  # a GGUF file to serve as is (native llamacpp.gguf)
    max_model_len: int | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", MappingProxyType(dict(self.flags)))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    def argv(self) -> list[str]:
        """The flags as command-line arguments (without --model/--host/--port)."""
        out: list[str] = []
        for k, v in self.flags.items():
            if v is True:
                out.append(k)
            elif v is False or v is None:
                continue
            else:
                out += [k, str(v)]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"gguf_type": self.gguf_type, "base_type": self.base_type, "flags": dict(self.flags), "argv": self.argv(),
                "device": self.device, "env": dict(self.env), "server_bin": self.server_bin, "gguf": self.gguf,
                "max_model_len": self.max_model_len, "notes": list(self.notes)}


def _refuse(option: str, reason: str, alternative: str | None = None) -> UnsupportedSpecError:
    return UnsupportedSpecError(NAME, option, reason, alternative=alternative)


def _checkpoint_dtype(target: Target) -> str | None:
    cfg = target.model.config or {}
    d = cfg.get("torch_dtype") or cfg.get("dtype")
    return str(d) if d in _DTYPE else None


def kv_bytes_per_token(target: Target, kv_type: str) -> int | None:
    values = kv_elements_per_token(target.model.config)
    return None if values is None else values * _KV_BYTES.get(kv_type, 2)


def _refuse_fields(spec: ServingSpec, target: Target, notes: list[str]) -> None:
    if spec.tensor_parallel != 1:
        raise _refuse(f"tensor_parallel={spec.tensor_parallel}", "llama.cpp splits layers or rows across GPUs "
                      "(--split-mode), not tensor parallelism in vLLM's sense", alternative="tensor_parallel=1 "
                      "and native llamacpp.--split-mode")
    if spec.load_format == "dummy":
        raise _refuse("load_format=dummy", "the GGUF is converted from real weights", alternative="load_format=auto")
    if spec.tokenizer not in (None, spec.model):
        raise _refuse(f"tokenizer={spec.tokenizer}", "the GGUF carries the checkpoint's own tokenizer",
                      alternative="a checkpoint directory that holds its tokenizer")
    if spec.block_size is not None:
        raise _refuse(f"block_size={spec.block_size}", "llama.cpp's KV cache is one contiguous buffer per "
                      "stream (cells of one token), not paged blocks")
    if spec.gpu_memory_utilization is not None:
        raise _refuse("gpu_memory_utilization", "llama-server sizes its KV cache in tokens (--ctx-size), not as a "
                      "fraction of device memory", alternative="kv_cache_memory_bytes")
    if spec.kv_cache_dtype != "auto":
        raise _refuse(f"kv_cache_dtype={spec.kv_cache_dtype}", "llama.cpp's KV cache types are f32, f16, bf16 and "
                      "block-quantized ints (q8_0, q4_0, ...); there is no fp8", alternative="native "
                      "llamacpp.--cache-type-k=q8_0 (and --cache-type-v; V quantization needs flash attention)")
    if spec.chunked_prefill is False:
        raise _refuse("chunked_prefill=false", "llama-server always splits a prompt into --batch-size chunks "
                      "and batches them with other slots' decode steps; it cannot be turned off",
                      alternative="chunked_prefill unset or true")
    if spec.chunked_prefill:
        notes.append("chunked_prefill=true: always on in llama-server (prompts go in --batch-size chunks)")
    if spec.enforce_eager is not None and target.device == "cpu":
        notes.append(f"enforce_eager={spec.enforce_eager}: not applicable on CPU (no graph capture to skip)")


def _weights(spec: ServingSpec, target: Target, notes: list[str]) -> tuple[str, str, str | None]:
    """(GGUF type, KV cache type, the converter's type a quantized GGUF is made from)."""
    dtype = spec.dtype if spec.dtype != "auto" else (_checkpoint_dtype(target) or "float32")
    if spec.dtype == "auto":
        notes.append(f"dtype=auto: the checkpoint's {dtype}")
    gguf_type, kv_type = _DTYPE[dtype]
    if target.device != "cpu" and kv_type == "bf16":
        kv_type = "f16"
        notes.append("KV cache f16 on CUDA for a bf16 model: the CUDA flash-attention kernels other than the vector "
                     "one convert a bf16 cache to f16 on every step; f16 is the same 2 bytes a token")
    base = None
    if spec.quantization != "none":
        cell = SCHEMES[spec.quantization].on(NAME).cell(target.device)
        if cell is None or not cell.supported or spec.quantization not in QUANT_TYPES:
            raise _refuse(f"quantization={spec.quantization}", cell.reason if cell else "not in the quantization "
                          "table", alternative=cell.alternative if cell else ", ".join(QUANT_TYPES))
        base, gguf_type = gguf_type, QUANT_TYPES[spec.quantization]
        notes.append(f"{spec.quantization}: llama-quantize {gguf_type} from the {base} GGUF (tensors whose rows do not "
                     "fit the type's block size get llama-quantize's fallback type; the loaded types are read back)")
    return gguf_type, kv_type, base


def llamacpp_plan(spec: ServingSpec, target: Target) -> LlamaCppPlan:
    notes: list[str] = []
    _refuse_fields(spec, target, notes)
    gguf_type, kv_type, base = _weights(spec, target, notes)
    # flash attention "auto" resolves to on for the CPU, and ggml's CPU flash-attention kernel does
    # not compute in f32 (measured: a top-2 log-prob gap of 0.003 flipped against transformers' fp32,
    # with FA off the log-probs equal transformers' to 1e-5): an f32 model gets it off
    fa = "off" if gguf_type == "f32" else "auto"
    flags: dict[str, Any] = {"--seed": spec.seed, "--cache-type-k": kv_type, "--cache-type-v": kv_type,
                             "--flash-attn": fa, "--metrics": True, "--slots": True, "--no-webui": True}
    if target.device == "cpu":
        notes.append(f"KV cache {kv_type} (the model's dtype; llama-server's own default is f16)")
    if fa == "off":
        notes.append("--flash-attn off: the f32 model's attention in f32 (llama-server's auto turns on a CPU "
                     "flash-attention kernel that computes in reduced precision)")
    env: dict[str, str] = {}
    if target.device == "cpu":
        flags["--n-gpu-layers"] = 0
        # the CPU the server was built for and runs on, not the instruction sets LLM_COMPARE_CPU_ISA
        # lowers: its build still uses AMX
        built_for = target.machine.built_for
        amx = built_for is not None and "amx_int8" in built_for
        if gguf_type not in _KV_BYTES and amx:
            # measured (b11434, Xeon with AMX-INT8): with repacking on, llama-server segfaults in its
            # warm-up on Q8_0 and Q4_K_M weights (hidden sizes 128 and 256 alike); the repacked
            # (AMX) kernels are skipped instead. Without AMX (or when the CPU is not known) repacking
            # stays llama.cpp's default.
            flags["--no-repack"] = True
            notes.append("--no-repack: llama-server b11434 crashed in its warm-up with repacked quantized weights on "
                         "an AMX-INT8 CPU")
    else:
        flags["--n-gpu-layers"] = "all"
        if spec.enforce_eager:  # ggml's CUDA backend captures CUDA graphs unless told not to
            env["GGML_CUDA_DISABLE_GRAPHS"] = "1"

    slots = spec.max_num_seqs
    if slots is not None:
        flags["--parallel"] = slots
    per_token = kv_bytes_per_token(target, kv_type)
    if spec.kv_cache_memory_bytes is not None:
        if per_token is None:
            raise _refuse("kv_cache_memory_bytes", "the checkpoint's config.json (layers, KV heads, head size) is "
                          "needed to size the cache in tokens", alternative="native llamacpp.--ctx-size=N")
        pool = spec.kv_cache_memory_bytes // per_token
        if spec.max_model_len is not None and pool < spec.max_model_len:
            raise _refuse("kv_cache_memory_bytes", f"{pool} tokens of KV cache cannot hold one max_model_len="
                          f"{spec.max_model_len} request", alternative=f"kv_cache_memory_bytes >= "
                          f"{spec.max_model_len * per_token}")
        flags["--ctx-size"] = pool
        flags["--kv-unified"] = True
        if spec.max_model_len is not None:
            flags["--kv-unified-per-slot"] = spec.max_model_len
        notes.append(f"kv_cache_memory_bytes -> --ctx-size {pool} tokens ({per_token} B/token at {kv_type}) in one "
                     "unified pool shared by the slots, as vLLM's KV pool is")
    elif spec.max_model_len is not None:
        n = slots or 4
        flags["--ctx-size"] = n * spec.max_model_len
        if slots is None:
            flags["--parallel"] = n
        notes.append(f"max_model_len -> --ctx-size {n}*{spec.max_model_len}: each of {n} slots owns "
                     f"{spec.max_model_len} tokens (--ctx-size is shared by the slots)")
    else:
        notes.append("no KV size in the spec: llama-server's default context (the model's, fitted to free memory)")
    if slots is None:
        notes.append("max_num_seqs unset: llama-server's default slots (auto = 4); more concurrent requests queue")
    if spec.max_num_batched_tokens is not None:
        flags["--batch-size"] = spec.max_num_batched_tokens
        flags["--ubatch-size"] = min(spec.max_num_batched_tokens, 512)
    if spec.prefix_caching is False:
        flags["--no-cache-prompt"] = True
        flags["--cache-ram"] = 0
    elif spec.prefix_caching:
        flags["--cache-prompt"] = True

    server_bin = gguf = None
    for key, value in spec.native_for(NAME).items():
        if key in SPECIAL_NATIVE and (value is None or not str(value).strip()):
            # (an empty value was served as the path "None")
            raise _refuse(f"native {key}=", "it names no file", alternative=f"native llamacpp.{key}=/path/to/"
                          + ("llama-server" if key == "server_bin" else "model.gguf") + ", or leave it out")
        if key == "server_bin":
            server_bin = str(value)
        elif key == "gguf":
            gguf = str(value)
        elif key.startswith("-"):
            if not isinstance(value, (str, int, float, bool)) or any(not c.isprintable() for c in str(value)):
                # (a list was passed as the text "[1, 2]"; a NUL could not be passed at all)
                raise _refuse(f"native {key}={value!r}", "a llama-server flag takes one value: a number, a "
                              "word or true (a flag without a value)", alternative=f"native llamacpp.{key}=VALUE")
            flags[key] = value
        else:
            raise _refuse(f"native {key}", "not a llama-server flag (write it as --flag) or one of "
                          + ", ".join(SPECIAL_NATIVE), alternative="native llamacpp.--threads=8")
    for f in ("--host", "--port", "--model", "-m"):
        if f in flags:
            raise _refuse(f"native {f}", "set by the backend (127.0.0.1, a free port, the prepared GGUF)",
                          alternative="native llamacpp.gguf=FILE to serve a GGUF of your own")
    return LlamaCppPlan(gguf_type=gguf_type, base_type=base, flags=flags, device=target.device, env=env, server_bin=server_bin,
                        gguf=gguf, max_model_len=spec.max_model_len, notes=tuple(notes))

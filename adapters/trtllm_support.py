"""What each TensorRT-LLM release and GPU supports: release -> flow, quantization scheme ->
producer and compute-capability range, with the source each limit was read from. Pure, no I/O;
adapters/trtllm.py builds the plan from these answers. NOTHING here has been executed against
TensorRT-LLM on our machines."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from adapters.quant_matrix import native_names
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import ModelInfo
from core.errors import UserError

IMAGE_REPO = "nvcr.io/nvidia/tensorrt-llm/release"
DEFAULT_VERSION = "1.2.0"  # a final release with the PyTorch flow and the --config alias

V_MIN = Version("0.18.0")            # trtllm-serve serving an engine, docs at 0.18.2
V_PYTORCH_DEFAULT = Version("1.0.0")  # 1.0: `--backend` defaults to pytorch; 0.x: experimental _torch
V_ENGINE_LAST = Version("1.3.0rc20")  # last release with trtllm-build / the TensorRT backend
V_CONFIG_ALIAS = Version("1.2.0")     # `--config` alias of `--extra_llm_api_options` (PR #9104)
V_NVFP4_QUANTIZE = Version("0.17.0")  # 0.17.0 release notes: NVFP4 (Blackwell) support added
V_KV_TOKENS_PER_BLOCK = Version("1.3.0rc27")  # KvCacheConfig.tokens_per_block / max_gpu_total_bytes:
#                                          # read in the 1.3.0rc27 LLM API reference; older unverified


@dataclass(frozen=True)
class QuantScheme:
    """One TensorRT-LLM quantization (QuantAlgo name, tensorrt_llm/quantization/mode.py)."""

    algo: str
    qformat: str | None  # quantize.py (legacy) / ModelOpt hf_ptq.py --qformat; None: no producer
    engine_min_cc: tuple[int, int] | None  # None: not available in the engine flow
    pytorch_cc: tuple[tuple[int, int], tuple[int, int]] | None  # [lo, hi) in the PyTorch flow
    prequantized_only: bool = False  # PyTorch flow loads it but ModelOpt cannot produce it


# Compute-capability ranges. Engine flow: ModelOpt support matrix (FP8/W4A8 "Ada and later",
# INT8 SQ and W4A16 AWQ "Ampere and later", FP4 "Blackwell and later"); weight-only INT8/INT4
# from TRT-LLM's precision.md (Volta and later). PyTorch flow: the "Hardware Support Matrix" of
# docs/source/features/quantization.md at 1.0.0 (W4A8/W4A16 AWQ and GPTQ: Ampere/Ada/Hopper only,
# not Blackwell; FP8 per-tensor: Ada, Hopper, Blackwell; NVFP4: Blackwell only).
_NO_BLACKWELL, _ANY = (10, 0), (99, 0)
SCHEMES: dict[str, QuantScheme] = {s.algo: s for s in (
    QuantScheme("FP8", "fp8", (8, 9), ((8, 9), _ANY)),
    QuantScheme("W4A16_AWQ", "int4_awq", (8, 0), ((8, 0), _NO_BLACKWELL)),
    QuantScheme("W4A8_AWQ", "w4a8_awq", (8, 9), ((8, 9), _NO_BLACKWELL)),
    QuantScheme("NVFP4", "nvfp4", (10, 0), ((10, 0), _ANY)),
    QuantScheme("W8A8_SQ_PER_CHANNEL", "int8_sq", (8, 0), None),
    QuantScheme("W8A16", "int8_wo", (7, 0), None),
    QuantScheme("W4A16_GPTQ", None, None, ((8, 0), _NO_BLACKWELL), prequantized_only=True),
)}
# framework-neutral spec names -> QuantAlgo, from the one quantization table. "w4a16"
# (compressed-tensors group-wise INT4 made by llmcompressor) has no TRT-LLM equivalent, so it is
# refused instead of mapped to something else.
NEUTRAL = native_names("trtllm")
# --native trtllm.quant=... accepts TRT-LLM's own names (schemes with no neutral name: w4a8_awq, nvfp4)
NATIVE_QUANT = {"none": None, "fp8": "FP8", "int4_awq": "W4A16_AWQ", "w4a16_awq": "W4A16_AWQ",
                "w4a8_awq": "W4A8_AWQ", "nvfp4": "NVFP4", "int8_sq": "W8A8_SQ_PER_CHANNEL",
                "int8_wo": "W8A16", "w4a16_gptq": "W4A16_GPTQ", **{a.lower(): a for a in SCHEMES}}


def _unsupported(option: str, reason: str, alternative: str | None = None) -> UnsupportedSpecError:
    return UnsupportedSpecError("trtllm", option, reason, alternative)


def parse_version(text: str) -> Version:
    try:
        return Version(str(text))
    except InvalidVersion:
        raise _unsupported(f"trtllm.version={text}", "not a TensorRT-LLM release number",
                           "e.g. trtllm.version=1.2.0 or 0.21.0") from None


def parse_cc(text: Any) -> tuple[int, int]:
    try:
        major, _, minor = str(text).strip().removeprefix("sm_").partition(".")
        if not minor and len(major) >= 2:  # "90" / "sm_90"
            major, minor = major[:-1], major[-1]
        return int(major), int(minor or 0)
    except ValueError:
        raise _unsupported(f"trtllm.compute_capability={text}", "expected MAJOR.MINOR",
                           "e.g. trtllm.compute_capability=9.0 (H100/H200)") from None


def version_and_image(native: dict[str, Any]) -> tuple[Version, str]:
    """trtllm.version wins; else the tag of trtllm.image; else DEFAULT_VERSION."""
    image = native.get("image")
    text = native.get("version")
    if text is None and image and ":" in str(image).rsplit("/", 1)[-1]:
        text = str(image).rsplit(":", 1)[1]
    v = parse_version(text or DEFAULT_VERSION)
    return v, str(image or f"{IMAGE_REPO}:{v}")


def choose_flow(v: Version, requested: str | None) -> str:
    if v < V_MIN:
        raise _unsupported(f"trtllm.version={v}", f"releases before {V_MIN} have no trtllm-serve for "
                           "engines as this backend drives it", f"trtllm.version>={V_MIN}")
    flow = requested or ("pytorch" if v >= V_PYTORCH_DEFAULT else "engine")
    if flow not in ("pytorch", "engine"):
        raise _unsupported(f"trtllm.flow={flow}", "unknown flow", "trtllm.flow=pytorch or engine")
    if flow == "engine" and v > V_ENGINE_LAST:
        raise _unsupported(f"trtllm.flow=engine with {v}", f"trtllm-build and the TensorRT engine backend "
                           f"were removed after {V_ENGINE_LAST}", "trtllm.flow=pytorch")
    if flow == "pytorch" and v < V_PYTORCH_DEFAULT:
        raise _unsupported(f"trtllm.flow=pytorch with {v}", "before 1.0 the PyTorch backend is the "
                           "experimental tensorrt_llm._torch", "trtllm.flow=engine or trtllm.version>=1.0.0")
    return flow


def resolve_quant(spec: ServingSpec, native: dict[str, Any]) -> str | None:
    if "quant" in native:
        key = str(native["quant"]).lower()
        if key not in NATIVE_QUANT:
            raise _unsupported(f"trtllm.quant={native['quant']}", "unknown TensorRT-LLM quantization",
                               ", ".join(sorted(k for k in NATIVE_QUANT if k.islower())))
        return NATIVE_QUANT[key]
    if spec.quantization not in NEUTRAL:
        raise _unsupported(f"quantization={spec.quantization}", "TensorRT-LLM has no scheme with this "
                           "meaning (compressed-tensors group-wise INT4)", "w4a16-awq")
    return NEUTRAL[spec.quantization]


def _cc_str(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def check_quant(algo: str | None, flow: str, v: Version, cc: tuple[int, int] | None,
                prequantized: str | None) -> list[str]:
    """Raise if ``algo`` cannot run in this flow/release/GPU; returns notes."""
    notes: list[str] = []
    if prequantized is not None and prequantized != algo:
        raise _unsupported(f"quantization={algo or 'none'}", f"the checkpoint is already quantized "
                           f"as {prequantized}", f"trtllm.quant={prequantized.lower()}")
    if algo is None:
        return notes
    s = SCHEMES[algo]
    if flow == "engine":
        if s.engine_min_cc is None:
            raise _unsupported(f"quantization={algo} in the engine flow", "quantize.py cannot produce it "
                               "(GPTQ needs the per-model convert_checkpoint.py)", "w4a16-awq")
        if algo == "NVFP4" and v < V_NVFP4_QUANTIZE:
            raise _unsupported(f"quantization=NVFP4 with {v}", "added in 0.17.0", "trtllm.version>=0.17.0")
        lo, hi = s.engine_min_cc, _ANY
    else:
        if s.pytorch_cc is None:
            raise _unsupported(f"quantization={algo} in the pytorch flow", "the PyTorch backend's "
                               "quantization matrix (1.0.0) has no such checkpoint type",
                               "w8a8-fp8 (Ada/Hopper/Blackwell) or w4a16-awq (Ampere..Hopper)")
        if s.prequantized_only and prequantized != algo:
            raise _unsupported(f"quantization={algo}", "ModelOpt does not produce GPTQ; the PyTorch flow "
                               "needs a pre-quantized GPTQ checkpoint as --model", "w4a16-awq")
        lo, hi = s.pytorch_cc
    if cc is None:
        notes.append(f"GPU compute capability unknown: {algo} hardware support not checked "
                     "(pass --native trtllm.compute_capability=9.0)")
    elif not lo <= cc < hi:
        fp8 = algo in ("FP8", "W4A8_AWQ")
        why = ("needs FP8 tensor cores (Ada sm_89 / Hopper sm_90 or newer)" if fp8 and cc < lo else
               f"runs on compute capability {_cc_str(lo)}" + (f" up to below {_cc_str(hi)}" if hi != _ANY else "+"))
        raise _unsupported(f"quantization={algo} on sm_{cc[0]}{cc[1]}", why,
                           "w4a16-awq" if cc < (10, 0) and cc >= (8, 0) else "w8a8-fp8" if cc >= (8, 9) else "none")
    return notes


def _kv_fp8(spec: ServingSpec, flow: str, cc: tuple[int, int] | None) -> bool:
    if spec.kv_cache_dtype == "auto":
        return False
    if spec.kv_cache_dtype == "fp8_e5m2":
        raise _unsupported("kv_cache_dtype=fp8_e5m2", "TensorRT-LLM's FP8 KV cache is E4M3", "kv_cache_dtype=fp8")
    lo = (8, 0) if flow == "pytorch" else (8, 9)  # 1.0 matrix: FP8 KV on Ampere+; engine: ModelOpt FP8
    if cc is not None and cc < lo:
        raise _unsupported(f"kv_cache_dtype=fp8 on sm_{cc[0]}{cc[1]}", f"needs compute capability "
                           f">= {_cc_str(lo)}", "kv_cache_dtype=auto")
    return True


def checkpoint_quant(model: ModelInfo) -> str | None:
    """QuantAlgo a checkpoint already carries: ModelOpt's hf_quant_config.json or config.json's
    quantization_config (GPTQ/AWQ/FP8/ModelOpt). None for an unquantized (or unknown) checkpoint."""
    q = (model.hf_quant_config or {}).get("quantization") or {}
    if isinstance(q, dict) and q.get("quant_algo"):
        return str(q["quant_algo"]).upper()
    qc = (model.config or {}).get("quantization_config") or {}
    method = str(qc.get("quant_method", "")).lower()
    if method == "modelopt" and qc.get("quant_algo"):
        return str(qc["quant_algo"]).upper()
    if method in ("gptq", "awq") and int(qc.get("bits", 4)) == 4:
        return "W4A16_GPTQ" if method == "gptq" else "W4A16_AWQ"
    if method == "fp8":
        return "FP8"
    if method:
        raise UserError(f"checkpoint {model.path} is quantized as {method!r}, which TensorRT-LLM does not load; "
                        f"pass the unquantized checkpoint and --quantization, or a ModelOpt export")
    return None

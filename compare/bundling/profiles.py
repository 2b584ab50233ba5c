"""What a bundle may leave out for one use, with the reason, checked against the source.

A profile names (a) requirements the root declares that the path used never imports (so they
are not bundled: ``skip``, each with its top-level module names so ``compare bundle`` can list
their import sites from the source as evidence), (b) files to remove from the installed tree
(``remove``: each with the module whose import sites must all be guarded or lazy, else the
bundle refuses), (c) ELF files whose fatbin is pruned to ``gpu_arch``.

``vllm-dense-sm90``: vLLM serving a dense decoder (Llama/Qwen2/Mistral class) in bf16/fp16 on
an sm_90 GPU (H100/H200), FlashAttention 3, no structured-output grammars beyond xgrammar, no
multimodal inputs, no MoE/MLA, no tracing. Seen working with vLLM 0.26.0 on an H200
(benchmarks/results/h200/2026-11-30-bundle-install/), where the same file set ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Removal:
    glob: str  # relative to the installed tree
    module: str | None  # import sites checked; None: not a Python module (binary, headers)
    reason: str


@dataclass(frozen=True)
class Profile:
    name: str
    root: str  # the distribution the profile is about
    gpu_arch: int | None
    skip: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # dist -> (reason, modules)
    remove: tuple[Removal, ...] = ()
    fatbins: tuple[str, ...] = ()


_LAZY = "imported only inside functions / guarded on the dense-generation path"
VLLM_DENSE_SM90 = Profile(
    name="vllm-dense-sm90", root="vllm", gpu_arch=90,
    skip={
        "blake3": ("prefix-cache hash only when --prefix-caching-hash-algo blake3", ("blake3",)),
        "lm-format-enforcer": ("structured-output backend not selected (xgrammar is)", ("lmformatenforcer",)),
        "outlines-core": ("structured-output backend not selected (xgrammar is)", ("outlines_core",)),
        "lark": ("grammar parsing for the outlines backend only", ("lark",)),
        "mistral-common": ("Mistral tokenizers/models only", ("mistral_common",)),
        "compressed-tensors": ("compressed-tensors quantized checkpoints only", ("compressed_tensors",)),
        "depyf": ("torch.compile debug dumps only", ("depyf",)),
        "python-json-logger": ("JSON logging config only", ("pythonjsonlogger",)),
        "ijson": ("streaming JSON tool parsers only", ("ijson",)),
        "anthropic": ("Anthropic Messages API endpoint only", ("anthropic",)),
        "mcp": ("MCP tool server integration only", ("mcp",)),
        "opentelemetry-sdk": ("tracing, off unless --otlp-traces-endpoint", ("opentelemetry",)),
        "opentelemetry-api": ("tracing, off unless --otlp-traces-endpoint", ("opentelemetry",)),
        "opentelemetry-exporter-otlp": ("tracing, off unless --otlp-traces-endpoint", ("opentelemetry",)),
        "opentelemetry-semantic-conventions-ai": ("tracing only", ("opentelemetry",)),
        "torchcodec": ("audio/video inputs only", ("torchcodec",)),
        "pynvvideocodec": ("video decoding only", ("PyNvVideoCodec",)),
        "flashinfer-python": ("FlashInfer backends/sampler; FA3 + VLLM_USE_FLASHINFER_SAMPLER=0 used", ("flashinfer",)),
        "tilelang": ("tilelang kernels (sparse/MLA models) only", ("tilelang",)),
        "nvidia-cudnn-frontend": ("cuDNN attention backends only", ("cudnn",)),
        "nvtx": ("profiling ranges only", ("nvtx",)),
        "fastsafetensors": ("--load-format fastsafetensors only (dummy weights here)", ("fastsafetensors",)),
        "nvidia-cutlass-dsl": ("CuTe-DSL kernels for sm_100 / FA4 only", ("cutlass",)),
        "quack-kernels": ("CuTe-DSL kernels for sm_100 only", ("quack",)),
        "tokenspeed-mla": ("MLA attention only", ("tokenspeed_mla",)),
        "humming-kernels": ("quantized GEMM kernels only", ("humming",)),
        "jsonschema": ("JSON-schema structured outputs only", ("jsonschema",)),
        # pulled by fastapi[standard] / uvicorn[standard]; the server runs on plain uvicorn + uvloop
        "fastapi-cli": ("the `fastapi` console command; vLLM starts uvicorn itself", ("fastapi_cli",)),
        "fastapi-cloud-cli": ("FastAPI Cloud deploy command", ("fastapi_cloud_cli",)),
        "python-multipart": ("form uploads (audio transcription endpoints) only", ("multipart", "python_multipart")),
        "email-validator": ("pydantic EmailStr fields only", ("email_validator",)),
        "httptools": ("uvicorn's optional C HTTP parser (h11 is used)", ("httptools",)),
        "websockets": ("realtime/websocket endpoints only", ("websockets",)),
        "python-dotenv": ("uvicorn --env-file only", ("dotenv",)),
        "pydantic-settings": ("fastapi[standard] extra, not imported by vLLM", ("pydantic_settings",)),
        "pydantic-extra-types": ("fastapi[standard] extra, not imported by vLLM", ("pydantic_extra_types",)),
    },
    remove=(
        Removal("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm.vllm_flash_attn._vllm_fa2_C",
                "FlashAttention 2; sm_90 uses FA3 (_vllm_fa3_C)"),
        Removal("vllm/_moe_C_stable_libtorch.abi3.so", "vllm._moe_C_stable_libtorch", "MoE kernels; dense model"),
        Removal("vllm/_flashmla_C.abi3.so", "vllm._flashmla_C", "MLA attention (DeepSeek-class models)"),
        Removal("vllm/_flashmla_extension_C.abi3.so", "vllm._flashmla_extension_C", "MLA attention"),
        Removal("vllm/_qutlass_C.abi3.so", "vllm._qutlass_C", "MXFP4/NVFP4 quantized GEMMs"),
        Removal("vllm/vllm-rs", None, "Rust frontend binary, launched only with VLLM_RUST_FRONTEND_PATH set"),
        Removal("vllm/third_party/deep_gemm/**", "vllm.third_party.deep_gemm", "DeepGEMM FP8 (MoE/MLA) kernels"),
        Removal("vllm/third_party/fmha_sm100/**", "vllm.third_party.fmha_sm100", "sm_100 attention kernels"),
        Removal("vllm/third_party/tml_fa4/**", "vllm.third_party.tml_fa4", "FlashAttention 4 (sm_100)"),
        Removal("bin/**", None, "console scripts written by pip --target; python -m is used"),
    ),
    fatbins=("vllm/_C_stable_libtorch.abi3.so",),
)

PROFILES = {p.name: p for p in (VLLM_DENSE_SM90,)}

"""ServingSpec + TensorRT-LLM release -> flow, quantize/build/serve argv and LlmArgs. Pure, no I/O.

Two flows, chosen by the release (every flag below is cited with the release it was read from;
NOTHING here has been executed against TensorRT-LLM on our machines):

* ``pytorch`` (default from 1.0.0, the only one after 1.3.0rc20): the HF checkpoint, or a
  pre-quantized ModelOpt checkpoint made from it, is served directly by ``trtllm-serve MODEL``;
  engine settings go into the LlmArgs YAML given with ``--extra_llm_api_options`` (1.0) /
  ``--config`` (alias added by NVIDIA/TensorRT-LLM PR #9104, Nov 2025; in 1.2.0).
* ``engine`` (legacy, releases 0.18.0 .. 1.3.0rc20): ``examples/quantization/quantize.py``
  (ModelOpt) writes a TensorRT-LLM checkpoint, ``trtllm-build`` compiles it, ``trtllm-serve ENGINE``
  serves it. v1.3.0rc20's release notes: "This RC version will be the last one supporting the
  TensorRT backend"; the removal PRs (#15763, #15918, #16369) landed after it.

All paths are container paths: the source checkpoint is mounted read-only at MODEL_DIR, the build
directory (a fresh engine-cache temp dir, see compare/engine_cache.py) at WORK_DIR, the per-run
LlmArgs YAML at CONFIG_DIR.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from adapters.spec import ServingSpec, UnsupportedSpecError

IMAGE_REPO = "nvcr.io/nvidia/tensorrt-llm/release"
DEFAULT_VERSION = "1.2.0"  # a final release with the PyTorch flow and the --config alias
MODEL_DIR, WORK_DIR, CONFIG_DIR, MODELOPT_DIR = "/model", "/work", "/config", "/opt/Model-Optimizer"
SERVE_PORT = 8000  # inside the container; published on 127.0.0.1 by the container manager
LLM_ARGS_FILE = f"{CONFIG_DIR}/llm_args.yaml"

V_MIN = Version("0.18.0")            # trtllm-serve serving an engine, docs at 0.18.2
V_PYTORCH_DEFAULT = Version("1.0.0")  # 1.0: `--backend` defaults to pytorch; 0.x: experimental _torch
V_ENGINE_LAST = Version("1.3.0rc20")  # last release with trtllm-build / the TensorRT backend
V_CONFIG_ALIAS = Version("1.2.0")     # `--config` alias of `--extra_llm_api_options` (PR #9104)
V_NVFP4_QUANTIZE = Version("0.17.0")  # 0.17.0 release notes: NVFP4 (Blackwell) support added
V_KV_TOKENS_PER_BLOCK = Version("1.3.0rc27")  # KvCacheConfig.tokens_per_block / max_gpu_total_bytes:
#                                          # read in the 1.3.0rc27 LLM API reference; older unverified

# Keys of spec.native["trtllm"] that steer this adapter; anything else is an error (never dropped).
CONTROL_KEYS = ("version", "image", "flow", "quant", "compute_capability", "gpu_name", "calib_size",
                "calib_dataset", "modelopt_dir", "llm_args", "build_args", "quantize_image", "gpus",
                "detokenize", "step_timeout_s")


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
# framework-neutral spec names -> QuantAlgo. "w4a16" (compressed-tensors group-wise INT4 made by
# llmcompressor) has no TRT-LLM equivalent, so it is refused instead of mapped to something else.
NEUTRAL = {"none": None, "w8a8-fp8": "FP8", "w4a16-awq": "W4A16_AWQ", "w4a16-gptq": "W4A16_GPTQ",
           "w8a8-int8": "W8A8_SQ_PER_CHANNEL", "w8a16-int8": "W8A16"}
# --native trtllm.quant=... accepts TRT-LLM's own names (schemes with no neutral name: w4a8_awq, nvfp4)
NATIVE_QUANT = {"none": None, "fp8": "FP8", "int4_awq": "W4A16_AWQ", "w4a16_awq": "W4A16_AWQ",
                "w4a8_awq": "W4A8_AWQ", "nvfp4": "NVFP4", "int8_sq": "W8A8_SQ_PER_CHANNEL",
                "int8_wo": "W8A16", "w4a16_gptq": "W4A16_GPTQ", **{a.lower(): a for a in SCHEMES}}


@dataclass(frozen=True)
class Step:
    """One container run of the pipeline: image + argv (container paths)."""

    name: str  # "quantize" | "build"
    image: str
    argv: tuple[str, ...]
    mounts_modelopt: bool = False  # needs a Model-Optimizer checkout at MODELOPT_DIR

    def as_dict(self) -> dict[str, Any]:
        return {"image": self.image, "argv": list(self.argv)}


@dataclass(frozen=True)
class TrtllmPlan:
    version: str
    image: str
    flow: str  # "pytorch" | "engine"
    quant: str | None  # QuantAlgo name, None = unquantized
    steps: tuple[Step, ...]  # what produces the cached artifact (empty: serve the checkpoint)
    llm_args: dict[str, Any]  # LlmArgs YAML (also the kwargs of tensorrt_llm.LLM)
    serve_argv: tuple[str, ...]
    serve_model: str  # container path trtllm-serve loads
    compute_capability: str | None
    gpu_name: str | None
    notes: tuple[str, ...] = ()
    not_applicable: dict[str, Any] = field(default_factory=dict)

    def cache_fields(self) -> dict[str, Any]:
        """What decides the built artifact (engine-cache key, with checkpoint hash and image id)."""
        return {"flow": self.flow, "version": self.version, "quant": self.quant,
                "steps": [s.as_dict() for s in self.steps], "gpu_name": self.gpu_name,
                "compute_capability": self.compute_capability}

    def as_dict(self) -> dict[str, Any]:
        return {
            "flow": self.flow, "trtllm_version": self.version, "image": self.image,
            "quantization": self.quant or "none",
            "quantize": self._step("quantize"), "build": self._step("build"),
            "llm_args_yaml": self.llm_args, "serve": list(self.serve_argv),
            "gpu": {"name": self.gpu_name, "compute_capability": self.compute_capability},
            "notes": list(self.notes), "not_applicable": self.not_applicable,
            "executed_here": "never: TensorRT-LLM has not been run on these machines",
        }

    def _step(self, name: str) -> list[str] | None:
        return next((list(s.argv) for s in self.steps if s.name == name), None)


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


def _tokenizer_dir(spec: ServingSpec) -> str | None:
    """Container path of a separate tokenizer (mounted at /tokenizer by the backend)."""
    return "/tokenizer" if spec.tokenizer and spec.tokenizer != spec.model else None


def _quantize_step(spec: ServingSpec, flow: str, image: str, algo: str | None, kv_fp8: bool,
                   native: dict[str, Any]) -> Step:
    calib = [] if native.get("calib_size") is None else ["--calib_size", str(int(native["calib_size"]))]
    if flow == "engine":
        # examples/quantization/quantize.py (0.18 .. 1.3.0rc20; /app/tensorrt_llm/examples in the
        # release image, docker/Dockerfile.multi `COPY examples examples`). --qformat full_prec
        # converts without quantizing, so every engine goes through the same ModelOpt exporter.
        argv = ["python3", "/app/tensorrt_llm/examples/quantization/quantize.py", "--model_dir", MODEL_DIR,
                "--output_dir", f"{WORK_DIR}/checkpoint",
                "--qformat", SCHEMES[algo].qformat if algo else "full_prec"]
        if spec.dtype != "auto":
            argv += ["--dtype", spec.dtype]
        if kv_fp8:
            argv += ["--kv_cache_dtype", "fp8"]
        if spec.tensor_parallel != 1:
            argv += ["--tp_size", str(spec.tensor_parallel)]
        if native.get("calib_dataset"):
            argv += ["--calib_dataset", str(native["calib_dataset"])]
        return Step("quantize", image, tuple(argv + calib))
    # PyTorch flow: NVIDIA/Model-Optimizer examples/llm_ptq/hf_ptq.py exports a unified HF checkpoint
    # (hf_quant_config.json) that trtllm-serve loads directly (features/quantization.md, 1.0.0).
    # --kv_cache_qformat is always explicit: newer ModelOpt defaults to fp8_cast.
    argv = ["python3", f"{MODELOPT_DIR}/examples/llm_ptq/hf_ptq.py", "--pyt_ckpt_path", MODEL_DIR,
            "--qformat", SCHEMES[algo].qformat, "--kv_cache_qformat", "fp8" if kv_fp8 else "none",
            "--export_path", f"{WORK_DIR}/quantized", "--export_fmt", "hf"]
    if spec.tensor_parallel != 1:
        argv += ["--inference_tensor_parallel", str(spec.tensor_parallel)]
    if native.get("calib_dataset"):
        argv += ["--dataset", str(native["calib_dataset"])]
    return Step("quantize", str(native.get("quantize_image") or image), tuple(argv + calib), mounts_modelopt=True)


def _flags(pairs: dict[str, Any]) -> list[str]:
    """{"--max_batch_size": 8, "--x": None} -> ["--max_batch_size", "8"] (None = leave the default)."""
    out: list[str] = []
    for flag, value in pairs.items():
        if value is not None:
            out += [flag, str(value)]
    return out


def _build_step(spec: ServingSpec, image: str, native: dict[str, Any]) -> Step:
    # trtllm-build (tensorrt_llm/commands/build.py; 0.18 .. 1.3.0rc20). --max_input_len defaults to
    # 1024, so it follows max_seq_len or longer prompts would be rejected. Paged context FMHA is
    # required for KV-cache reuse and chunked context (PluginConfig flag of add_plugin_argument).
    argv = ["trtllm-build", "--checkpoint_dir", f"{WORK_DIR}/checkpoint", "--output_dir", f"{WORK_DIR}/engine"]
    argv += _flags({"--max_batch_size": spec.max_num_seqs, "--max_num_tokens": spec.max_num_batched_tokens,
                    "--max_seq_len": spec.max_model_len, "--max_input_len": spec.max_model_len,
                    "--tokens_per_block": spec.block_size})
    if spec.prefix_caching or spec.chunked_prefill:
        argv += ["--use_paged_context_fmha", "enable"]
    if spec.tensor_parallel != 1:
        argv += ["--workers", str(spec.tensor_parallel)]
    for k, v in (native.get("build_args") or {}).items():
        argv += ["--" + str(k).lstrip("-")] + ([] if v is True else [str(v)])
    return Step("build", image, tuple(argv))


def _pytorch_llm_args(spec: ServingSpec, v: Version, kv_fp8: bool, notes: list[str]) -> dict[str, Any]:
    """LlmArgs fields (llmapi/llm_args.py; identical names in the YAML and tensorrt_llm.LLM kwargs)."""
    a: dict[str, Any] = {}
    if spec.dtype != "auto":
        a["dtype"] = spec.dtype
    for name, value in (("max_batch_size", spec.max_num_seqs), ("max_num_tokens", spec.max_num_batched_tokens),
                        ("max_seq_len", spec.max_model_len)):
        if value is not None:
            a[name] = value
    if spec.tensor_parallel != 1:
        a["tensor_parallel_size"] = spec.tensor_parallel
    if spec.chunked_prefill is not None:
        a["enable_chunked_prefill"] = spec.chunked_prefill
    kv = _kv_cache_config(spec, kv_fp8, notes)
    if spec.block_size is not None or spec.kv_cache_memory_bytes is not None:
        if v < V_KV_TOKENS_PER_BLOCK:
            opt = "block_size" if spec.block_size is not None else "kv_cache_memory_bytes"
            raise _unsupported(f"{opt} with {v}", "KvCacheConfig.tokens_per_block/max_gpu_total_bytes are "
                               f"only verified from {V_KV_TOKENS_PER_BLOCK}",
                               "gpu_memory_utilization" if opt != "block_size" else f"trtllm.version>={V_KV_TOKENS_PER_BLOCK}")
        if spec.block_size is not None:
            kv["tokens_per_block"] = spec.block_size
        if spec.kv_cache_memory_bytes is not None:
            kv["max_gpu_total_bytes"] = spec.kv_cache_memory_bytes
    if kv:
        a["kv_cache_config"] = kv
    if spec.enforce_eager:
        a["cuda_graph_config"] = None  # YAML null: no CUDA graphs (CudaGraphConfig, 1.0)
    if spec.load_format == "dummy":
        a["load_format"] = "dummy"
    elif spec.load_format == "safetensors":
        raise _unsupported("load_format=safetensors", "LlmArgs.load_format is auto|dummy", "load_format=auto")
    return a


def _kv_cache_config(spec: ServingSpec, kv_fp8: bool, notes: list[str]) -> dict[str, Any]:
    kv: dict[str, Any] = {}
    if spec.gpu_memory_utilization is not None:
        kv["free_gpu_memory_fraction"] = spec.gpu_memory_utilization
        notes.append("gpu_memory_utilization -> kv_cache_config.free_gpu_memory_fraction: TRT-LLM takes the "
                     "fraction of memory FREE after weights for the KV cache, vLLM a fraction of total memory")
    if spec.prefix_caching is not None:
        kv["enable_block_reuse"] = spec.prefix_caching
    if kv_fp8:
        kv["dtype"] = "fp8"
    return kv


def _engine_runtime(spec: ServingSpec, v: Version, not_applicable: dict[str, Any]) -> dict[str, Any]:
    for opt, bad in (("load_format", spec.load_format != "auto"), ("kv_cache_memory_bytes", spec.kv_cache_memory_bytes)):
        if bad:
            raise _unsupported(f"{opt} in the engine flow", "trtllm-serve has no such option for engines",
                               "gpu_memory_utilization" if opt != "load_format" else "trtllm.flow=pytorch")
    if spec.enforce_eager is not None:
        not_applicable["enforce_eager"] = spec.enforce_eager  # a TensorRT engine has no eager mode
    a: dict[str, Any] = {}
    if v >= V_PYTORCH_DEFAULT:
        if spec.prefix_caching is not None:
            a["kv_cache_config"] = {"enable_block_reuse": spec.prefix_caching}
        if spec.chunked_prefill is not None:
            a["enable_chunked_prefill"] = spec.chunked_prefill
    elif spec.prefix_caching or spec.chunked_prefill:
        opt = "prefix_caching" if spec.prefix_caching else "chunked_prefill"
        raise _unsupported(f"{opt} with {v}", "an LLM-API options file for trtllm-serve is only "
                           "verified from 1.0.0 (docs 1.0.0: 'Using extra_llm_api_options')", "trtllm.version>=1.0.0")
    return a


def _serve_argv(spec: ServingSpec, flow: str, v: Version, model: str, llm_args: dict[str, Any]) -> tuple[str, ...]:
    # trtllm-serve (tensorrt_llm/commands/serve.py). --kv_cache_free_gpu_memory_fraction is the 0.18
    # name and stays an alias of --free_gpu_memory_fraction in 1.x. Host 0.0.0.0 is inside the
    # container only; the manager publishes the port on the host's 127.0.0.1.
    argv = ["trtllm-serve", model]
    tok = _tokenizer_dir(spec)
    if flow == "engine":
        argv += ["--tokenizer", tok or MODEL_DIR]
        if v >= V_PYTORCH_DEFAULT:
            argv += ["--backend", "tensorrt"]  # 1.x defaults to pytorch
    elif tok:
        argv += ["--tokenizer", tok]
    argv += ["--host", "0.0.0.0", "--port", str(SERVE_PORT)]
    if flow == "engine":
        argv += _flags({"--max_batch_size": spec.max_num_seqs, "--max_num_tokens": spec.max_num_batched_tokens,
                        "--kv_cache_free_gpu_memory_fraction": spec.gpu_memory_utilization,
                        "--tp_size": spec.tensor_parallel if spec.tensor_parallel != 1 else None})
    if llm_args:
        argv += ["--config" if v >= V_CONFIG_ALIAS else "--extra_llm_api_options", LLM_ARGS_FILE]
    return tuple(argv)


def trtllm_plan(spec: ServingSpec, *, compute_capability: str | None = None, gpu_name: str | None = None,
                checkpoint_quant: str | None = None) -> TrtllmPlan:
    """The whole pipeline for one spec. ``compute_capability``/``gpu_name``: the GPU it will run on
    (native options win); ``checkpoint_quant``: QuantAlgo the checkpoint already carries, if any."""
    native = spec.native_for("trtllm")
    unknown = sorted(set(native) - set(CONTROL_KEYS))
    if unknown:
        raise _unsupported(f"native trtllm.{unknown[0]}", "not an option of this backend",
                           "one of " + ", ".join(CONTROL_KEYS) + " (LlmArgs fields go in trtllm.llm_args)")
    v, image = version_and_image(native)
    flow = choose_flow(v, native.get("flow"))
    cc_text = native.get("compute_capability", compute_capability)
    cc = parse_cc(cc_text) if cc_text is not None else None
    gpu = native.get("gpu_name", gpu_name)
    algo = resolve_quant(spec, native)
    notes = check_quant(algo, flow, v, cc, checkpoint_quant)
    kv_fp8 = _kv_fp8(spec, flow, cc)
    not_applicable: dict[str, Any] = {"seed": spec.seed}  # TRT-LLM seeds per request (SamplingParams.seed)
    steps: list[Step] = []
    if flow == "engine":
        steps = [_quantize_step(spec, flow, image, algo, kv_fp8, native), _build_step(spec, image, native)]
        llm_args = _engine_runtime(spec, v, not_applicable)
        model = f"{WORK_DIR}/engine"
    else:
        if algo is not None and checkpoint_quant is None:
            steps = [_quantize_step(spec, flow, image, algo, kv_fp8, native)]
            # the exported checkpoint carries its KV-cache quantization; the YAML repeats it anyway
        model = f"{WORK_DIR}/quantized" if steps else MODEL_DIR
        llm_args = _pytorch_llm_args(spec, v, kv_fp8, notes)
    if native.get("build_args") and flow != "engine":
        raise _unsupported("trtllm.build_args", "the pytorch flow builds no engine", "trtllm.llm_args")
    llm_args.update(native.get("llm_args") or {})
    return TrtllmPlan(version=str(v), image=image, flow=flow, quant=algo, steps=tuple(steps), llm_args=llm_args,
                      serve_argv=_serve_argv(spec, flow, v, model, llm_args), serve_model=model,
                      compute_capability=_cc_str(cc) if cc else None, gpu_name=gpu, notes=tuple(notes),
                      not_applicable=not_applicable)

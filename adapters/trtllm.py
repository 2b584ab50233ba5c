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
directory (a fresh engine-cache temp dir, see backends/models/engine_cache.py) at WORK_DIR, the per-run
LlmArgs YAML at CONFIG_DIR.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target
from adapters.trtllm_facts import ReleaseFacts, facts_for, modelopt_ptq_script
from adapters.trtllm_options import spec_option_table
from adapters.trtllm_support import (  # noqa: F401  (SCHEMES, parse_version: also public from here)
    SCHEMES, V_CONFIG_ALIAS, V_KV_TOKENS_PER_BLOCK, V_PYTORCH_DEFAULT, _cc_str, _kv_fp8, _unsupported,
    check_quant, checkpoint_quant, choose_flow, parse_cc, parse_version, resolve_quant, version_and_image,
)

MODEL_DIR, WORK_DIR, CONFIG_DIR, MODELOPT_DIR = "/model", "/work", "/config", "/opt/Model-Optimizer"
SERVE_PORT = 8000  # inside the container; published on 127.0.0.1 by the container manager
LLM_ARGS_FILE = f"{CONFIG_DIR}/llm_args.yaml"


# Keys of spec.native["trtllm"] that steer this adapter; anything else is an error (never dropped).
CONTROL_KEYS = ("version", "image", "flow", "quant", "compute_capability", "gpu_name", "calib_size",
                "calib_dataset", "modelopt_dir", "llm_args", "build_args", "quantize_image", "gpus",
                "detokenize", "step_timeout_s", "modelopt_version")


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
    modelopt_version: str | None = None  # the Model-Optimizer checkout the quantize step needs
    spec_options: dict[str, Any] = field(default_factory=dict)  # spec option -> what upstream does with it

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
            "spec_options": self.spec_options, "facts": self.facts_summary(),
            "executed_here": "never: TensorRT-LLM has not been run on these machines",
        }

    def facts_summary(self) -> dict[str, Any]:
        f = facts_for(self.version)
        if f is None:
            return {"sheet": None, "note": f"no fact sheet for TensorRT-LLM {self.version}: its flags and "
                    "fields are not checked against upstream source"}
        return {"sheet": f"adapters/facts/trtllm-{f.release}.yaml", "sources": f.sources(),
                "stream_chunk_ids": f.chunk_id, "completions_logprobs": f.completions_logprobs,
                "metrics": f.raw["metrics"], "modelopt_checkout": self.modelopt_version}

    def _step(self, name: str) -> list[str] | None:
        return next((list(s.argv) for s in self.steps if s.name == name), None)


def _tokenizer_dir(spec: ServingSpec) -> str | None:
    """Container path of a separate tokenizer (mounted at /tokenizer by the backend)."""
    return "/tokenizer" if spec.tokenizer and spec.tokenizer != spec.model else None


def _qformat(algo: str | None) -> str:
    """The producer's --qformat (``full_prec``: convert without quantizing)."""
    q = SCHEMES[algo].qformat if algo else "full_prec"
    if q is None:  # refused before a plan gets here (a scheme only a pre-quantized checkpoint has)
        raise UnsupportedSpecError("trtllm", f"quantization={algo}", "no producer makes this checkpoint type",
                                   "a pre-quantized checkpoint as --model")
    return q


def _quantize_step(spec: ServingSpec, flow: str, image: str, algo: str | None, kv_fp8: bool,
                   native: dict[str, Any], modelopt_version: str | None = None) -> Step:
    calib = [] if native.get("calib_size") is None else ["--calib_size", str(int(native["calib_size"]))]
    if flow == "engine":
        # examples/quantization/quantize.py (0.18 .. 1.3.0rc20; /app/tensorrt_llm/examples in the
        # release image, docker/Dockerfile.multi `COPY examples examples`). --qformat full_prec
        # converts without quantizing, so every engine goes through the same ModelOpt exporter.
        argv = ["python3", "/app/tensorrt_llm/examples/quantization/quantize.py", "--model_dir", MODEL_DIR,
                "--output_dir", f"{WORK_DIR}/checkpoint",
                "--qformat", _qformat(algo)]
        if spec.dtype != "auto":
            argv += ["--dtype", spec.dtype]
        if kv_fp8:
            argv += ["--kv_cache_dtype", "fp8"]
        if spec.tensor_parallel != 1:
            argv += ["--tp_size", str(spec.tensor_parallel)]
        if native.get("calib_dataset"):
            argv += ["--calib_dataset", str(native["calib_dataset"])]
        return Step("quantize", image, tuple(argv + calib))
    # PyTorch flow: NVIDIA/Model-Optimizer's hf_ptq.py exports a unified HF checkpoint
    # (hf_quant_config.json) that trtllm-serve loads directly (features/quantization.md, 1.0.0). Its
    # path depends on the ModelOpt version (examples/llm_ptq before 0.46, examples/hf_ptq from 0.46);
    # the version is the one the TensorRT-LLM release pins (its fact sheet) unless overridden.
    # --kv_cache_qformat is always explicit: newer ModelOpt defaults to fp8_cast.
    script = modelopt_ptq_script(modelopt_version or "0.0")
    argv = ["python3", f"{MODELOPT_DIR}/{script}", "--pyt_ckpt_path", MODEL_DIR,
            "--qformat", _qformat(algo), "--kv_cache_qformat", "fp8" if kv_fp8 else "none",
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
    # trtllm-serve's GET /metrics drains the executor's iteration stats, which the PyTorch executor
    # only records with enable_iter_perf_stats (TorchLlmArgs, default false; no trtllm-serve flag
    # sets it): without it every read is [] and the per-level server metrics would be empty.
    a["enable_iter_perf_stats"] = True
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
        # every KV setting in the YAML: trtllm-serve builds the YAML's kv_cache_config as a whole
        # KvCacheConfig that replaces the command line's (llmapi/llm_args.py
        # update_llm_args_with_extra_dict), so a CLI --kv_cache_free_gpu_memory_fraction next to it
        # would silently fall back to the default 0.9.
        kv: dict[str, Any] = {}
        if spec.gpu_memory_utilization is not None:
            kv["free_gpu_memory_fraction"] = spec.gpu_memory_utilization
        if spec.prefix_caching is not None:
            kv["enable_block_reuse"] = spec.prefix_caching
        if kv:
            a["kv_cache_config"] = kv
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
        # 0.x takes the KV fraction on the command line; 1.x gets it in the YAML (_engine_runtime)
        argv += _flags({"--max_batch_size": spec.max_num_seqs, "--max_num_tokens": spec.max_num_batched_tokens,
                        "--kv_cache_free_gpu_memory_fraction":
                            spec.gpu_memory_utilization if v < V_PYTORCH_DEFAULT else None,
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
    facts = facts_for(v)
    modelopt = _modelopt_version(native, facts)
    if flow == "engine":
        steps = [_quantize_step(spec, flow, image, algo, kv_fp8, native), _build_step(spec, image, native)]
        llm_args = _engine_runtime(spec, v, not_applicable)
        model = f"{WORK_DIR}/engine"
    else:
        if algo is not None and checkpoint_quant is None:
            steps = [_quantize_step(spec, flow, image, algo, kv_fp8, native, modelopt)]
            # the exported checkpoint carries its KV-cache quantization; the YAML repeats it anyway
        model = f"{WORK_DIR}/quantized" if steps else MODEL_DIR
        llm_args = _pytorch_llm_args(spec, v, kv_fp8, notes)
    if native.get("build_args") and flow != "engine":
        raise _unsupported("trtllm.build_args", "the pytorch flow builds no engine", "trtllm.llm_args")
    llm_args.update(native.get("llm_args") or {})
    if flow == "engine" and "enable_iter_perf_stats" not in llm_args:
        notes.append("engine flow: trtllm-serve's /metrics iteration stats are not switched on by this plan "
                     "(enable_iter_perf_stats is a PyTorch-backend field); per-level server metrics may be empty")
    serve_argv = _serve_argv(spec, flow, v, model, llm_args)
    uses_modelopt = any(s.mounts_modelopt for s in steps)
    return TrtllmPlan(version=str(v), image=image, flow=flow, quant=algo, steps=tuple(steps), llm_args=llm_args,
                      serve_argv=serve_argv, serve_model=model,
                      compute_capability=_cc_str(cc) if cc else None, gpu_name=gpu, notes=tuple(notes),
                      not_applicable=not_applicable, modelopt_version=modelopt if uses_modelopt else None,
                      spec_options=spec_option_table(spec, flow, llm_args, serve_argv, not_applicable))


def _modelopt_version(native: dict[str, Any], facts: ReleaseFacts | None) -> str | None:
    """The Model-Optimizer version the quantize step runs: trtllm.modelopt_version, else the
    release's pin (its fact sheet); None when neither is known (the llm_ptq path is then assumed)."""
    text = native.get("modelopt_version", facts.modelopt_version if facts else None)
    if text is None:
        return None
    try:
        Version(str(text))
    except Exception:
        raise _unsupported(f"trtllm.modelopt_version={text}", "not a Model-Optimizer version number",
                           "e.g. trtllm.modelopt_version=0.37.0") from None
    return str(text)


def trtllm_plan_for(spec: ServingSpec, target: Target) -> TrtllmPlan:
    """The plan with the probed facts: the GPU it runs on and what the checkpoint already carries."""
    m = target.machine
    pre = checkpoint_quant(target.model) if target.model.local else None
    return trtllm_plan(spec, compute_capability=m.compute_capability, gpu_name=m.gpu_name, checkpoint_quant=pre)

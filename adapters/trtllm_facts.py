"""Per-release fact sheets of TensorRT-LLM (adapters/facts/trtllm-<release>.yaml) and the ModelOpt
script path per ModelOpt version. Pure reads of data files in this repository, no network.

A sheet holds what the plan emits or relies on (trtllm-serve options, LlmArgs/KvCacheConfig fields
and defaults, the streaming postprocessor's chunk ids and usage, /metrics vs /prometheus/metrics, the
ModelOpt pin), each with the upstream file it was read from. Releases without a sheet get None:
the plan then says its flags are unverified instead of guessing from a neighbour.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml
from packaging.version import Version

# package data, read like a module is imported (adapters/ does no other I/O)
FACTS_DIR = resources.files("adapters") / "facts"
# NVIDIA/Model-Optimizer renamed examples/llm_ptq to examples/hf_ptq (#1759, first tagged in 0.46.0,
# which keeps llm_ptq as a symlink); the symlink was removed after 0.46 (#2182). Read from the tags.
MODELOPT_HF_PTQ_FROM = Version("0.46.0")


@dataclass(frozen=True)
class ReleaseFacts:
    release: str
    serve_options: frozenset[str]
    llm_args: dict[str, Any]  # LlmArgs field -> upstream default (as written in the sheet)
    kv_cache_config: dict[str, Any]
    chunk_id: str  # "fresh-per-chunk" | "per-request"
    completions_logprobs: bool
    modelopt_version: str
    raw: dict[str, Any]

    def sources(self) -> dict[str, str]:
        r = self.raw
        return {"trtllm-serve": r["trtllm_serve"]["source"], "LlmArgs": r["llm_args"]["source"],
                "KvCacheConfig": r["kv_cache_config"]["source"], "streaming": r["streaming"]["source"],
                "metrics": r["metrics"]["source"], "modelopt pin": r["modelopt"]["pin_read"]}


def modelopt_ptq_script(modelopt_version: str) -> str:
    """hf_ptq.py's path inside a Model-Optimizer checkout of that version."""
    sub = "hf_ptq" if Version(modelopt_version) >= MODELOPT_HF_PTQ_FROM else "llm_ptq"
    return f"examples/{sub}/hf_ptq.py"


@functools.lru_cache(maxsize=None)
def _load(name: str) -> ReleaseFacts | None:
    path = FACTS_DIR.joinpath(f"trtllm-{name}.yaml")
    if not path.is_file():
        return None
    r = yaml.safe_load(path.read_text())
    s = r["streaming"]
    return ReleaseFacts(release=str(r["release"]), serve_options=frozenset(r["trtllm_serve"]["options"]),
                        llm_args=dict(r["llm_args"]["fields"]), kv_cache_config=dict(r["kv_cache_config"]["fields"]),
                        chunk_id=str(s["completion_chunk_id"]), completions_logprobs=bool(s["completions_logprobs"]),
                        modelopt_version=str(r["modelopt"]["version"]), raw=r)


def sheets() -> list[str]:
    return sorted(p.name.removeprefix("trtllm-").removesuffix(".yaml") for p in FACTS_DIR.iterdir()
                  if p.name.startswith("trtllm-") and p.name.endswith(".yaml"))


def facts_for(v: Version | str) -> ReleaseFacts | None:
    """The sheet of this release: an exact ``trtllm-X.Y.Z`` sheet, else the ``X.Y`` series sheet
    for a final release of that series (patch releases of one series share the serve/LlmArgs surface)."""
    v = Version(str(v))
    exact = _load(str(v))
    if exact is not None:
        return exact
    if v.is_prerelease or v.is_devrelease:
        return None
    return _load(f"{v.major}.{v.minor}") or _load(f"{v.major}.{v.minor}.0")

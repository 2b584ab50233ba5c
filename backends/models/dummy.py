"""Places a dummy-weight run's config-only model copy (adapters.quant.DummyCopy) in the cache.

Content-addressed under the cache (the directory name carries the config's digest), written
atomically, reused across runs. Only tokenizer/generation files and the new config.json are
written; load_format=dummy makes vLLM fill random weights in the quantized layout.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from adapters.quant import DummyCopy
from adapters.vllm import VllmPlan
from backends.models.tiny import cache_root


def dummy_dir(copy: DummyCopy) -> Path:
    """Where the copy lives (whether or not it has been written yet)."""
    return cache_root() / "dummy-quant" / copy.dir_name


def place(copy: DummyCopy) -> Path:
    out = dummy_dir(copy)
    if (out / "config.json").is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in Path(copy.source).iterdir():  # tokenizer + generation config; no weights
        if f.is_file() and f.suffix in (".json", ".txt", ".jinja", ".model") and f.name != "config.json":
            shutil.copy2(f, tmp / f.name)
    (tmp / "config.json").write_text(copy.config_text)
    (tmp / "llm_compare_dummy.json").write_text(json.dumps(
        {"source": str(Path(copy.source).resolve()), "scheme": copy.scheme, "weights": "dummy (random)"}))
    try:
        os.replace(tmp, out)
    except OSError:  # another process won the race: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def engine_args(plan: VllmPlan, write: bool = True) -> dict[str, Any]:
    """The plan's engine args with its dummy copy placed (``write=False``: only named, for plans)."""
    if plan.dummy_copy is None:
        return dict(plan.engine_args)
    return plan.with_model(str(place(plan.dummy_copy) if write else dummy_dir(plan.dummy_copy)))

"""The model a run is given, checked before anything starts or is written: a local ``--model``
must be a checkpoint directory whose config.json is a JSON object, and a GGUF served as is
(``--native llamacpp.gguf=FILE``) must be a GGUF file. Without these checks the engines started,
the run directory was written and the engine's own traceback arrived minutes later."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.fsutil import open_user_file, parse_user_json, read_user_text

GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (ggml's gguf.h GGUF_MAGIC)
# a config.json larger than this is not a model config (they are a few kB): refused, not read
MAX_CONFIG_BYTES = 16 << 20
_FIX = "pass a model checkpoint directory (config.json and its weights)"


def check_model_dir(model: str) -> None:
    """``model`` (a local path that exists) is a directory with a readable JSON-object config.json."""
    try:
        st = os.stat(model)
    except OSError:
        return  # missing: the caller's own message (no hub downloads here)
    if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):  # never opened: a pipe would block
        raise UserError(f"--model {model} is not a directory (a device or pipe); {_FIX}")
    if not stat.S_ISDIR(st.st_mode):
        gguf = _is_gguf(model)
        raise UserError(f"--model {model} is a file, not a model directory; "
                        + ("serve a GGUF as is with --native llamacpp.gguf=FILE and --model its checkpoint "
                           "directory (for the tokenizer)" if gguf else _FIX))
    config = Path(model, "config.json")
    if not config.exists():
        raise UserError(f"--model {model} has no config.json, so it is not a model checkpoint; {_FIX}")
    try:
        size = config.stat().st_size
    except OSError:
        size = 0
    if size > MAX_CONFIG_BYTES:
        raise UserError(f"--model {model}: config.json is {size >> 20} MiB, not a model config; {_FIX}")
    data: Any = parse_user_json(read_user_text(config, "--model config"), config, "--model config",
                                "a model's config.json is one JSON object")
    if not isinstance(data, dict):
        raise UserError(f"--model config {config} is a JSON {type(data).__name__}, not an object; "
                        "a model's config.json is one JSON object")


def _is_gguf(path: str | os.PathLike[str]) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def check_gguf(option: str, path: str) -> None:
    """``option`` (``--native llamacpp.gguf``) names a readable GGUF file (its first 4 bytes only)."""
    with open_user_file(path, option, "pass a .gguf file") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise UserError(f"{option} {path} is not a GGUF file (it does not start with 'GGUF'); "
                        "pass a file written by llama.cpp's convert_hf_to_gguf.py or llama-quantize")

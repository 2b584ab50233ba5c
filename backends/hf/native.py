"""transformers' side of ``--native hf.KEY=VALUE``: the options are passed through as
``from_pretrained`` keywords or config attributes, so an unknown key is checked here against the
installed transformers and the model's config (else it would fail only in the model's
``__init__``)."""
from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

LABEL = "a transformers from_pretrained keyword or config attribute of the model"


def known_keys(model: str) -> set[str] | None:
    """``from_pretrained``'s own keywords (its signature and the ones it pops from kwargs) and the
    model's config attributes; None when either cannot be known here."""
    if importlib.util.find_spec("transformers") is None or not (Path(model) / "config.json").is_file():
        return None
    try:
        from transformers import AutoConfig, PreTrainedModel

        fn = PreTrainedModel.from_pretrained
        keys = set(inspect.signature(fn).parameters) - {"kwargs", "model_args", "pretrained_model_name_or_path"}
        popped = set(re.findall(r"kwargs\.pop\(\s*[\"'](\w+)[\"']", inspect.getsource(fn)))
        config = AutoConfig.from_pretrained(model)
    except Exception:  # transformers' layout changed, or the config does not load: not checked here
        return None
    if not popped:
        return None
    return keys | popped | set(config.to_dict())




def checked_keys(model: str, options: dict[str, Any]) -> tuple[str, set[str] | None]:
    """(what a key of this section is, the keys the installed framework takes or None)."""
    return LABEL, known_keys(model)

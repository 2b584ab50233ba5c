"""`--native vllm.KEY` is checked against the installed vLLM's engine arguments, read from its
source (backends/vllm/native.py): the same set as the dataclass's fields when vLLM is imported."""
from __future__ import annotations

import importlib.util

import pytest

from backends.vllm import native


@pytest.mark.slow  # imports vLLM (~10 s of torch and platform probing)
def test_engine_arguments_read_from_source_are_the_imported_dataclass_fields():
    pytest.importorskip("vllm")
    from_source = native._keys_from_source(importlib.util.find_spec("vllm"))
    assert from_source is not None and {"max_num_seqs", "block_size", "enable_prefix_caching"} <= from_source
    assert from_source == native._keys_from_import()

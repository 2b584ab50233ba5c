"""hf-cb's ContinuousBatchingConfig arguments as the installed transformers names them (no engine)."""
from __future__ import annotations

import pytest

from adapters.hf_cb import hf_cb_plan
from adapters.spec import ServingSpec
from backends.hf.cb_engine import cb_kwargs, config_fields

# transformers 5.17.0's ContinuousBatchingConfig fields (transformers/generation/configuration_utils.py
# of that release): the cache block is ``block_size`` and there is no ``auto_switch_to_flash``
FIELDS_5_17 = {"block_size", "num_blocks", "max_batch_tokens", "max_memory_percent", "max_requests_per_batch",
               "max_blocks_per_request", "allow_block_sharing", "use_async_batching", "use_cuda_graph",
               "q_padding_interval_size", "kv_padding_interval_size", "varlen_compile_config",
               "decode_compile_config", "default_compile_level", "scheduler_type", "safety_margin",
               "return_logprobs", "seed", "cpu_offload_space", "cpu_offload_space_safety_threshold",
               "max_queue_size", "per_request_processors", "drop_unsupported_processors",
               "disable_nccl_graph_mixing", "cpu_group_timeout", "use_default_compile_configs", "max_cached_graphs"}


def _plan(tiny_model):
    spec = ServingSpec(model=str(tiny_model), dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20)
    from backends.models.probe import probe_model
    from adapters.target import Machine, Target

    return hf_cb_plan(spec, Target(probe_model(str(tiny_model)), Machine("cpu")))


def test_the_installed_version_takes_the_plan_as_is(tiny_model):
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    cb = dict(_plan(tiny_model).cb_config)
    kwargs, notes = cb_kwargs(cb, config_fields(ContinuousBatchingConfig), "installed")
    assert kwargs == cb and notes == []
    assert ContinuousBatchingConfig(**kwargs).page_size == cb["page_size"]


def test_an_earlier_version_gets_its_own_names_and_says_what_it_cannot_be_told(tiny_model):
    cb = dict(_plan(tiny_model).cb_config)
    kwargs, notes = cb_kwargs(cb, FIELDS_5_17, "5.17.0")
    assert "page_size" not in kwargs and kwargs["block_size"] == cb["page_size"]
    assert "auto_switch_to_flash" not in kwargs
    assert notes and "5.17.0 has no ContinuousBatchingConfig.auto_switch_to_flash" in notes[0]
    with pytest.raises(ValueError, match="has no 'max_queue_depth'.*drop native hf-cb.max_queue_depth"):
        cb_kwargs({**cb, "max_queue_depth": 3}, FIELDS_5_17, "5.17.0")

"""OpenVINO GenAI: the backend (backend.py), the ContinuousBatchingPipeline in its own engine
process (engine.py) and the checkpoint's one-time OpenVINO IR export (export.py);
adapters/openvino.py is the pure plan."""
from __future__ import annotations

from backends.registry import BackendEntry, register
from core.records import Capabilities

CAPS = Capabilities(forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
                    notes=("model exported to OpenVINO IR by optimum-intel (cached); weights compressed by "
                           "NNCF at export for int8/int4",))

register(BackendEntry(
    name="openvino", summary="OpenVINO GenAI (ContinuousBatchingPipeline in its own engine process, CPU), model exported once",
    factory="backends.openvino.backend:OpenVINOBackend", plan="backends.openvino.backend:plan", resolve="adapters.openvino:openvino_plan",
    requires=("openvino_genai",), extra="pip install 'llm-compare[openvino]' and bash scripts/setup.d/45-openvino.sh",
    check="backends.openvino.backend:check", capabilities=CAPS, default_rank=2, heldout="backends.openvino.heldout:HELDOUT",
    cache_listing="backends.openvino.export:cache_row",
))

"""``fake``: a deterministic fake engine, a TEST INSTRUMENT for orchestration logic (no model runs).

``compare run --backends fake@ttft=50ms+itl=10ms`` streams records on a configured timing model
(backends/fake/model.py: TTFT, ITL, sequence slots, failures, stalls, a slow or failing start).
Its results say they measure nothing: the backend's description and capabilities name it a
test instrument.
"""
from __future__ import annotations

from backends.registry import BackendEntry, register
from core.records import Capabilities

CAPS = Capabilities(
    forced_output_length=True, token_id_prompts=True, logprobs=False, continuous_batching=True,
    notes=("TEST INSTRUMENT: a deterministic timing model, no model runs; its numbers measure nothing",),
)

register(BackendEntry(
    name="fake", summary="TEST INSTRUMENT: a fake engine on a deterministic timing model (no model runs)",
    factory="backends.fake.engine:FakeBackend", plan="backends.fake.engine:plan",
    notes=("fake@ttft=50ms+itl=10ms+seqs=4+fail=0.1+stall=2s+start=5s+stop=1s+die_after=20 "
           "(or --native fake.KEY=VALUE); for testing the orchestration, never for numbers",),
    capabilities=CAPS, tuning="backends.fake.tuning:SPACE",
))

"""Typed tune.json: what ``compare tune`` writes (compare/cli/commands/tune.py, compare/tuning/).

Every write goes through ``TuneResults`` and ``compare run --tuned`` reads it back through the
same model, so a tune whose layout drifted fails with one line, not inside the runner. The JSON
Schema is checked in next to this file (tune.schema.json; ``python -m core.results.schema``).
A trial's ``config`` stays open: it is engine-native (compare/tuning/space.py names the knobs).
Probe rows and trials are open as well: the search adds bookkeeping keys (seed offsets, whether a
load was held) that readers do not use.
"""
from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import ConfigDict, Field

from core.results.base import Closed as _Closed, Open as _Open
from core.results.max_rate import LoadSearchInfo
from core.results.models import HardwareInfo, SpecInfo, WorkloadInfo
from core.results.slo import SloCheck, SloLimit

TUNE_SCHEMA: Final = "llm-compare-tune/1"


class ProbeRow(_Open):
    """One load probe, compacted (compare/tuning/probe.py ``compact``)."""

    load: float | str | None = None
    slo_met: bool = False
    ok: int = 0
    requests: int = 0
    failed: int = 0
    output_tok_s: float = 0.0
    req_s: float = 0.0
    goodput_req_s: float = 0.0
    slo_attainment: float = 0.0
    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None
    slo_checks: dict[str, SloCheck] = Field(default_factory=dict)


class GoodputCI(_Closed):
    mean: float
    lo: float
    hi: float
    n: int


class Trial(_Open):
    """One config tried (compare/tuning/trial.py)."""

    config: dict[str, Any] = Field(default_factory=dict)  # engine-native knobs: open by design
    label: str | None = None
    status: str | None = None  # measured | rejected | start_failed | same as default ...
    reason: str | None = None
    feasible: bool | None = None
    goodput: float | None = None  # the highest load that held the SLO
    bracket: list[float | None] | None = None  # [held, missed]; missed None: held up to the top
    goodput_req_s: GoodputCI | None = None
    slo_held_repeats: str | None = None
    at_goodput: ProbeRow | None = None
    probes: list[ProbeRow] = Field(default_factory=list)
    cached: bool | None = None


class TuneGain(_Closed):
    verdict: str
    ratio: float | None = None
    beyond_ci: bool | None = None


class TunedBackend(_Closed):
    backend: str
    trials: list[Trial] = Field(default_factory=list)
    best: Trial | None = None
    default: Trial | None = None
    frontier: dict[str, list[ProbeRow]] = Field(default_factory=dict)  # latency metric -> Pareto front
    engine_starts: int = 0
    cache_hits: int = 0
    gain: TuneGain | None = None


class TuneResults(_Closed):
    """tune.json."""

    schema_: Literal["llm-compare-tune/1"] = Field(TUNE_SCHEMA, alias="schema")
    slo: list[SloLimit] = Field(default_factory=list)
    load_search: LoadSearchInfo
    spec: SpecInfo = Field(default_factory=SpecInfo)
    workload: WorkloadInfo = Field(default_factory=WorkloadInfo)
    hardware: HardwareInfo = Field(default_factory=HardwareInfo)
    budget: int
    search_seed: int | None = None
    status: str  # running | complete
    backends: list[TunedBackend] = Field(default_factory=list)

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def tune_json_text(tune: TuneResults) -> str:
    """tune.json's text: the fields that were given, NaN as null, indented."""
    return tune.model_dump_json(indent=2, by_alias=True, exclude_unset=True) + "\n"

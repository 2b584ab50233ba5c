"""Typed regression baseline: what ``compare baseline save`` writes and ``compare check`` reads
(the numbers are made by compare/analysis/gate.py ``make_baseline``).

A baseline is validated against ``Baseline`` before it is written and after it is read, so one
whose layout drifted is refused with one line. The JSON Schema is checked in next to this file
(baseline.schema.json; ``python -m core.results.schema``). Open by design: ``fingerprint``'s
per-GPU entries and a backend's engine-resolved config and description extras (engine-specific).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.results.models import SloLimit, SpecInfo, WorkloadInfo

BASELINE_FORMAT = "llm-compare-baseline"


class _Closed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MachineFingerprint(_Closed):
    hostname_hash: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    cpu_affinity: int | None = None
    memory_bytes: int | None = None
    os: str | None = None
    python: str | None = None


class BackendFingerprint(_Closed):
    framework: str | None = None
    version: str | None = None
    spec: SpecInfo = Field(default_factory=SpecInfo)
    resolved: Any = None  # the engine's resolved native config: engine-specific
    extra: dict[str, Any] | None = None  # the description's extras: engine-specific


class Fingerprint(_Closed):
    """What could explain a change: machine, software versions, each backend's engine and spec."""

    machine: MachineFingerprint = Field(default_factory=MachineFingerprint)
    gpus: dict[str, dict[str, Any]] = Field(default_factory=dict)  # "gpu0" -> as the hardware probe saw it
    packages: dict[str, str] = Field(default_factory=dict)
    backends: dict[str, BackendFingerprint] = Field(default_factory=dict)


# backend -> level -> metric -> one value per repeat; "failed" -> failed requests of the level
MetricCell = dict[str, list[float] | int]


class Baseline(_Closed):
    format: Literal["llm-compare-baseline"] = BASELINE_FORMAT
    version: Literal[1] = 1
    name: str
    created_at: str | None = None
    source: str = ""
    run_id: str | None = None
    schema_version: int | None = None  # of the run it was saved from
    workload: WorkloadInfo = Field(default_factory=WorkloadInfo)
    workload_sha256: str | None = None
    levels: list[str] = Field(default_factory=list)
    slo: list[SloLimit] = Field(default_factory=list)
    repeats: int = 0
    fingerprint: Fingerprint = Field(default_factory=Fingerprint)
    metrics: dict[str, dict[str, MetricCell]] = Field(default_factory=dict)


def checked_baseline(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` when it is a baseline as ``Baseline`` declares it; a one-line UserError if not.
    (The gate works on the JSON dict: the model is the contract of the file, checked both ways.)"""
    from pydantic import ValidationError

    from core.errors import UserError
    from core.results.migrate import first_problem

    try:
        Baseline.model_validate(data)
    except ValidationError as e:
        raise UserError(f"{where} is not a valid llm-compare baseline ({first_problem(e)}); save it again "
                        f"with this version (`compare baseline save`)") from None
    return data

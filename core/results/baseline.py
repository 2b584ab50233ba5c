"""Typed regression baseline: what ``compare baseline save`` writes and ``compare check`` reads
(the numbers are made by compare/analysis/gate.py ``make_baseline``).

``make_baseline`` builds a ``Baseline``, the file is its dump, and a file read back is validated
into one (``checked_baseline``), so one whose layout drifted is refused with one line; the gate
works on the model. The JSON Schema is checked in next to this file (baseline.schema.json;
``python -m core.results.schema``). Open by design: a backend's engine-resolved config and
description extras (engine-specific).
"""
from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from core.results.base import Closed as _Closed
from core.results.models import GpuInfo, SpecInfo, WorkloadInfo
from core.results.slo import SloLimit

BASELINE_FORMAT: Final = "llm-compare-baseline"


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
    gpus: dict[str, GpuInfo] = Field(default_factory=dict)  # "gpu0" -> run.json's hardware.gpus[0]
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
    repeats: int = Field(0, ge=0)
    fingerprint: Fingerprint = Field(default_factory=Fingerprint)
    metrics: dict[str, dict[str, MetricCell]] = Field(default_factory=dict)


def checked_baseline(data: dict[str, Any], where: str) -> Baseline:
    """``data`` (a baseline file's JSON) as a ``Baseline``; a one-line UserError when it is not one."""
    from pydantic import ValidationError

    from core.errors import UserError
    from core.results.migrate import first_problem

    try:
        return Baseline.model_validate(data)
    except ValidationError as e:
        raise UserError(f"{where} is not a valid llm-compare baseline ({first_problem(e, Baseline)}); save it again "
                        f"with this version (`compare baseline save`)") from None

"""Regression gate: baselines as JSON files (core/results/baseline.py ``Baseline``), and the check of
new results against one.

A baseline keeps, per backend, load level and metric, the value of every repeat of the run it was
saved from, plus that run's workload identity and environment fingerprint. The gate's threshold
for a metric comes from the repeat-to-repeat noise of the baseline and the candidate (pooled, as in a
two-sample t test):

    threshold = max(floor, t(1 - alpha/m, df) * noise * sqrt(1/n_baseline + 1/n_candidate))

in log space, where noise is the standard deviation of log(value) across each side's repeats
(see _pooled_noise for how few repeats still give usable degrees of freedom, df), m the number
of metrics checked and alpha
the family-wise false-alarm rate (default 5%): a one-sided t test per metric with a Bonferroni
split, so checking more metrics does not raise the false-alarm rate, and a noise estimate from
few repeats (small df) is not trusted more than it deserves. The statistic is the difference of
the mean log values (the geometric-mean ratio); a metric got worse when it moves in the bad
direction (latency up, throughput down) beyond the threshold. With one repeat on both sides there
is no noise estimate and the floor alone decides (said in the output).

Every check also prints what changed in the environment (framework/driver versions, GPU, CPU,
spec), so "what got slower" comes with "what changed".
"""
from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from core.errors import UserError
from core.fsutil import write_json_atomic
from core.records import RequestRecord
from core.results import RunResults, as_run
from core.results.baseline import (
    BASELINE_FORMAT, Baseline, BackendFingerprint, Fingerprint, MachineFingerprint, MetricCell, checked_baseline,
)
from core.results.evolve import evolve
from compare.analysis.stats import METRICS, LevelSample, collect, default_metrics

BASELINE_VERSION = 1
DEFAULT_FLOOR = 0.05
DEFAULT_ALPHA = 0.05  # family-wise false-alarm rate of one `compare check`
OWN_DF_MIN = 4  # a metric's own repeats give its noise from 3 repeats a side (_pooled_noise)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def workload_digest(results_dir: Path) -> str | None:
    """Identity of the exact request list (workload.jsonl), not just of the workload's name."""
    p = Path(results_dir) / "workload.jsonl"
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None


def repeat_values(s: LevelSample, metric: str) -> list[float]:
    """One value of ``metric`` per repeat of one backend at one level."""
    m = METRICS[metric]
    if m.kind == "level":
        v = s.per_repeat.get(m.source)
        return [] if v is None else [float(x) for x in v]
    if m.kind == "token":
        return s.per_token[m.source].per_repeat(m.q)
    out = []
    for row in s.per_request[m.source]:
        row = row[~np.isnan(row)]
        out.append(float(np.percentile(row, m.q)) if row.size else math.nan)
    return out


def fingerprint_of(run: RunResults | dict[str, Any]) -> Fingerprint:
    """What could explain a change: machine, software versions, each backend's engine and spec."""
    run = as_run(run)
    hw = run.hardware
    machine = MachineFingerprint(hostname_hash=hw.hostname_hash, cpu_model=hw.cpu_model, cpu_count=hw.cpu_count,
                                 cpu_affinity=hw.cpu_affinity, memory_bytes=hw.memory_bytes, os=hw.os,
                                 python=hw.python)
    backends = {}
    for name, b in run.backends.items():
        d = b.describe
        backends[name] = BackendFingerprint(framework=d and d.framework, version=d and d.version,
                                            spec=run.spec_for(name).model_dump(exclude_unset=True),
                                            resolved=d.native_config.get("resolved") if d else None,
                                            extra=d.extra if d else None)
    return Fingerprint(machine=machine, gpus={f"gpu{i}": g for i, g in enumerate(hw.gpus)},
                       packages=hw.packages, backends=backends)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): d}


def diff_fingerprints(old: Fingerprint, new: Fingerprint) -> list[str]:
    """One line per value that differs (dotted path: old -> new); a value one side lacks is
    "(absent)" (a baseline saved by an older version records what that version knew)."""
    a, b = _flatten(old.model_dump(exclude_unset=True)), _flatten(new.model_dump(exclude_unset=True))
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}: {a.get(k, '(absent)')} -> {b.get(k, '(absent)')}")
    return out


def make_baseline(run: RunResults | dict[str, Any], records: Iterable[RequestRecord], name: str,
                  workload_sha256: str | None, source: str = "") -> Baseline:
    run = as_run(run)
    samples = collect(run, records)
    metrics = default_metrics(run)
    values: dict[str, dict[str, MetricCell]] = {}
    for (backend, level), s in samples.items():
        cell = values.setdefault(backend, {}).setdefault(level, {})
        for m in metrics:
            if METRICS[m].kind == "level" and METRICS[m].source not in s.per_repeat:
                continue
            cell[m] = [round(v, 6) for v in repeat_values(s, m)]
        cell["failed"] = _failed(run, backend, level)
    # every field given, so that the file (the set fields' dump) holds them all
    return Baseline(format=BASELINE_FORMAT, version=BASELINE_VERSION, name=name,
                    created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), source=source,
                    run_id=run.run_id, schema_version=run.schema_version,
                    workload=run.workload.model_dump(exclude_unset=True), workload_sha256=workload_sha256,
                    levels=run.level_labels, slo=list(run.slo),
                    repeats=max((s.n_repeats for s in samples.values()), default=0),
                    fingerprint=fingerprint_of(run), metrics=values)


def baseline_path(name: str, directory: Path) -> Path:
    if name.endswith(".json") or "/" in name:
        return Path(name)
    if not _NAME.fullmatch(name):
        raise UserError(f"baseline name {name!r} must be letters, digits, '.', '_' or '-' (e.g. vllm-0.32-cpu)")
    return Path(directory) / f"{name}.json"


def save_baseline(baseline: Baseline, directory: Path) -> Path:
    path = baseline_path(baseline.name, directory)
    write_json_atomic(path, baseline.model_dump(exclude_unset=True))
    return path


def load_baseline(name: str, directory: Path) -> Baseline:
    """The baseline ``name`` in ``directory`` (or at the path ``name``); one-line UserError when it is
    missing, not a baseline, or of another layout."""
    path = baseline_path(name, directory)
    if not path.exists() and not path.is_symlink():  # (a symlink loop: the reader below says so)
        known = sorted(p.stem for p in Path(directory).glob("*.json")) if Path(directory).is_dir() else []
        raise UserError(f"baseline {name!r} not found at {path}; save one with `compare baseline save "
                        f"RESULTS --name {name}`" + (f" (known in {directory}: {', '.join(known)})" if known else ""))
    from core.fsutil import read_user_json

    data = read_user_json(path, "baseline", "restore it from git or save the baseline again")
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or data.get("version") != BASELINE_VERSION:
        raise UserError(f"{path} is not a version-{BASELINE_VERSION} llm-compare baseline; save it again "
                        f"with this version (`compare baseline save`)")
    return checked_baseline(data, f"baseline {name} ({path})")


# ---------------------------------------------------------------- the check


@dataclass
class MetricCheck:
    backend: str
    level: str
    metric: str
    baseline: float
    candidate: float
    change: float  # candidate / baseline - 1 (geometric means)
    threshold: float  # relative
    noise: float | None  # std of log values across baseline repeats, pooled over levels
    regression: bool
    improvement: bool
    multiplier: float | None = None  # t quantile applied to noise * sqrt(1/n_b + 1/n_c)

    def line(self, floor: float) -> str:
        m = METRICS[self.metric]
        tag = "REGRESSION" if self.regression else ("faster    " if self.improvement else "ok        ")
        # the threshold is symmetric in log space: -x% for throughput is 1/(1+x) - 1
        bound = 1 / (1 + self.threshold) - 1 if m.higher_is_better else self.threshold
        why = (f"max(floor {floor:.0%}, t {self.multiplier:.2f} x noise {self.noise:.1%} x repeats factor)"
               if self.noise is not None else f"floor {floor:.0%}: no repeat noise in the baseline")
        return (f"{tag} {self.backend} {self.level} {m.label}: {self.baseline:.4g} -> {self.candidate:.4g} "
                f"{m.unit} ({self.change:+.1%}; worse beyond {bound:+.1%} = {why})")


@dataclass
class GateResult:
    checks: list[MetricCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # regressions that are not a metric (failures)
    notes: list[str] = field(default_factory=list)
    env_changes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.problems) or any(c.regression for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressed else 0


def select_backends(baseline: Baseline, names: list[str]) -> Baseline:
    """The baseline restricted to some of its backends (``compare check --backends``: the candidate
    re-ran only those). Unknown names are a usage error naming the ones it has."""
    have = list(baseline.metrics)
    unknown = [n for n in names if n not in have]
    if unknown or not names:
        raise UserError(f"baseline {baseline.name} has no backend {', '.join(unknown) or '(none given)'}: "
                        f"it has {', '.join(have)}")
    fp = baseline.fingerprint
    fp = evolve(fp, backends={k: v for k, v in fp.backends.items() if k in names})
    return evolve(baseline, metrics={k: v for k, v in baseline.metrics.items() if k in names}, fingerprint=fp)


def _failed(run: RunResults, backend: str, level: str) -> int:
    s = run.backends[backend].levels.get(level)
    return int(s.failed) if s else 0


# results schema -> the schema whose numbers it holds (schema 2 typed the file, not the numbers)
_SAME_NUMBERS = {1: 2}


def ensure_comparable(baseline: Baseline, run: RunResults | dict[str, Any], workload_sha256: str | None) -> None:
    """Refuse (UserError) what cannot be compared: another workload, schema or load levels."""
    run = as_run(run)
    base_schema = baseline.schema_version
    if _SAME_NUMBERS.get(base_schema, base_schema) != _SAME_NUMBERS.get(run.schema_version, run.schema_version):
        raise UserError(f"baseline {baseline.name} was saved from results schema "
                        f"{base_schema}, these results are schema "
                        f"{run.schema_version}: re-record the baseline with this version")
    workload = run.workload.model_dump(exclude_unset=True)
    saved = baseline.workload.model_dump(exclude_unset=True)
    if saved != workload or (
            baseline.workload_sha256 and workload_sha256 and baseline.workload_sha256 != workload_sha256):
        changed = sorted(k for k in set(saved) | set(workload) if saved.get(k) != workload.get(k))
        raise UserError(f"these results used a different workload than baseline {baseline.name} "
                        f"({', '.join(changed) or 'request list differs'}): a gate needs the identical "
                        f"request list; re-run with the baseline's workload (--replay its results directory)")
    levels = run.level_labels
    missing = [lv for lv in baseline.levels if lv not in levels]
    if missing:
        raise UserError(f"baseline {baseline.name} measured load levels {', '.join(baseline.levels)} "
                        f"but these results lack {', '.join(missing)}: re-run with the same --concurrency/--rate")
    absent = [b for b in baseline.metrics if b not in run.backends]
    if absent:
        raise UserError(f"baseline {baseline.name} has backend(s) {', '.join(absent)} that these results "
                        f"do not: re-run with --backends {','.join(baseline.metrics)}")


def _log_ss(values: list[float]) -> tuple[float, int]:
    v = np.asarray([x for x in values if x and x > 0 and math.isfinite(x)])
    return (float(np.var(np.log(v), ddof=1)) * (v.size - 1), v.size - 1) if v.size >= 2 else (0.0, 0)


def _pooled_noise(*sides: dict[str, dict[str, Any]], metric: str) -> tuple[float, int] | None:
    """(noise, degrees of freedom) for one metric of one backend, from the repeats of every side
    given (baseline and candidate: the pooled variance of a two-sample t test, so a candidate
    measured on a noisier day widens its own threshold instead of raising false alarms).

    With OWN_DF_MIN or more degrees of freedom of its own (3 repeats a side: 4) a metric is
    tested on its own variance, the textbook two-sample t test: metrics differ in noise by 30x on
    a GPU (output tok/s 0.3% vs TTFT p50 10% over 6 fresh H200 engines), and pooling them held
    throughput to TTFT's threshold (a real 10% slowdown seen in 40% of draws instead of all).
    With fewer (2 repeats a side: 2), its t quantile would make the gate blind, so the degrees
    of freedom come from pooling the log-variance over every metric and level of the backend,
    and the metric's own noise is used when it is larger than the pooled one. The false-alarm
    and detection rates this gives are measured, not assumed: benchmarks/bench_gate.py."""
    own_ss = own_df = all_ss = all_df = 0
    for cell in (c for cells in sides for c in cells.values()):
        for m, vals in cell.items():
            if m not in METRICS:
                continue
            ss, df = _log_ss(vals)
            all_ss, all_df = all_ss + ss, all_df + df
            if m == metric:
                own_ss, own_df = own_ss + ss, own_df + df
    if not all_df:
        return None
    own = math.sqrt(own_ss / own_df) if own_df else 0.0
    if own_df >= OWN_DF_MIN:
        return own, own_df
    pooled = math.sqrt(all_ss / all_df)
    return max(own, pooled), all_df


def check(baseline: Baseline, run: RunResults | dict[str, Any], records: Iterable[RequestRecord], *,
          floor: float = DEFAULT_FLOOR, alpha: float = DEFAULT_ALPHA,
          samples: dict[tuple[str, str], LevelSample] | None = None) -> GateResult:
    run = as_run(run)
    samples = samples if samples is not None else collect(run, records)
    res = GateResult(env_changes=diff_fingerprints(baseline.fingerprint, fingerprint_of(run)))
    if run.status != "complete":
        res.problems.append(f"the results did not complete (status {run.status}): {run.error or ''}".strip())
    nb, nc = baseline.repeats, int(run.repeats or 1)
    if nb < 2 and nc < 2:
        res.notes.append("baseline and results have 1 repeat each: no noise estimate, the floor alone sets "
                         "the thresholds (save a baseline from a run with --repeats 3)")
    elif nb < 2:
        res.notes.append(f"the baseline has 1 repeat: the noise estimate comes from these results' {nc} "
                         "repeats alone (save a baseline from a run with --repeats 3)")
    family = sum(1 for levels in baseline.metrics.values() for cell in levels.values()
                 for m in cell if m in METRICS)
    for backend, levels in baseline.metrics.items():
        cand: dict[str, dict[str, list[float]]] = {}
        for level, cell in levels.items():
            s = samples.get((backend, level))
            if s is None:
                res.problems.append(f"{backend} {level}: no usable measurements in the results (failed or aborted)")
                continue
            failed = _failed(run, backend, level)
            if failed > cell.get("failed", 0):
                res.problems.append(f"{backend} {level}: failed requests {cell.get('failed', 0)} -> {failed}")
            cand[level] = {m: repeat_values(s, m) for m in cell if m in METRICS}
        for mc in check_cells(backend, levels, cand, floor, alpha, family):
            if mc.candidate is None:
                res.notes.append(f"{backend} {mc.level} {METRICS[mc.metric].label}: no value to compare")
            else:
                res.checks.append(mc)
    return res


def check_cells(backend: str, base: dict[str, dict[str, Any]], cand: dict[str, dict[str, list[float]]],
                floor: float, alpha: float = DEFAULT_ALPHA, family: int | None = None) -> list[MetricCheck]:
    """The gate's arithmetic on per-repeat values ({level: {metric: [values]}}); also used by
    benchmarks/bench_gate.py to replay recorded repeats. ``family``: number of metrics checked
    in all (default: those here). candidate None: nothing to compare."""
    family = family or sum(1 for cell in base.values() for m in cell if m in METRICS)
    out = []
    for level, cell in base.items():
        if level not in cand:
            continue
        for metric, base_vals in cell.items():
            if metric not in METRICS or metric not in cand[level]:
                continue
            mc = _check_metric(backend, level, metric, base_vals, cand[level][metric],
                               _pooled_noise(base, cand, metric=metric), floor, alpha / max(1, family))
            out.append(mc or MetricCheck(backend, level, metric, math.nan, None, math.nan, math.nan,  # type: ignore[arg-type]
                                         None, False, False))
    return out


def _check_metric(backend: str, level: str, metric: str, base: list[float], cand: list[float],
                  noise: tuple[float, int] | None, floor: float, alpha_each: float) -> MetricCheck | None:
    b = np.asarray([x for x in base if x and x > 0 and math.isfinite(x)])
    c = np.asarray([x for x in cand if x and x > 0 and math.isfinite(x)])
    if not b.size or not c.size:
        return None
    d = float(np.log(c).mean() - np.log(b).mean())
    thr = math.log1p(floor)
    mult = None
    if noise is not None:
        from compare.analysis.stats import t_ppf

        mult = t_ppf(1 - alpha_each, noise[1])
        thr = max(thr, mult * noise[0] * math.sqrt(1 / b.size + 1 / c.size))
    worse = -d if METRICS[metric].higher_is_better else d
    return MetricCheck(backend, level, metric, float(np.exp(np.log(b).mean())), float(np.exp(np.log(c).mean())),
                       math.expm1(d), math.expm1(thr), noise[0] if noise else None,
                       regression=worse > thr, improvement=-worse > thr, multiplier=mult)

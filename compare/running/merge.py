"""``compare merge``: several results directories of one comparison pooled into one run with repeats.

A comparison too long for one sitting (one engine per call, one repeat per call) is measured as
several ``compare run``s of the same workload, levels and spec. Merging them gives one results
directory that the report, the verdict and the gate read exactly like a ``--repeats`` run: a
backend found in several inputs is one column whose repeats are the inputs' repeats in input
order (renumbered 0..n-1), its per-repeat rows kept as measured and its pooled rows recomputed
from the pooled records by the runner's own rule (``RepeatPool.pooled``), so the numbers are the
ones a multi-repeat run over the same records shows. Inputs that do not describe the same
comparison are refused (one line naming the run and the field), and the result is built in a
hidden directory beside the destination and renamed into place only when complete.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from backends.logs import LOG_DIR
from core.errors import UserError
from core.records import RequestRecord
from core.results import ResultsWriter
from core.results.evolve import evolve
from core.results.io import check_results_dir_free, dump, load_results
from core.results.models import BackendResult, LevelSummary, RepeatRun, RunResults
from core.slo import SLO

FIX = "pass results directories written by `compare run`"
# run.json fields that must be equal in every input: together they define what was compared
SAME = ("workload", "levels", "slo", "spec", "warmup_requests")
# fields of the run header that are each run's own, never carried into the merged one
OWN = ("schema_version", "run_id", "status", "error", "started_at", "finished_at", "backends", "repeats",
       "length_matched", "ray", "owner", "merged_from")


@dataclass(frozen=True)
class Input:
    path: Path
    run: RunResults
    doc: dict[str, Any]  # run.json as written (fields that were given)
    records: list[RequestRecord]
    workload_sha: str  # of workload.jsonl: the exact request list

    @property
    def name(self) -> str:
        return f"{self.path} (run {self.run.run_id})"


def load_input(path: Path) -> Input:
    """A complete results directory; anything else is a one-line UserError naming it."""
    if not path.is_dir():
        raise UserError(f"{path} is not a results directory; {FIX}")
    run, records = load_results(path)
    wl = path / "workload.jsonl"
    try:
        sha = hashlib.sha256(wl.read_bytes()).hexdigest()
    except OSError:
        raise UserError(f"{path}: no readable workload.jsonl; {FIX}") from None
    name = f"{path} (run {run.run_id})"
    if run.status == "running":
        raise UserError(f"{name} is still running; merge it once it has finished")
    if not run.backends:
        raise UserError(f"{name} holds no backend; {FIX}")
    for b, entry in run.backends.items():
        if entry.status != "complete":
            raise UserError(f"{name}: backend {b} is {entry.status}, not complete; merge only complete "
                            f"backends (re-run it with `compare run --backends {b}`)")
    _check_records(name, run, records)
    return Input(path, run, dump(run), records, sha)


def _check_records(name: str, run: RunResults, records: list[RequestRecord]) -> None:
    """requests.jsonl holds what run.json summarises: records of a level it counted, and of no
    backend it lacks (else the merged numbers are pooled from records that are not there)."""
    have = {(r.backend, r.repeat, r.level) for r in records}
    for b, entry in run.backends.items():
        for rep, levels in entry.repeat_summaries():
            for label, s in levels.items():
                if s.requests and (b, rep, label) not in have:
                    raise UserError(f"{name}: requests.jsonl holds no record of backend {b} at level {label} "
                                    f"(run.json counts {s.requests} requests there): the directory is damaged; "
                                    f"merge a whole copy of it, or re-run that backend")
    stray = sorted({r.backend for r in records} - set(run.backends))
    if stray:
        raise UserError(f"{name}: requests.jsonl holds records of backend {stray[0]!r}, which run.json does not "
                        f"have: the directory is damaged; merge a whole copy of it")


def _first_diff(a: Any, b: Any, where: str) -> str | None:
    """The dotted path of the first place ``a`` and ``b`` differ (None: equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            d = _first_diff(a.get(k), b.get(k), f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _first_diff(x, y, f"{where}[{i}]"))), None)
    return None if a == b else where


def check_comparable(inputs: list[Input]) -> None:
    """Every input measured the same comparison as the first; else one line naming the field."""
    first = inputs[0]
    seen: dict[Path, Input] = {}
    for inp in inputs:
        real = inp.path.resolve()
        if real in seen:
            raise UserError(f"{inp.path} is given twice; pass each results directory once")
        seen[real] = inp
    spec_of: dict[str, Input] = {}  # backend -> the first input that ran it: its own spec must not change
    for inp in inputs:
        why, against = None, first
        for field in SAME:
            if why is None:
                why = _first_diff(first.doc.get(field), inp.doc.get(field), field)
        if why is None and inp.workload_sha != first.workload_sha:
            why = "workload.jsonl (the request list)"
        for b in inp.run.backends:
            was = spec_of.setdefault(b, inp)
            if why is None:
                against = was
                why = _first_diff(was.doc.get("backend_specs", {}).get(b), inp.doc.get("backend_specs", {}).get(b),
                                  f"backend_specs.{b}")
        if why:
            raise UserError(f"{inp.name}: {why} differs from {against.name}; merge only runs of one workload, "
                            f"levels and spec (run the missing part again with the same options)")


@dataclass
class _Column:
    """One backend of the merged run as it is built: its section and the repeat rows so far."""

    entry: BackendResult
    rows: list[RepeatRun]


def merge_runs(paths: list[Path], out_root: Path, run_id: str) -> Path:
    """Merge ``paths`` into ``out_root/run_id``; returns the results directory."""
    if len(paths) < 2:
        raise UserError("compare merge needs at least two results directories")
    inputs = [load_input(Path(p)) for p in paths]
    check_comparable(inputs)
    check_results_dir_free(out_root, run_id)  # (also: --out is a usable directory)
    _note_hardware(inputs)
    staging = out_root / f".{run_id}.merging-{uuid.uuid4().hex[:8]}"
    try:
        d = _write(inputs, staging, run_id)
        dest = out_root / run_id
        try:
            os.rename(d, dest)  # one step: the merged run appears whole or not at all
        except OSError:
            raise UserError(f"results directory {dest} already exists; pick another --run-id") from None
        return dest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write(inputs: list[Input], staging: Path, run_id: str) -> Path:
    from compare.analysis import length_match, prompt_parity
    from compare.running.runner import RepeatPool, RunConfig

    first = inputs[0]
    header = _header(inputs)
    # what level_summary reads of a run's configuration: the run's SLO and the client-lag threshold
    cfg: Any = SimpleNamespace(slo=SLO.from_json(first.doc.get("slo")), lag_threshold_ms=RunConfig.lag_threshold_ms)
    columns: dict[str, _Column] = {}
    pool = RepeatPool()
    merged_from: list[dict[str, Any]] = []
    records: list[RequestRecord] = []
    labels = first.run.level_labels
    for inp in inputs:
        gave: dict[str, list[int]] = {}
        for name, entry in inp.run.backends.items():
            col = columns.setdefault(name, _Column(_section(entry), []))
            col.entry = _carry(col.entry, entry)
            for rep, levels in entry.repeat_summaries():
                new = len(col.rows)
                start = next((r.start_s for r in entry.repeats or [] if r.repeat == rep), entry.start_s)
                col.rows.append(RepeatRun(repeat=new, status="complete", levels=levels,
                                          **({"start_s": start} if start is not None else {})))
                gave.setdefault(name, []).append(new)
                mine = [replace(r, repeat=new) for r in inp.records if r.backend == name and r.repeat == rep]
                records.extend(mine)
                for label in labels:
                    if label in levels:
                        s = levels[label]
                        pool.add((name, label), round(s.wall_s * 1e9), s.loop_lag_ms.model_dump() if s.loop_lag_ms
                                 else {}, [r for r in mine if r.level == label], s.client_lagged)
        merged_from.append({"run_id": inp.run.run_id, "path": str(inp.path.resolve()),
                            **({"started_at": inp.run.started_at} if inp.run.started_at else {}), "backends": gave})
    repeats = max(len(c.rows) for c in columns.values())
    header.update(repeats=repeats, merged_from=merged_from)
    writer = ResultsWriter(staging, run_id, header)
    try:
        for rec in records:
            writer.add_record(rec)
        for name, col in columns.items():
            writer.set_backend(name, _column(cfg, pool, name, col, labels, repeats))
        shutil.copyfile(first.path / "workload.jsonl", writer.dir / "workload.jsonl")  # the exact bytes
        _logs(inputs, writer.dir)
        length_match.attach(writer, writer.dir)  # '@k' rows when some backend could not force lengths (as `compare run`)
        prompt_parity.attach(writer, writer.dir)
    except BaseException as e:
        writer.finish("failed", f"{type(e).__name__}: {e}")
        raise
    writer.finish("complete")
    return writer.dir


def _header(inputs: list[Input]) -> dict[str, Any]:
    """The merged run's header: the first input's (the compared fields are equal in all), with
    every input's per-backend specs and variant columns, and the earliest start."""
    header = {k: v for k, v in inputs[0].doc.items() if k not in OWN}
    header["backend_specs"] = {k: v for i in inputs for k, v in i.doc.get("backend_specs", {}).items()}
    starts = [i.run.started_at for i in inputs if i.run.started_at]
    if starts:
        header["started_at"] = min(starts)
    price = next((i.doc["gpu_hour_price"] for i in inputs if i.doc.get("gpu_hour_price") is not None), None)
    if price is not None:
        header["gpu_hour_price"] = price
    variants = [i.doc["variants"] for i in inputs if isinstance(i.doc.get("variants"), dict)]
    if variants:  # (`--vary` columns: what each column overrides, whichever input ran it)
        cols = {k: v for vs in variants if isinstance(vs.get("columns"), dict) for k, v in vs["columns"].items()}
        header["variants"] = {**variants[0], "columns": cols}
    return header


def _section(entry: BackendResult) -> BackendResult:
    """A column's section before any repeat: what describes the backend, not what it measured."""
    keep = {k: getattr(entry, k) for k in ("start_s", "capabilities", "quant_verification", "quality", "max_rate")
            if k in entry.model_fields_set}
    return BackendResult(status="complete", levels={}, **keep)


def _carry(col: BackendResult, entry: BackendResult) -> BackendResult:
    """The latest input's self-description (as a multi-repeat run keeps the latest engine start's);
    quality and the quantization check stay the first repeat's, as the runner measures them."""
    upd: dict[str, Any] = {k: getattr(entry, k) for k in ("capabilities", "describe") if k in entry.model_fields_set}
    for k in ("quant_verification", "quality", "max_rate", "start_s"):
        if k not in col.model_fields_set and k in entry.model_fields_set:
            upd[k] = getattr(entry, k)
    return evolve(col, **upd)


def _column(cfg: Any, pool: Any, name: str, col: _Column, labels: list[str], repeats: int) -> BackendResult:
    """The backend's section: per-repeat rows as measured; with more than one repeat in the merged
    run, the pooled rows over all of this backend's repeats (as `compare run --repeats`)."""
    if repeats == 1:
        return evolve(col.entry, levels=col.rows[0].levels)
    levels: dict[str, LevelSummary] = {}
    for label in labels:
        ran = [r.levels[label] for r in col.rows if label in r.levels]
        if ran:
            levels[label] = pool.pooled(cfg, (name, label), ran[-1], len(ran))
    return evolve(col.entry, levels=levels, repeats=col.rows)


def _logs(inputs: list[Input], dest: Path) -> None:
    """Each input's engine logs appended to RESULTS/logs/, each under a line naming its run."""
    out = dest / LOG_DIR
    for inp in inputs:
        src = inp.path / LOG_DIR
        if not src.is_dir():
            continue
        banner = f"--- run {inp.run.run_id} ({inp.path.resolve()}) ---\n".encode()
        for f in sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink()):
            target = out / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = f.read_bytes()
            with open(target, "ab") as w:
                w.write(banner + data + (b"" if data.endswith(b"\n") or not data else b"\n"))


def _note_hardware(inputs: list[Input]) -> None:
    """Inputs measured on different machines are merged (a leased machine may differ per call),
    but said so: the spread between repeats then includes the machines' difference."""
    def machine(i: Input) -> tuple[Any, ...]:
        h = i.run.hardware
        return (h.cpu_model, tuple(g.name for g in h.gpus))

    if len({machine(i) for i in inputs}) > 1:
        print("note: the inputs ran on different hardware (CPU model or GPUs); run.json keeps the first "
              "input's, and the repeats' spread includes the machines' difference", file=sys.stderr)

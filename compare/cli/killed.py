"""Runs whose process was killed outright (SIGKILL, the OOM killer), recorded as killed.

Such a run cannot finish its own record: run.json stays ``running`` and the level it was measuring
has records in requests.jsonl but no summary. Every command that looks at results (``compare
report``, ``check``, ``baseline save``, ``clean``, and ``run`` for its results root) first settles
them: a run still ``running`` whose owner (core/results/owner.py: pid + start time + boot) is gone
becomes ``killed``; the backend that was measuring is marked killed, and a level it had begun is
summarised from the requests that finished, marked aborted. Everything measured is kept; run.json
is rewritten atomically. A run whose owner lives, or cannot be checked from here (another host, a
run written before owners were recorded), is left as it is.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.records import RequestRecord


def _last_write(d: Path) -> str:
    """When the run last wrote anything: the honest end time of a killed run."""
    times = [p.stat().st_mtime for p in (d / "run.json", d / "requests.jsonl") if p.exists()]
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(max(times) if times else time.time()))


def _records(d: Path) -> list[RequestRecord]:
    from core.results.io import iter_records

    if not (d / "requests.jsonl").exists():
        return []
    try:
        return list(iter_records(d))  # (a torn last line, the write the kill cut short, is skipped)
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return []  # a corrupt file is the reader's to report; the status is still settled


def _summarise_cut_level(doc: dict[str, Any], name: str, section: dict[str, Any], repeat: int,
                         records: list[RequestRecord]) -> str | None:
    """The level ``name`` had begun when the run was killed, from its finished requests."""
    from compare.analysis.metrics import summarize
    from core.results.evolve import evolve
    from core.slo import SLO

    labels = [lv.get("label") for lv in doc.get("levels") or [] if isinstance(lv, dict)]
    for label in labels:
        if label in section["levels"]:
            continue
        mine = [r for r in records if r.backend == name and r.level == label and r.repeat == repeat]
        if not mine:
            return None
        start = min(min(r.t_sent_ns, r.t_scheduled_ns or r.t_sent_ns) for r in mine)
        end = max(r.t_end_ns or r.t_sent_ns for r in mine)
        planned = (doc.get("workload") or {}).get("num_requests")
        of = f" of {planned}" if isinstance(planned, int) else ""
        summary = evolve(summarize(mine, end - start, SLO.from_run(doc)),
                         aborted=f"killed: {len(mine)}{of} requests finished before the run was killed; "
                                 f"summarised from their first send to their last end")
        section["levels"][label] = summary.model_dump(exclude_unset=True)
        return label
    return None


def settle(d: Path) -> str | None:
    """Record the run in ``d`` as killed when its owner is gone; a one-line note of what was done
    (None: nothing to do)."""
    from core.fsutil import write_json_atomic
    from core.results.io import RESERVE_NAME, dump
    from core.results.migrate import to_current
    from core.results.owner import boot_id, owner_alive

    from core.fsutil import read_if_regular

    raw = read_if_regular(d / "run.json")  # (None: unreadable, a FIFO or device: the command that reads it says so)
    # cheap first look (a results root may hold many large runs): the writer puts status third, so a
    # run that is not "running" is passed over without parsing it
    if raw is None or b'"status": "running"' not in raw[:4096]:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("status") != "running" or owner_alive(doc.get("owner")) is not False:
        return None
    records = _records(d)
    owner = doc["owner"]
    cut: list[str] = []
    for name, entry in (doc.get("backends") or {}).items():
        if not isinstance(entry, dict) or entry.get("status") not in ("running", "pending"):
            continue
        repeats = entry.get("repeats") or []
        this = repeats[-1] if repeats and isinstance(repeats[-1], dict) else entry
        if entry.get("status") == "running":
            entry.setdefault("levels", {})
            this.setdefault("levels", {})
            label = _summarise_cut_level(doc, name, this, int(this.get("repeat", 0) or 0), records)
            if label:
                cut.append(f"{name} {label}")
            where = f"in level {label}" if label else ("before its levels ran" if not this["levels"] else
                                                       "between levels")
            this["status"] = entry["status"] = "killed"
            entry["error"] = f"the run was killed {where}"
    unscored = _unscored_quality(doc)
    ended = _last_write(d)
    rebooted = owner.get("boot_id") and boot_id() and owner["boot_id"] != boot_id()
    how = ("the machine restarted while it ran" if rebooted else f"the process that ran it (pid "
           f"{owner.get('pid')}) ended without finishing the record (SIGKILL or the out-of-memory killer)")
    doc.update(status="killed", finished_at=ended,
               error=(f"killed: {how}; {len(records)} requests kept"
                      + (f", the cut level summarised from what finished ({', '.join(cut)})" if cut else "")
                      + (f"; quality of {', '.join(unscored)} not measured (killed before the reference scored "
                         f"it; the speed results are kept)" if unscored else "")
                      + f"; recorded as killed on {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"))
    try:
        run = to_current(doc, str(d / "run.json"))
        write_json_atomic(d / "run.json", dump(run))
    except (UserError, OSError):  # a record that cannot be settled is left as it was, never half-written
        return None
    try:
        os.unlink(d / RESERVE_NAME)  # the space a live run kept for its final record
    except OSError:
        pass
    return f"note: run {doc.get('run_id', d.name)} in {d} was killed (its process is gone): recorded as killed"


def _unscored_quality(doc: dict[str, Any]) -> list[str]:
    """Backends whose quality probes waited for the reference when the run was killed (often in
    the quality step itself, every engine stopped): marked not measured, with why."""
    names = []
    for name, entry in (doc.get("backends") or {}).items():
        q = entry.get("quality") if isinstance(entry, dict) else None
        if isinstance(q, dict) and q.get("status") == "pending":
            entry["quality"] = {"status": "skipped", "reason": "not measured: the run was killed before the "
                                                               "float32 reference scored it"}
            names.append(name)
    return names


def settle_dir(results: Path) -> None:
    """``results`` is one results directory: settle it, saying so on stderr."""
    import sys

    if results.is_dir():
        note = settle(results)
        if note:
            print(note, file=sys.stderr)


def settle_root(root: Path) -> list[str]:
    """Every run directly under a results root (``compare run --out``, ``compare clean --out``)."""
    notes = []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return notes
    for d in children:
        note = settle(d)
        if note:
            notes.append(note)
    return notes

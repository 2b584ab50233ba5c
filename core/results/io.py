"""The results directory: run.json (summary + provenance) and requests.jsonl (raw stamps).

run.json is rewritten atomically after every load level, so a run that fails or is interrupted
keeps everything it measured, with ``status`` saying how it ended. The writer keeps the run as
JSON-shaped dicts while measuring (callers add to a backend's section in place) and writes it
through ``RunResults`` (core/results/models.py), so what lands on disk is what the models
declare. requests.jsonl gets one complete line per finished request (appended, flushed);
workload.jsonl holds the exact request list so a run can be replayed.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from core.errors import UserError
from core.fsutil import write_atomic, write_json_atomic
from core.records import RequestRecord
from core.results.migrate import to_current
from core.results.models import SCHEMA_VERSION, RunResults


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def dump(run: RunResults) -> dict[str, Any]:
    """JSON-ready dict of a run: only the fields that were given (absent stays absent), NaN as
    null (a metric without a value, e.g. an SLO check when no request succeeded) so the file
    is strict JSON for readers outside Python."""
    return json.loads(run.model_dump_json(exclude_unset=True))


class ResultsWriter:
    def __init__(self, root: Path, run_id: str, header: dict[str, Any]) -> None:
        self.dir = Path(root) / run_id
        if self.dir.exists() and any(self.dir.iterdir()):
            raise FileExistsError(f"results directory {self.dir} already exists")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "run_id": run_id,
                                    "status": "running", "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                    **header, "backends": {}}
        self._req = open(self.dir / "requests.jsonl", "a", encoding="utf-8")
        self.flush()

    @property
    def results(self) -> RunResults:
        """The run so far, typed."""
        return RunResults.model_validate(self.run)

    def write_workload(self, requests: list[dict[str, Any]]) -> None:
        write_atomic(self.dir / "workload.jsonl", "".join(json.dumps(r) + "\n" for r in requests))

    def add_record(self, rec: RequestRecord) -> None:
        self._req.write(json.dumps(rec.to_json()) + "\n")
        self._req.flush()

    def backend(self, name: str) -> dict[str, Any]:
        return self.run["backends"].setdefault(name, {"status": "pending", "levels": {}})

    def write_text(self, relpath: str, text: str) -> None:
        write_atomic(self.dir / relpath, text)

    def flush(self) -> None:
        write_json_atomic(self.dir / "run.json", dump(self.results))

    def finish(self, status: str, error: str | None = None) -> None:
        self.run["status"] = status
        self.run["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if error:
            self.run["error"] = error
        self.flush()
        self._req.close()


def as_run(run: RunResults | dict[str, Any]) -> RunResults:
    """Readers accept the typed run or a run.json-shaped dict (of any readable schema version)."""
    return run if isinstance(run, RunResults) else to_current(run)


def load_run(path: str | os.PathLike[str]) -> RunResults:
    """run.json of a results directory (or the file itself); bad input is a one-line UserError."""
    p = Path(path)
    run_json = p / "run.json" if p.is_dir() else p
    if not run_json.exists():
        raise UserError(f"{run_json} not found: pass a results directory written by `compare run`")
    try:
        doc = json.loads(run_json.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{run_json} is not valid JSON ({e}); pass a results directory written by "
                        f"`compare run`") from None
    return to_current(doc, str(run_json))


def iter_records(path: str | os.PathLike[str]) -> Iterator[RequestRecord]:
    p = Path(path)
    with open(p / "requests.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield RequestRecord.from_json(json.loads(line))


def load_results(path: str | os.PathLike[str]) -> tuple[RunResults, list[RequestRecord]]:
    """run.json + records of a results directory, with bad input as one-line UserErrors."""
    run = load_run(path)
    if not (Path(path) / "requests.jsonl").exists():
        raise UserError(f"{path}: no requests.jsonl; pass a complete results directory")
    try:
        return run, list(iter_records(path))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}/requests.jsonl has a corrupt line ({type(e).__name__}: {e}); "
                        f"pass a complete results directory") from None

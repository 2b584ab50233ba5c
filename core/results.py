"""The results directory: run.json (summary + provenance) and requests.jsonl (raw stamps).

run.json is rewritten atomically after every load level, so a run that fails or is interrupted
keeps everything it measured, with ``status`` saying how it ended. requests.jsonl gets one
complete line per finished request (appended, flushed); workload.jsonl holds the exact request
list so a run can be replayed.
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

SCHEMA_VERSION = 1


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


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
        write_json_atomic(self.dir / "run.json", self.run)

    def finish(self, status: str, error: str | None = None) -> None:
        self.run["status"] = status
        self.run["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if error:
            self.run["error"] = error
        self.flush()
        self._req.close()


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    run_json = p / "run.json" if p.is_dir() else p
    if not run_json.exists():
        raise FileNotFoundError(f"{run_json} not found: pass a results directory written by `compare run`")
    run = json.loads(run_json.read_text())
    if run.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{run_json}: schema_version {run.get('schema_version')} is not "
                         f"{SCHEMA_VERSION}; re-run with this version of llm-compare")
    return run


def iter_records(path: str | os.PathLike[str]) -> Iterator[RequestRecord]:
    p = Path(path)
    with open(p / "requests.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield RequestRecord.from_json(json.loads(line))


def load_results(path: Path):
    """run.json + records of a results directory, with bad input as one-line UserErrors."""
    try:
        run = load_run(path)
    except FileNotFoundError as e:
        raise UserError(str(e)) from None
    except ValueError as e:  # schema version or JSON errors
        raise UserError(f"{e}") from None
    if not (Path(path) / "requests.jsonl").exists():
        raise UserError(f"{path}: no requests.jsonl; pass a complete results directory")
    return run, list(iter_records(path))

"""Whether a results directory may take a new run: free, or holding a run that never measured
(ended, or its owner died, before its first request), which is set aside and replaced."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from core.errors import UserError
from core.fsutil import read_if_regular
from core.results.owner import owner_alive

REQUESTS = "requests.jsonl"

__all__ = ["REQUESTS", "check_results_dir_free", "never_measured", "set_aside"]


def never_measured(d: Path) -> bool:
    """``d`` holds a run that ended (or whose owner died) before measuring anything: no request
    recorded, no level summarised. Its run id may be used again (the old directory is replaced)."""
    try:
        doc = json.loads(read_if_regular(d / "run.json") or b"")  # (a FIFO or device there: not a run)
        reqs = d / REQUESTS
        if reqs.exists() and reqs.stat().st_size > 0:
            return False
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict) or not isinstance(doc.get("backends"), dict):
        return False
    status = doc.get("status")
    if status == "running":
        if owner_alive(doc.get("owner")) is not False:
            return False  # (still running, or cannot tell)
    elif status not in ("failed", "interrupted", "killed"):
        return False
    return not any(isinstance(b, dict) and b.get("levels") for b in doc["backends"].values())


def check_results_dir_free(root: str | os.PathLike[str], run_id: str) -> None:
    """Before anything starts: ``root/run_id`` does not exist, or holds a run that never measured."""
    from core.fsutil import check_dir_option

    check_dir_option(root, "--out")  # a file, a loop, under a file: refused before anything starts
    d = Path(root) / run_id
    if (d.exists() or d.is_symlink()) and not (d.is_dir() and not d.is_symlink() and never_measured(d)):
        raise UserError(f"results directory {d} already exists; pick another --run-id")


def set_aside(d: Path) -> None:
    """Move a never-measured run out of the way (one rename: a reader sees the old or nothing)."""
    gone = d.with_name(f".{d.name}.replaced-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(d, gone)
    except FileNotFoundError:
        return  # a simultaneous start set it aside first
    shutil.rmtree(gone, ignore_errors=True)

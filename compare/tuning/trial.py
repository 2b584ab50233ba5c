"""One tuning trial in its own process: start the engine with the candidate config, find its
goodput under the SLO (compare/tuning/probe.py), stop it, write the result.

Run by compare/tuning/search.py as ``python -m compare.tuning.trial JOB.json RESULT.json`` in its own process
group, so an engine that crashes, OOMs or hangs kills only this trial (recorded as infeasible),
never the tune, and nothing it spawned outlives it (the tune kills the group when the trial ends;
a watchdog kills it if the trial process itself is killed).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from adapters.spec import ServingSpec, UnsupportedSpecError
from backends import registry
from core.errors import BackendStartError
from compare.running import aio
from core.fsutil import write_json_atomic
from core.slo import SLO
from compare.tuning.probe import LoadSearch, max_load_under_slo
from compare.workload.build import request_from_dict


async def run_trial(job: dict[str, Any]) -> dict[str, Any]:
    spec = ServingSpec(**job["spec"])
    requests = [request_from_dict(r) for r in job["requests"]]
    slo = SLO.from_json(job["slo"])
    search = LoadSearch(**job["search"])
    try:
        backend = registry.build(job["backend"], spec)
    except UnsupportedSpecError as e:
        return {"status": "rejected", "reason": str(e)}
    t0 = time.perf_counter()
    try:
        async with backend:
            start_s = time.perf_counter() - t0
            result = await max_load_under_slo(backend, requests, slo, search)
            result["describe"] = backend.describe().as_dict()
    except BackendStartError as e:
        return {"status": "start_failed", "reason": str(e)}
    result["status"] = "measured"
    result["start_s"] = round(start_s, 2)
    return result


def _watchdog() -> None:
    """If this process dies, even by SIGKILL, a forked watchdog kills its process group: the
    engine processes vLLM spawned (they do not die with their parent on their own)."""
    r, w = os.pipe()  # non-inheritable: spawned engine processes do not hold the write end
    if os.fork() == 0:
        os.close(w)
        os.read(r, 1)  # b"" once the trial process is gone
        os.killpg(0, signal.SIGKILL)
        os._exit(0)
    os.close(r)
    _KEEP.append(w)


_KEEP: list[int] = []


def main(argv: list[str]) -> int:
    _watchdog()
    job = json.loads(Path(argv[0]).read_text())
    result = aio.run(run_trial(job))
    write_json_atomic(argv[1], result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

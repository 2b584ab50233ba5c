"""Exhaustive knob grid for vLLM on the tiny model (CPU), every point a real engine start.

Records, per grid point, exactly what a ``compare tune`` trial measures (goodput under the SLO by
the bracketing load search, its CI, every probe), into a fixture the search-quality test replays:
tests/compare/tuning/test_tune_search.py checks that the tuner's search, given these recorded measurements,
finds a config within 5% of the grid's best with at most a third of the grid's trials.

    .venv/bin/python benchmarks/tune_grid.py [--out tests/fixtures/tune_grid_vllm_cpu.json]

Resumable: points already in the output file are skipped. Engines run one after another in this
process (one `import vllm` for all points instead of one per point: on 2 shared cores the
import dominates); each point is still a fresh engine (own engine-core process), stopped after.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.spec import ServingSpec  # noqa: E402
from core.fsutil import write_json_atomic  # noqa: E402
from core.hardware import fingerprint  # noqa: E402
from compare.analysis.metrics import parse_slo  # noqa: E402
from backends.models.tiny import ensure_tiny_model  # noqa: E402
from compare.tuning.probe import LoadSearch  # noqa: E402
from compare.tuning.space import apply_config, config_label, grid_points, space_for  # noqa: E402
from compare.tuning.trial import run_trial  # noqa: E402
from compare.workload.build import WorkloadSpec, build_requests, request_to_dict  # noqa: E402

# 12 points, so the search (a third: 4 trials) has room to move. Knobs with a large, real effect
# on the tiny model on CPU, where a step's fixed cost dominates its compute:
# - max_num_seqs: the decode batch; 1 serves requests one at a time, 32 amortises a step over 32
# - max_num_batched_tokens: the token budget of a step; at 32 a prompt (32-128 tokens) takes up to
#   four steps and running decodes eat into the same budget, so the batch cannot grow past it
# (a 6-point grid, 1/4/16 x 96/2048, gave 2 trials and a single outlier best: too small to judge a search)
GRID = {"max_num_seqs": (1, 2, 4, 8, 16, 32), "max_num_batched_tokens": (32, 256)}
# p90 rather than p95/p99: over 64 requests a p99 is the single slowest request, which one hiccup
# of a shared machine decides; p90 is the 58th of 64
SLO = "ttft_p90=300ms,tpot_p90=50ms"
WORKLOAD = {"name": "tune-grid", "num_requests": 64, "input": {"dist": "uniform", "min": 32, "max": 128},
            "output": {"dist": "fixed", "value": 16}}
# cheap per point (every point is an engine start): start at 16 req/s, at most 3 halvings (down to
# 2 req/s: a probe at rate r lasts ~64/r s) or 4 doublings, then 3 bisections (factor 2 -> 1.09);
# the final load is measured twice. 64 requests, not 32: with 32 the max_num_seqs=32 engine takes
# the whole list in one batch and never queues (measured 2026-11-30 on 2 CPU cores)
LOAD = LoadSearch(kind="rate", start=16.0, tol=0.15, max_probes=8, repeats=2, timeout_s=120.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/tune_grid_vllm_cpu.json"))
    ap.add_argument("--num-requests", type=int, default=WORKLOAD["num_requests"],
                    help="requests per probe (a second grid with another count is a holdout for the search)")
    args = ap.parse_args()
    WORKLOAD["num_requests"] = args.num_requests
    spec = ServingSpec(model=str(ensure_tiny_model()), dtype="float32", max_model_len=512,
                       kv_cache_memory_bytes=64 * 2**20, enforce_eager=True)
    workload = WorkloadSpec(**WORKLOAD)
    requests = build_requests(workload)
    slo = parse_slo(SLO)
    space = space_for("vllm")
    doc = json.loads(args.out.read_text()) if args.out.exists() else {
        "what": "vLLM knob grid on the tiny Qwen2 model, CPU; every point a real engine start",
        "grid": {k: list(v) for k, v in GRID.items()}, "slo": SLO, "workload": WORKLOAD,
        "load_search": LOAD.as_dict(), "hardware": fingerprint().model_dump(mode="json"), "points": []}
    if (doc.get("slo"), doc.get("workload"), doc.get("load_search")) != (SLO, WORKLOAD, LOAD.as_dict()):
        sys.exit(f"{args.out} was measured with another SLO/workload/load search: move it away first")
    doc["grid"] = {k: list(v) for k, v in GRID.items()}
    wanted = {config_label(c) for c in grid_points(GRID)}
    doc["points"] = [p for p in doc["points"] if p["label"] in wanted]  # the grid may have shrunk
    done = {p["label"] for p in doc["points"]}
    for cfg in grid_points(GRID):
        label = config_label(cfg)
        if label in done:
            continue
        reason = space.rules(cfg, spec, False)
        t0 = time.time()
        load_before = os.getloadavg()
        if reason:
            res = {"status": "rejected", "reason": reason, "feasible": False, "goodput": 0.0}
        else:
            job = {"backend": "vllm", "spec": apply_config(space, spec, cfg).model_dump(mode="json"),
                   "requests": [request_to_dict(r) for r in requests],
                   "slo": [t.__dict__ for t in slo], "search": LOAD.as_dict()}
            res = asyncio.run(run_trial(job))
            if res["status"] != "measured":
                res.update(feasible=False, goodput=0.0)
        res.pop("describe", None)
        point = {"config": cfg, "label": label, **res, "wall_s": round(time.time() - t0, 1),
                 "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                 "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        doc["points"].append(point)
        write_json_atomic(args.out, doc)
        print(f"{label}: {res['status']} goodput {res.get('goodput')} in {point['wall_s']} s "
              f"(load {load_before[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

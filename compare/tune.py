"""``compare tune``: the best config of a backend for an SLO, searched with real engine starts.

- The objective of a config is its goodput: the highest load at which the SLO still holds
  (compare/tune_probe.py), measured in a fresh engine in its own process (compare/tune_trial.py).
- The search over the knob grid (compare/tune_space.py) is Optuna's GP sampler, seeded; the
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
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from adapters.spec import ServingSpec
from backends.base import GenerationRequest
from compare.fsutil import write_json_atomic
from compare.metrics import SloTerm
from compare.tune_probe import LoadSearch
from compare.tune_space import Config, Space, apply_config, config_label, grid_points
from compare.workload import WorkloadSpec, request_to_dict

Evaluate = Callable[[Config], dict[str, Any]]  # config -> trial result (has "goodput", "status")


# ---------------------------------------------------------------- the search


@dataclass
class SearchLog:
    trials: list[dict[str, Any]] = field(default_factory=list)  # distinct configs, in order measured

    @property
    def measured(self) -> int:
        """Engine starts spent: configs rejected by the rules never start an engine."""
        return sum(1 for t in self.trials if t["status"] != "rejected")


def search(grid: dict[str, tuple[Any, ...]], budget: int, evaluate: Evaluate, *, seed: int = 0,
           rules: Callable[[Config], str | None] = lambda c: None,
           baseline: Config | None = None, on_trial: Callable[[dict[str, Any]], None] | None = None
           ) -> SearchLog:
    """Measure at most ``budget`` distinct configs (the baseline included) and return them all.

    Optuna's Gaussian-process sampler over the knob grid (numeric knobs as ordered indices), seeded,
    starting from the middle of every range. A suggestion already measured is answered from the
    log and does not spend budget; infeasible configs score 0 so the sampler moves away from them.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    log = SearchLog()
    seen: dict[str, dict[str, Any]] = {}

    def measure(cfg: Config) -> dict[str, Any]:
        key = json.dumps(cfg, sort_keys=True)
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

    if baseline is not None:
        measure(baseline)
    points = grid_points(grid)
    names = list(grid)
    # numeric knobs are ordered: encode each as the index of its value, so the surrogate model
    # sees that 16 lies between 4 and 64; booleans stay categorical
    ordinal = {n for n in names if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in grid[n])}
    dists = {n: optuna.distributions.IntDistribution(0, len(grid[n]) - 1) if n in ordinal
             else optuna.distributions.CategoricalDistribution(list(grid[n])) for n in names}
    # Gaussian-process sampler: with a budget of a few trials it exploits what it measured
    # sooner than TPE (which starts with random draws); first trial: the middle of every range
    sampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({n: (len(grid[n]) // 2 if n in ordinal else grid[n][0]) for n in names})
    grid_keys = {json.dumps(p, sort_keys=True) for p in points}
    asks = 0
    while log.measured < budget and not grid_keys <= seen.keys() and asks < 50 * budget:
        asks += 1
        trial = study.ask(dists)
        cfg = {n: grid[n][trial.params[n]] if n in ordinal else trial.params[n] for n in names}
        study.tell(trial, float(measure(cfg)["goodput"]))
    return log


def best_of(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [t for t in trials if t.get("feasible")]
    # highest max load; ties (same bracket) go to the higher measured goodput at that load
    return max(ok, key=lambda t: (t["goodput"], t["goodput_req_s"]["mean"]), default=None)


def closest_of(trials: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The trial and probe that came nearest the SLO (highest attainment) when none met it."""
    cands = [(t, p) for t in trials for p in t.get("probes", [])]
    if not cands:
        return None
    return max(cands, key=lambda tp: (tp[1]["slo_attainment"], -tp[1]["load"]))


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


def hardware_key(fp: dict[str, Any]) -> dict[str, Any]:
    """The parts of the fingerprint that change a measurement (not the hostname)."""
    return {k: fp.get(k) for k in ("cpu_model", "cpu_count", "cpu_affinity", "memory_bytes", "gpus", "packages")}


@dataclass
class LiveTrials:
    """Measures configs with real engine starts, one process per trial; results cached on disk."""

    backend: str
    space: Space
    base_spec: ServingSpec
    workload: WorkloadSpec
    requests: list[GenerationRequest]
    slo: tuple[SloTerm, ...]
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
            "slo": [t.__dict__ for t in self.slo], "load": self.load.as_dict(),
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
               "slo": [t.__dict__ for t in self.slo], "search": self.load.as_dict()}
        log_path = self.cache_dir / f"{key}.log"
        with tempfile.TemporaryDirectory(prefix="tune-trial-") as tmp:
            job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
            job_path.write_text(json.dumps(job))
            t0 = time.perf_counter()
            rc = _run_group([sys.executable, "-m", "compare.tune_trial", str(job_path), str(out_path)],
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
    (compare/tune_trial.py). Here the group is killed whenever the trial ends.
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

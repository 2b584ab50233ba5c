"""Topologies: N devices as one tensor-parallel engine, or as N replicas behind a load balancer.

    --backends tp@2*vllm                      one engine, tensor_parallel=2, over devices 0-1
    --backends replicas@2*vllm:lb=lor:kill=5@c8  two engines (one device each) behind a client-side
                                              least-outstanding-requests balancer; replica 1 is
                                              SIGKILLed 5 s into load level c8 (default: the first);
                                              kill=16r@c8: when the 16th request of c8 is routed
    --backends replicas@2*vllm-server:per_device=2  two engines sharing one device, each with half
                                              of its memory (gpu_memory_utilization, or the CPU
                                              KV-cache bytes, divided by 2)
    compare run --topology tp=2,replicas=2 --lb rr --kill-replica-after 5 ...  (builds those targets)

A topology is a typed, frozen :class:`Topology` (kind, count, inner backend, balancing policy,
:class:`KillPlan`); the CLI builds it (compare/cli/options.py), the registry builds and plans
it, and the runner files its results under ``Topology.name``, the display name above, derived
from the fields. A name typed in ``--backends`` is parsed into the same value once.

A "device" is a GPU where there is one (``CUDA_VISIBLE_DEVICES``), else a CPU core (vLLM's
``VLLM_CPU_OMP_THREADS_BIND``). Each engine gets its own devices: the variables are set while that
engine starts, so the engine processes it spawns inherit them.

Replica failure: the balancer learns of a dead replica only from its errors (``engine_dead``,
``connect``), as a real client-side balancer would, then routes around it. Those requests fail
as ``replica_dead`` (the level goes on with the other replicas); only when every replica is down
does the backend report ``engine_dead``, which stops the level like a single engine's death. ``on_level_end``
reports what the failure cost: requests failed, output tokens/s before and after the kill.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from adapters.spec import ServingSpec, UnsupportedSpecError
from backends import registry
from backends.topology.target import LB_POLICIES, Topology
from core.records import BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamItem, TokenEvent
from core.errors import BackendRequestError, FailureKind
from backends.base import Backend, BackendBase

_DEAD_KINDS = {FailureKind.ENGINE_DEAD, FailureKind.CONNECT}


def _target(kind: str, target: Topology | str | None) -> Topology:
    t = target if isinstance(target, Topology) else Topology.parse(kind, target)
    if t.kind != kind:
        raise UnsupportedSpecError(kind, f"target {t.name}", f"is a {t.kind} target")
    return t


def devices_present() -> tuple[str, list[str]]:
    """("gpu", ids) when GPUs are visible, else ("cpu core", ids of the cores we may run on)."""
    from core.hardware import nvidia_gpus

    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = nvidia_gpus()
    if gpus:
        ids = [d for d in vis.split(",") if d.strip()] if vis else [str(i) for i in range(len(gpus))]
        return "gpu", ids
    return "cpu core", [str(c) for c in sorted(os.sched_getaffinity(0))]


def assign_devices(kind: str, n_engines: int, per_engine: int) -> list[list[str]]:
    """Split the devices present: ``n_engines`` engines of ``per_engine`` devices each."""
    dev_kind, ids = devices_present()
    need = n_engines * per_engine
    if need > len(ids):
        if kind == "tp":
            option, nearest = f"tp={per_engine}", f"tp={len(ids)}"
        else:
            option = f"replicas={n_engines}" + (f" x tensor_parallel {per_engine}" if per_engine > 1 else "")
            nearest = f"replicas={len(ids) // per_engine}"
        raise UnsupportedSpecError(kind, option, f"needs {need} {dev_kind}s, {len(ids)} present", nearest)
    return [ids[i * per_engine:(i + 1) * per_engine] for i in range(n_engines)]


@contextlib.contextmanager
def device_env(dev_kind: str, devices: list[str], tp: int) -> Iterator[None]:
    """Environment an engine must be started under to use exactly ``devices``."""
    if dev_kind == "gpu":
        env = {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
    else:
        # one '|'-separated core list per TP rank (vllm/utils/ompmultiprocessing.py)
        per = max(1, len(devices) // tp)
        env = {"VLLM_CPU_OMP_THREADS_BIND": "|".join(",".join(devices[r * per:(r + 1) * per]) for r in range(tp))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def replica_devices(t: Topology, tp: int) -> list[list[str]]:
    """Each replica's devices: ``per_device`` replicas take turns on each device (group)."""
    groups = assign_devices("replicas", math.ceil(t.count / t.per_device), tp)
    return [list(groups[i // t.per_device]) for i in range(t.count)]  # copies: plans print plainly


def replica_spec(spec: ServingSpec, per_device: int) -> ServingSpec:
    """The spec of one of ``per_device`` replicas sharing a device: its share of the memory.

    On a GPU, vLLM's gpu_memory_utilization is the fraction of the whole device one engine may
    take (0.9 by default), so K engines take 1/K of it each; on CPU the KV cache is sized in bytes."""
    if per_device == 1:
        return spec
    if devices_present()[0] == "gpu":
        return spec.model_copy(update={"gpu_memory_utilization": round((spec.gpu_memory_utilization or 0.9) / per_device, 4)})
    if spec.kv_cache_memory_bytes:
        return spec.model_copy(update={"kv_cache_memory_bytes": spec.kv_cache_memory_bytes // per_device})
    return spec


def _log_dir(results: Path, name: str) -> Path:
    d = Path(results) / "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


# ---------------------------------------------------------------- tp@N*BACKEND


class TensorParallel(BackendBase):
    """One engine over N devices: the inner backend with ``tensor_parallel=N``."""

    def __init__(self, spec: ServingSpec, name: str | None = None, target: Topology | str | None = None) -> None:
        t = self.target = _target("tp", target)
        self.name, self.n = name or t.name, t.count
        self.devices = assign_devices("tp", 1, t.count)[0]
        self.inner = registry.build(t.inner, spec.model_copy(update={"tensor_parallel": t.count}))

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    async def __aenter__(self) -> "TensorParallel":
        with device_env(devices_present()[0], self.devices, self.n):
            await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inner.__aexit__(*exc)

    def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        return self.inner.stream(req, ctx)

    def attach_results_dir(self, path: Path) -> None:
        """Server/container logs of the inner engine go next to the results (own folder per topology)."""
        self.inner.attach_results_dir(_log_dir(path, self.name))

    def describe(self) -> BackendDescription:
        d = self.inner.describe()
        return BackendDescription(name=self.name, framework=d.framework, version=d.version,
                                  native_config=d.native_config,
                                  extra={**d.extra, "topology": {"tp": self.n, "devices": self.devices}})


# ---------------------------------------------------------------- replicas@N*BACKEND


class ReplicaSet(BackendBase):
    """N independent engines behind a client-side balancer (round-robin or least-outstanding)."""

    def __init__(self, spec: ServingSpec, name: str | None = None, target: Topology | str | None = None) -> None:
        t = self.target = _target("replicas", target)
        self.name, self.n, self.lb = name or t.name, t.count, t.policy
        k = t.kill
        self.kill_after_s = k.after_s if k else None
        self.kill_after_requests = k.after_requests if k else None
        self.kill_level = k.level if k else None  # None: the first load level
        self._kill_armed = False
        self.devices = replica_devices(t, spec.tensor_parallel)
        self.tp = spec.tensor_parallel
        self.per_device = t.per_device
        rspec = replica_spec(spec, t.per_device)
        self.replicas: list[Backend] = [registry.build(t.inner, rspec) for _ in range(self.n)]
        self.pids: list[set[int]] = [set() for _ in range(self.n)]
        self.alive = [False] * self.n
        self.outstanding = [0] * self.n
        self._rr = 0
        self._kill_task: asyncio.Task | None = None
        self._kill_done = False
        self._reset_stats()

    def _reset_stats(self) -> None:
        self.routed = [0] * self.n
        self.failed = [0] * self.n
        self.token_times: list[tuple[int, int]] = []  # (t_ns, tokens) of every streamed event
        self.t_level_ns = time.perf_counter_ns()
        self.killed: dict[str, Any] | None = None

    @property
    def capabilities(self) -> Capabilities:
        c = self.replicas[0].capabilities
        return Capabilities(forced_output_length=c.forced_output_length, token_id_prompts=c.token_id_prompts,
                            logprobs=c.logprobs, continuous_batching=True, server_metrics=False,
                            notes=c.notes + (f"{self.n} replicas, {LB_POLICIES[self.lb]} balancing",))

    def attach_results_dir(self, path: Path) -> None:
        for i, rep in enumerate(self.replicas):
            rep.attach_results_dir(_log_dir(path, f"{self.name}-replica{i}"))

    async def __aenter__(self) -> "ReplicaSet":
        dev_kind = devices_present()[0]
        try:
            for i, rep in enumerate(self.replicas):
                before = _descendants()
                with device_env(dev_kind, self.devices[i], self.tp):  # started one by one: env is global
                    await rep.__aenter__()
                self.pids[i] = _descendants() - before  # this replica's engine processes
                self.alive[i] = True
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._kill_task:
            self._kill_task.cancel()
        for i, rep in enumerate(self.replicas):
            if self.alive[i] or self.pids[i]:
                with contextlib.suppress(Exception):
                    await rep.__aexit__(*exc)
                self.alive[i] = False

    def _pick(self) -> int:
        live = [i for i in range(self.n) if self.alive[i]]
        if not live:
            raise BackendRequestError(FailureKind.ENGINE_DEAD, f"all {self.n} replicas are down")
        if self.lb == "lor":
            low = min(self.outstanding[i] for i in live)
            live = [i for i in live if self.outstanding[i] == low]  # ties: round-robin among them
        self._rr += 1
        return live[self._rr % len(live)]

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        i = self._pick()
        self.routed[i] += 1
        if self._kill_armed and sum(self.routed) >= self.kill_after_requests:
            self._kill_armed = False
            self.kill_replica(self.n - 1)
        self.outstanding[i] += 1
        try:
            async for item in self.replicas[i].stream(req, ctx):
                if isinstance(item, TokenEvent):
                    self.token_times.append((item.t_ns, item.n_tokens))
                yield item
        except BackendRequestError as e:
            self.failed[i] += 1
            kind = e.kind
            if e.kind in _DEAD_KINDS:
                self.alive[i] = False  # passive health check: route around it from now on
                # one replica down is not the backend down: the run goes on with the others
                # (the executor stops a level on engine_dead); the last one down is
                kind = FailureKind.REPLICA_DEAD if any(self.alive) else FailureKind.ENGINE_DEAD
            raise BackendRequestError(kind, f"replica {i}: {e.message}", e.status) from e
        finally:
            self.outstanding[i] -= 1

    def kill_replica(self, i: int) -> None:
        """Failure injection: SIGKILL replica i's engine processes (the balancer is not told)."""
        for pid in self.pids[i]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.killed = {"replica": i, "t_ns": time.perf_counter_ns(), "pids": sorted(self.pids[i])}

    async def on_level_start(self, label: str) -> None:
        self._reset_stats()
        if self.killed is None and self.kill_after_requests and self.kill_level in (None, label) \
                and not self._kill_done:
            self._kill_armed = True
            self._kill_done = True
        if self.kill_after_s is not None and self._kill_task is None and self.kill_level in (None, label):
            async def later() -> None:
                await asyncio.sleep(self.kill_after_s)  # type: ignore[arg-type]
                self.kill_replica(self.n - 1)
            self._kill_task = asyncio.create_task(later())

    async def on_level_end(self, label: str) -> dict[str, Any]:
        out: dict[str, Any] = {"topology": "replicas", "replicas": self.n, "lb": self.lb,
                               "routed": list(self.routed), "failed": list(self.failed),
                               "alive_at_end": list(self.alive)}
        if self.killed:
            out["failure"] = failure_cost(self.token_times, self.t_level_ns, self.killed["t_ns"],
                                          self.n, self.failed[self.killed["replica"]])
            out["failure"]["replica"] = self.killed["replica"]
        return out

    def describe(self) -> BackendDescription:
        d = self.replicas[0].describe()
        return BackendDescription(name=self.name, framework=d.framework, version=d.version,
                                  native_config=d.native_config,
                                  extra={**d.extra, "topology": {"replicas": self.n, "lb": self.lb,
                                                                 "devices": self.devices,
                                                                 "per_device": self.per_device}})


def failure_cost(token_times: list[tuple[int, int]], t0: int, t_kill: int, n: int,
                 failed_on_killed: int) -> dict[str, Any]:
    """Output tokens/s before and after the kill (from the streamed events) and requests lost."""
    before = sum(k for t, k in token_times if t < t_kill)
    after = [(t, k) for t, k in token_times if t >= t_kill]
    t_last = max((t for t, _ in after), default=t_kill)
    rate_before = before / max((t_kill - t0) / 1e9, 1e-9)
    rate_after = sum(k for _, k in after) / ((t_last - t_kill) / 1e9) if t_last > t_kill else 0.0
    return {"killed_at_s": round((t_kill - t0) / 1e9, 3), "requests_failed": failed_on_killed,
            "out_tok_s_before": rate_before, "out_tok_s_after": rate_after,
            "capacity_lost_measured": (1 - rate_after / rate_before) if rate_before else None,
            "capacity_lost_nominal": 1 / n}


# ---------------------------------------------------------------- registration


def _plan(kind: str):
    def plan(spec: ServingSpec, native: None = None, target: Topology | str | None = None) -> dict[str, Any]:
        t = _target(kind, target)
        if kind == "tp":
            devs = assign_devices("tp", 1, t.count)
            inner_spec = spec.model_copy(update={"tensor_parallel": t.count})
        else:
            devs = replica_devices(t, spec.tensor_parallel)
            inner_spec = replica_spec(spec, t.per_device)
        return {"topology": kind, **t.as_dict(), "devices": devs, "engine": registry.plan(t.inner, inner_spec)}
    return plan


_tp_plan, _replicas_plan = _plan("tp"), _plan("replicas")

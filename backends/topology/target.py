"""The typed target of a topology: what ``tp@2*vllm`` or ``replicas@2*vllm:lb=lor:kill=16r@c8`` means.

A frozen value the CLI builds from its options (compare/cli/options.py) or parses once from a
name typed in ``--backends``; the registry builds and plans it (backends/topology/backend.py), and its
display ``name``, derived from the fields, is what results are filed under.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from adapters.spec import UnsupportedSpecError
from backends import registry

LB_POLICIES = {"rr": "round-robin", "lor": "least outstanding requests"}
TP, REPLICAS = "tp", "replicas"  # the kinds, and the names their registry entries have
KINDS = (TP, REPLICAS)
_OPTIONS = ("known: lb=rr|lor, kill=SECONDS[@LEVEL] or kill=Nr[@LEVEL], per_device=K (replicas only)")


@dataclass(frozen=True)
class KillPlan:
    """Failure injection: SIGKILL the last replica ``after_s`` seconds, or when the
    ``after_requests``-th request is routed, into load level ``level`` (None: the first)."""

    after_s: float | None = None
    after_requests: int | None = None  # independent of the machine's speed
    level: str | None = None

    def __post_init__(self) -> None:
        if (self.after_s is None) == (self.after_requests is None):
            raise UnsupportedSpecError("replicas", "kill", "give either seconds or a request count (Nr)")
        if self.after_s is not None and not (math.isfinite(self.after_s) and self.after_s > 0):
            raise UnsupportedSpecError("replicas", f"kill={self.after_s!r}", "seconds must be > 0")
        if self.after_requests is not None and self.after_requests < 1:
            raise UnsupportedSpecError("replicas", f"kill={self.after_requests}r", "the request count must be >= 1")
        if self.level is not None and not self.level.strip():
            raise UnsupportedSpecError("replicas", "kill level ''", "name a load level, e.g. @c8")

    @classmethod
    def parse(cls, text: str, level: str | None = None) -> "KillPlan":
        """``5``, ``1.5@c8``, ``16r`` or ``16r@c8`` (``level`` given separately wins over none)."""
        when, _, at = text.strip().partition("@")
        level = at or level
        try:
            n, s = (int(when[:-1]), None) if when.endswith("r") else (None, float(when))
        except ValueError:
            raise UnsupportedSpecError("replicas", f"kill={text!r}", "expected SECONDS or Nr, e.g. kill=5 or kill=16r",
                                       "kill=5@c8") from None
        return cls(after_s=s, after_requests=n, level=level)

    def __str__(self) -> str:
        when = f"{self.after_requests}r" if self.after_requests is not None else f"{self.after_s:g}"
        return when + (f"@{self.level}" if self.level else "")


@dataclass(frozen=True)
class Topology:
    """N devices as one tensor-parallel engine (``tp``) or as N ``replicas`` of ``inner``.

    ``lb`` None means the default policy (round-robin) and is left out of the name, so a name
    typed without it reads back unchanged; the CLI always sets it (``--lb``)."""

    kind: str  # "tp" | "replicas"
    count: int
    inner: str  # the backend each engine runs, e.g. "vllm"
    lb: str | None = None
    kill: KillPlan | None = None
    # replicas sharing one device (small models on big GPUs are served so), each with 1/K of the
    # device's memory; 1: one device (or tensor-parallel group) per replica
    per_device: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UnsupportedSpecError(self.kind, "topology", f"known: {', '.join(KINDS)}")
        if not isinstance(self.count, int) or self.count < 1:
            raise UnsupportedSpecError(self.kind, f"N={self.count!r}", "N must be a whole number >= 1")
        if self.kind == "tp" and (self.lb is not None or self.kill is not None):
            raise UnsupportedSpecError("tp", "lb/kill", "balancing and replica kills apply to replicas only",
                                       f"replicas@{self.count}*{self.inner}")
        if not isinstance(self.per_device, int) or self.per_device < 1:
            raise UnsupportedSpecError(self.kind, f"per_device={self.per_device!r}", "K must be a whole number >= 1")
        if self.per_device > 1 and (self.kind != "replicas" or self.per_device > self.count):
            raise UnsupportedSpecError(self.kind, f"per_device={self.per_device}",
                                       "shares a device between replicas: replicas only, K <= N",
                                       f"replicas@{self.count}*{self.inner}:per_device={min(self.count, self.per_device)}")
        if self.lb is not None and self.lb not in LB_POLICIES:
            raise UnsupportedSpecError(self.kind, f"lb={self.lb}", f"known: lb={'|'.join(LB_POLICIES)}")
        if registry.split_name(self.inner)[0] in KINDS:
            raise UnsupportedSpecError(self.kind, f"inner backend {self.inner!r}", "topologies do not nest")
        registry.entry_for(self.inner)  # unknown inner backend -> one line naming the known ones

    @property
    def entry(self) -> str:
        """The registry entry that builds and plans this target."""
        return self.kind

    def devices(self, tensor_parallel: int = 1) -> int:
        """Devices occupied: tp@N -> N; N replicas of ``tensor_parallel`` devices, K per device ->
        ceil(N / K) x tensor_parallel."""
        if self.kind == "tp":
            return self.count
        return math.ceil(self.count / self.per_device) * tensor_parallel

    @property
    def policy(self) -> str:
        return self.lb or "rr"

    @property
    def name(self) -> str:
        """The display name results are filed under: ``replicas@2*vllm:lb=lor:kill=16r@c8``."""
        opts = ([f"lb={self.lb}"] if self.lb else []) + ([f"kill={self.kill}"] if self.kill else []) \
            + ([f"per_device={self.per_device}"] if self.per_device > 1 else [])
        return f"{self.kind}@{self.count}*{self.inner}" + "".join(f":{o}" for o in opts)

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, kind: str, target: str | None) -> "Topology":
        """``2*vllm:lb=lor:kill=5@c8`` (the part after ``kind@``); raises a one-line error."""
        if not target or "*" not in target:
            raise UnsupportedSpecError(kind, f"target {target!r}", f"expected {kind}@N*BACKEND, e.g. {kind}@2*vllm")
        n_text, _, rest = target.partition("*")
        inner, *opts = rest.split(":")
        try:
            n = int(n_text)
        except ValueError:
            raise UnsupportedSpecError(kind, f"N={n_text!r}", "N must be a whole number >= 1") from None
        lb, kill, per_device = None, None, 1
        for opt in opts:
            k, _, v = opt.partition("=")
            if kind == "replicas" and k == "lb":
                lb = v
            elif kind == "replicas" and k == "per_device":
                try:
                    per_device = int(v)
                except ValueError:
                    raise UnsupportedSpecError(kind, f"option {opt!r}", "K must be a whole number >= 1",
                                               "per_device=2") from None
            elif kind == "replicas" and k == "kill":
                kill = KillPlan.parse(v)
            else:
                raise UnsupportedSpecError(kind, f"option {opt!r}", _OPTIONS)
        return cls(kind, n, inner, lb, kill, per_device)

    @classmethod
    def from_name(cls, full: str) -> "Topology":
        """``replicas@2*vllm:lb=lor`` -> Topology."""
        kind, target = registry.split_name(full)
        return cls.parse(kind, target)

    def as_dict(self) -> dict[str, Any]:
        k = self.kill
        return {"n": self.count, "inner": self.inner, "lb": self.policy,
                "kill_after_s": k.after_s if k else None, "kill_after_requests": k.after_requests if k else None,
                "kill_level": k.level if k else None, "per_device": self.per_device}

"""Topologies: N devices as one tensor-parallel engine (``tp@N*BACKEND``) or N engines behind a
client-side load balancer (``replicas@N*BACKEND``), around any other backend; the typed target
(target.py) and the wrappers that build, place and balance the inner engines (backend.py)."""
from __future__ import annotations

from backends.registry import BackendEntry, register

register(BackendEntry(
    name="tp", summary="one engine, tensor parallel over N devices: tp@N*BACKEND",
    factory="backends.topology.backend:TensorParallel", plan="backends.topology.backend:_tp_plan", needs_target=True))
register(BackendEntry(
    name="replicas", summary="N engines behind a client-side balancer: replicas@N*BACKEND[:lb=rr|lor][:kill=S][:per_device=K]",
    factory="backends.topology.backend:ReplicaSet", plan="backends.topology.backend:_replicas_plan", needs_target=True))

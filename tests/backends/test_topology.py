"""Topology for real on CPU: 2 vLLM replicas (one core each) behind the least-outstanding-requests
balancer under an SLO; in the second load level one replica's engine processes are SIGKILLed and
the run reports what that cost.

2 engine starts (one compare run). Comparing against one engine is `--backends
vllm,replicas@2*vllm`: the same multi-backend run every other e2e test exercises, so it is not
repeated here (a third engine start on 2 cores). The pure parts (target grammar, balancing
policy, failure arithmetic, device check) are tested without engines."""
from __future__ import annotations

import json

import psutil
import pytest

from adapters.spec import UnsupportedSpecError
from core.errors import UserError
from backends.topology.backend import ReplicaSet, failure_cost
from backends.topology.target import KillPlan, Topology
from tests.conftest import run_cli

N = 32  # requests per level in the replica run


def test_target_grammar():
    t = Topology.parse("replicas", "2*vllm:lb=lor:kill=1.5@c8")
    assert t == Topology("replicas", 2, "vllm", lb="lor", kill=KillPlan(after_s=1.5, level="c8"))
    assert t.as_dict() == {"n": 2, "inner": "vllm", "lb": "lor", "kill_after_s": 1.5, "kill_after_requests": None,
                           "kill_level": "c8", "per_device": 1}
    assert Topology.parse("replicas", "2*vllm:kill=16r").kill == KillPlan(after_requests=16)
    for bad, needle in [("vllm", "N*BACKEND"), ("0*vllm", ">= 1"), ("x*vllm", ">= 1"), ("2*vllm:lb=random", "lb=rr|lor"),
                        ("2*replicas", "do not nest"), ("2*nosuch", "unknown backend"), ("2*vllm:kill=soon", "SECONDS or Nr"),
                        ("2*vllm:kill=0", "> 0"), ("2*vllm:kill=0r", ">= 1"), ("2*vllm:color=red", "known: lb="),
                        ("2*vllm:per_device=0", ">= 1"), ("2*vllm:per_device=x", ">= 1"), ("2*vllm:per_device=3", "K <= N")]:
        with pytest.raises(UserError, match=needle):  # UnsupportedSpecError, UnknownBackendError
            Topology.parse("replicas", bad)
    with pytest.raises(UnsupportedSpecError, match="replicas only"):
        Topology.parse("tp", "2*vllm:lb=rr")


@pytest.mark.parametrize("name", ["tp@2*vllm", "replicas@2*vllm", "replicas@2*vllm:lb=rr:kill=3@c8",
                                  "replicas@4*hf:lb=lor:kill=16r@c8", "replicas@2*vllm:kill=1.5",
                                  "replicas@4*vllm-server:lb=lor:per_device=2"])
def test_display_name_is_derived_from_the_typed_target_and_reads_back(name):
    t = Topology.from_name(name)
    assert t.name == str(t) == name and Topology.from_name(t.name) == t
    assert t.entry == name.partition("@")[0] and t.inner == name.partition("*")[2].split(":")[0]


def test_registry_builds_the_typed_target_under_its_display_name():
    from adapters.spec import ServingSpec
    from backends import registry

    t = Topology("replicas", 1, "hf", lb="lor", kill=KillPlan(after_requests=4, level="c2"))
    plan = registry.plan(t, ServingSpec(model="/m"))
    assert plan["topology"] == "replicas" and plan["lb"] == "lor" and plan["kill_after_requests"] == 4
    rs = registry.build(t, ServingSpec(model="/m"))  # building starts nothing
    assert isinstance(rs, ReplicaSet) and rs.name == "replicas@1*hf:lb=lor:kill=4r@c2" and rs.target is t
    assert (rs.lb, rs.kill_after_requests, rs.kill_level, rs.kill_after_s) == ("lor", 4, "c2", None)


def test_replicas_sharing_one_device_split_its_memory():
    """per_device=K: K replicas on each device, each with 1/K of the memory the spec gives one
    engine (here a CPU core and the KV-cache bytes; on a GPU gpu_memory_utilization)."""
    from adapters.spec import ServingSpec
    from backends import registry
    from backends.topology.backend import devices_present

    if devices_present()[0] == "gpu":
        pytest.skip("checks the CPU path; the GPU path divides gpu_memory_utilization")
    spec = ServingSpec(model="/m", kv_cache_memory_bytes=64 << 20)
    t = Topology.from_name("replicas@2*vllm:lb=lor:per_device=2")
    rs = registry.build(t, spec)
    assert rs.devices[0] == rs.devices[1] and len(rs.devices[0]) == 1  # one core, shared
    assert [r.spec.kv_cache_memory_bytes for r in rs.replicas] == [32 << 20, 32 << 20]
    plan = registry.plan(t, spec)
    assert plan["per_device"] == 2 and plan["devices"][0] == plan["devices"][1]
    assert plan["engine"]["engine_args"]["kv_cache_memory_bytes"] == 32 << 20
    from compare.analysis.cost import devices

    assert devices(t.name, spec) == 1 and devices("replicas@2*vllm", spec) == 2  # what a device-hour is charged for
    # without sharing, two replicas need two devices
    assert registry.build(Topology.from_name("replicas@1*vllm"), spec).replicas[0].spec == spec


def test_least_outstanding_balancing_and_passive_health(tiny_model):
    from adapters.spec import ServingSpec

    if len(psutil.Process().cpu_affinity()) < 2:
        pytest.skip("needs 2 CPU cores (one per replica)")
    rs = ReplicaSet(ServingSpec(model=str(tiny_model)), name="r", target="2*vllm:lb=lor")
    rs.alive = [True, True]
    rs.outstanding = [3, 1]
    assert rs._pick() == 1  # fewer requests in flight
    rs.outstanding = [0, 0]
    assert {rs._pick(), rs._pick()} == {0, 1}  # ties: round-robin
    rs.alive = [True, False]
    assert {rs._pick() for _ in range(4)} == {0}  # never a replica known dead


def test_failure_cost_arithmetic():
    s = 1_000_000_000
    events = [(int(0.5 * s), 10), (int(1.5 * s), 10), (int(2.5 * s), 5), (int(3.0 * s), 5)]
    c = failure_cost(events, 0, 2 * s, 2, 3)
    assert c["out_tok_s_before"] == 10.0 and c["out_tok_s_after"] == 10.0
    assert c["capacity_lost_measured"] == 0.0 and c["capacity_lost_nominal"] == 0.5 and c["requests_failed"] == 3


@pytest.mark.engine
def test_two_replicas_and_a_replica_killed_mid_run(tmp_path):
    if len(psutil.Process().cpu_affinity()) < 2:
        pytest.skip("needs 2 CPU cores (one per replica)")
    # killed when the 16th request of c8 is routed: ~8 in flight then, whatever the machine's speed
    kill = "replicas@2*vllm:lb=lor:kill=16r@c8"
    # 32 requests per level: after the 16th is routed in c8, 16 remain for the surviving replica
    r = run_cli("run", "--backends", kill, "--concurrency", "4,8", "--num-requests", str(N),
                "--input-len", "64", "--output-len", "32", "--slo", "ttft_p95=2s,tpot_p95=200ms",
                "--max-errors", "40", "--out", str(tmp_path), "--run-id", "topo", "--format", "json",
                timeout=1500)
    # one replica down does not fail the run: the level goes on with the other replica
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((tmp_path / "topo" / "run.json").read_text())
    assert run["status"] == "complete" and run["backends"][kill]["status"] == "complete"
    reps = run["backends"][kill]
    # every level has goodput and TTFT/TPOT percentiles
    for label in ("c4", "c8"):
        s = reps["levels"][label]
        assert s["requests"] == N and "goodput_req_s" in s and s["ttft_ms"]["p95"] > 0 and s["tpot_ms"]["p95"] > 0
    # healthy level: both replicas served, nothing failed
    h = reps["levels"]["c4"]["server_metrics"]
    assert h["alive_at_end"] == [True, True] and min(h["routed"]) > 0 and sum(h["failed"]) == 0
    devices = reps["describe"]["extra"]["topology"]["devices"]
    assert len(devices) == 2 and not set(devices[0]) & set(devices[1])  # each replica its own core
    # the killed level: replica 1 died, its in-flight requests failed, replica 0 took the rest
    k = reps["levels"]["c8"]["server_metrics"]
    f = k["failure"]
    assert f["replica"] == 1 and k["alive_at_end"] == [True, False]
    assert f["requests_failed"] >= 1 and f["requests_failed"] == k["failed"][1] and k["failed"][0] == 0
    s = reps["levels"]["c8"]
    assert s["failed"] == f["requests_failed"] and s["ok"] == N - s["failed"]
    assert set(s["errors"]) == {"replica_dead"}  # one replica down does not stop the level
    assert f["out_tok_s_after"] > 0 and f["capacity_lost_nominal"] == 0.5

"""The topology options build typed targets (backends/topology/target.py), not name strings;
bad combinations are one-line errors naming the fix."""
from __future__ import annotations

import argparse

import pytest

from backends.topology.target import KillPlan, Topology
from compare.cli.options import add_topology_options, apply_topology
from core.errors import UserError


def _targets(argv: list[str], backends: list[str]) -> list:
    p = argparse.ArgumentParser()
    add_topology_options(p)
    a = p.parse_args(argv)
    return apply_topology(backends, a.topology, a.lb, a.kill_replica_after, a.kill_level)


def test_topology_options_build_typed_targets_with_the_stable_display_names():
    out = _targets(["--topology", "tp=2,replicas=2", "--lb", "rr", "--kill-replica-after", "3",
                    "--kill-level", "c8"], ["vllm"])
    assert out == [Topology("tp", 2, "vllm"),
                   Topology("replicas", 2, "vllm", lb="rr", kill=KillPlan(after_s=3.0, level="c8"))]
    assert [str(t) for t in out] == ["tp@2*vllm", "replicas@2*vllm:lb=rr:kill=3@c8"]
    out = _targets(["--topology", "replicas=2", "--kill-replica-after", "16r"], ["vllm", "hf"])
    assert [t.name for t in out] == ["replicas@2*vllm:lb=lor:kill=16r", "replicas@2*hf:lb=lor:kill=16r"]


def test_names_typed_in_backends_become_typed_targets_and_others_stay_names():
    out = _targets([], ["vllm", "replicas@2*vllm:lb=lor:kill=16r@c8", "openai@http://h:1"])
    assert out[0] == "vllm" and out[2] == "openai@http://h:1"
    assert out[1] == Topology("replicas", 2, "vllm", lb="lor", kill=KillPlan(after_requests=16, level="c8"))


@pytest.mark.parametrize("argv, backends, needle", [
    (["--topology", "pp=2"], ["vllm"], "expected tp=N or replicas=N"),
    (["--topology", "tp=0"], ["vllm"], "expected tp=N or replicas=N"),
    (["--topology", "replicas=2", "--kill-replica-after", "soon"], ["vllm"], "--kill-replica-after 'soon'"),
    (["--topology", "tp=2", "--kill-replica-after", "5"], ["vllm"], "add replicas=N"),
    (["--kill-replica-after", "5"], ["vllm"], "apply to --topology replicas=N"),
    (["--topology", "replicas=2", "--kill-level", "c8"], ["vllm"], "give that too"),
    (["--topology", "tp=2"], ["replicas@2*vllm"], "do not nest"),
    ([], ["replicas@two*vllm"], "N must be a whole number"),
])
def test_bad_topology_input_is_one_line(argv, backends, needle):
    with pytest.raises(UserError) as e:
        _targets(argv, backends)
    assert needle in str(e.value) and "\n" not in str(e.value)

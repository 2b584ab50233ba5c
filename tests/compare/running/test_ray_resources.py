"""What a Ray cell asks the cluster for (compare/running/ray_cells.py): pure, no cluster needed."""
from __future__ import annotations

import subprocess
import sys

from adapters.variants import Variant
from backends.topology.target import Topology
from compare.running.ray_cells import cell_options, devices_of
from tests.conftest import ROOT


def test_devices_follow_the_column():
    assert devices_of("vllm", 1) == 1
    assert devices_of("vllm", 4) == 4  # --tensor-parallel 4
    assert devices_of(Topology("tp", 2, "vllm"), 1) == 2
    assert devices_of(Topology("replicas", 3, "vllm"), 2) == 6  # 3 replicas of a TP=2 engine
    assert devices_of(Topology("replicas", 4, "vllm", per_device=2), 1) == 2  # two replicas per device
    assert devices_of(Variant(Topology("tp", 2, "vllm"), (("block_size", 32),)), 1) == 2


def test_resources_by_cluster_kind():
    gpus = {"CPU": 64.0, "GPU": 8.0}
    assert cell_options(2, gpus) == {"num_gpus": 2, "num_cpus": 1}
    slots = {"CPU": 4.0, "llmc_slot": 2.0}
    assert cell_options(1, slots) == {"resources": {"llmc_slot": 1}, "num_cpus": 0}
    assert cell_options(1, {"CPU": 4.0}) == {"num_cpus": 1}


def test_ray_is_not_imported_by_the_scale_out_modules():
    """Importing the CLI and the scale-out modules loads no Ray (only --ray's run does)."""
    code = ("import sys, compare.cli.commands.run, compare.running.ray_cells, compare.running.ray_load, "
            "compare.running.ray_merge, compare.running.ray_cluster\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]"

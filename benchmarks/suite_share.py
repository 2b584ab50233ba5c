"""The test suite's time by tier: how much of pytest's time is engine-bound (tests marked
``engine``, ``docker`` or ``slow``: a real engine, server, container or cluster, or training)
and how much is the rest, from a JUnit XML report of a run.

An engine-bound test on an AVX2-only CPU takes about twice as long as on an AVX-512 one (vLLM's
CPU kernels); the rest does not change much. So the suite's time on such a host is estimated as
``wall x (rest + 2 x engine) / (rest + engine)`` of worker time, which is what the budget in
docs/benchmarks.md#test-tiers-and-the-fake-engine is stated in.

    LLM_COMPARE_TEST_REPORTS=reports bash scripts/test.sh   # or any pytest run with --junitxml
    .venv/bin/python benchmarks/suite_share.py reports/host.xml --wall 470

``--wall``: pytest's wall seconds (its last line), to scale worker time to the wall clock. The
markers are read by collecting the suite (``pytest --collect-only -m ...``): nothing is run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE_BOUND = "engine or docker or slow"


def engine_bound_ids() -> set[str]:
    """Node ids (``path::name[param]``) of the tests marked engine, docker or slow."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only",
                        "-q", "-m", ENGINE_BOUND, "tests"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return {ln.strip() for ln in r.stdout.splitlines() if "::" in ln}


def _node_id(case: ET.Element) -> str:
    # JUnit's classname is the module path with dots (tests.x.test_y[.Class]); back to a node id
    parts = case.get("classname", "").split(".")
    for i in range(len(parts), 0, -1):
        path = Path(ROOT, *parts[:i]).with_suffix(".py")
        if path.is_file():
            return "::".join([str(path.relative_to(ROOT)), *parts[i:], case.get("name", "")])
    return case.get("name", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--wall", type=float, default=None, help="pytest's wall seconds, to scale worker time")
    args = ap.parse_args(argv)
    bound = engine_bound_ids()
    secs: dict[str, float] = defaultdict(float)
    files: dict[str, float] = defaultdict(float)
    for case in ET.parse(args.junit).getroot().iter("testcase"):
        nid = _node_id(case)
        t = float(case.get("time", 0) or 0)
        secs["engine" if nid in bound else "rest"] += t
        files[nid.split("::")[0]] += t
    total = secs["engine"] + secs["rest"]
    share = secs["engine"] / total if total else 0.0
    print(f"worker time {total:.0f} s: engine-bound {secs['engine']:.0f} s ({share:.0%}), the rest {secs['rest']:.0f} s")
    if args.wall:
        print(f"pytest wall {args.wall:.0f} s; with the engine-bound share doubled (an AVX2-only host): "
              f"~{args.wall * (1 + share):.0f} s")
    print("heaviest files (worker s):")
    for f, t in sorted(files.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {t:6.1f}  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The set-up tiers (scripts/setup.sh): the default tier is what the embedded default run uses and
nothing more; every other step is a test-tier step, including one without a tier line."""
from __future__ import annotations

import subprocess

from tests.conftest import ROOT


def _setup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          timeout=60)


def test_default_tier_is_what_the_default_run_uses():
    p = _setup("--tier", "default", "--list")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:-1] == [".venv", "45-openvino.sh", "50-http-native.sh", "tiny model"]


def test_test_tier_runs_every_step_in_order():
    steps = sorted(p.name for p in (ROOT / "scripts" / "setup.d").glob("*.sh"))
    assert _setup("--list").stdout.split("\n")[:-1] == [".venv", *steps, "tiny model", "trained tiny model"]


def test_a_step_is_default_only_when_it_says_so(tmp_path):
    """A copy of setup.sh over steps of our own: untagged and `# tier: test` steps stay out of the
    default tier, `# tier: default` ones are in it (a misspelt tier line is the test tier)."""
    (tmp_path / "scripts" / "setup.d").mkdir(parents=True)
    (tmp_path / "scripts" / "setup.sh").write_text((ROOT / "scripts" / "setup.sh").read_text())
    for name, head in {"10-a.sh": "# tier: default\n", "20-b.sh": "", "30-c.sh": "# tier: test\n",
                       "40-d.sh": "# tier: defaults\n"}.items():
        (tmp_path / "scripts" / "setup.d" / name).write_text(f"#!/usr/bin/env bash\n{head}exit 1\n")
    run = lambda *a: subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh"), *a], capture_output=True,  # noqa: E731
                                    text=True, timeout=60).stdout.split("\n")[:-1]
    assert run("--tier", "default", "--list") == [".venv", "10-a.sh", "tiny model"]
    assert run("--list") == [".venv", "10-a.sh", "20-b.sh", "30-c.sh", "40-d.sh", "tiny model", "trained tiny model"]


def test_bad_tier_is_one_line_exit_2():
    p = _setup("--tier", "fast")
    assert p.returncode == 2 and p.stderr.strip() == "setup.sh: unknown tier 'fast' (use default or test)"
    assert p.stdout == ""

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
    assert p.stdout.split("\n")[:-1] == [".venv", "tiny model", "45-openvino.sh", "50-http-native.sh"]


def test_test_tier_runs_every_step_in_order():
    """Background steps (the llama.cpp build) start first, then the others in NN order."""
    steps = sorted((ROOT / "scripts" / "setup.d").glob("*.sh"))
    bg = [p.name for p in steps if "\n# background: yes\n" in p.read_text()]
    assert bg == ["70-llamacpp.sh"]
    rest = [p.name for p in steps if p.name not in bg]
    assert _setup("--list").stdout.split("\n")[:-1] == [".venv", "tiny model", *bg, *rest, "trained tiny model"]


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
    assert run("--tier", "default", "--list") == [".venv", "tiny model", "10-a.sh"]
    assert run("--list") == [".venv", "tiny model", "10-a.sh", "20-b.sh", "30-c.sh", "40-d.sh", "trained tiny model"]


def test_bad_tier_is_one_line_exit_2():
    p = _setup("--tier", "fast")
    assert p.returncode == 2 and p.stderr.strip() == "setup.sh: unknown tier 'fast' (use default or test)"
    assert p.stdout == ""


def test_a_background_step_runs_beside_the_others_and_its_failure_fails_set_up(tmp_path):
    """A copy of setup.sh whose venv and model steps are stubbed: the background step is still
    running while a foreground step runs (it waits for a file the foreground step writes), its
    output is printed when it ends, and its failure is set-up's failure."""
    root = tmp_path
    (root / "scripts" / "setup.d").mkdir(parents=True)
    text = (ROOT / "scripts" / "setup.sh").read_text()
    (root / "scripts" / "setup.sh").write_text(text.replace('step ".venv" venv', "true").replace(
        'step "tiny model" quiet .venv/bin/compare model tiny', "true").replace(
        'step "trained tiny model" quiet .venv/bin/compare model tiny --trained', "true"))
    (root / "scripts" / "setup.d" / "10-bg.sh").write_text(
        "#!/usr/bin/env bash\n# background: yes\nfor i in $(seq 100); do [ -e fg-ran ] && break; sleep 0.1; done\n"
        "[ -e fg-ran ] && echo 'bg saw the foreground step'\nexit ${BG_RC:-0}\n")
    (root / "scripts" / "setup.d" / "20-fg.sh").write_text("#!/usr/bin/env bash\ncd \"$(dirname \"$0\")/../..\"; touch fg-ran\n")
    import os
    ok = subprocess.run(["bash", "scripts/setup.sh"], cwd=root, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "bg saw the foreground step" in ok.stderr and "10-bg.sh started in the background" in ok.stderr
    assert "(in the background)" in ok.stderr
    (root / "fg-ran").unlink()
    bad = subprocess.run(["bash", "scripts/setup.sh"], cwd=root, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "BG_RC": "3"})
    assert bad.returncode == 3 and "10-bg.sh failed (exit 3)" in bad.stderr, bad.stderr
    assert "done: tier" not in bad.stderr

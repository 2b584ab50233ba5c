"""``compare run --quiet`` prints the verdict and the results path only: what the console does, so on
the fake engine (backends/fake/, a test instrument); what real engines print is test_console_e2e.py's."""
from __future__ import annotations

from tests.compare.report.test_console_e2e import ENV, SMALL
from tests.conftest import run_cli


def test_quiet_prints_the_verdict_and_the_results_path_only(tmp_path, tiny_model):
    p = run_cli("run", "--backends", "fake", "--model", str(tiny_model), *SMALL,
                "--concurrency", "1", "--out", str(tmp_path), "--run-id", "q", "--quiet", env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout.strip().splitlines()
    assert out[0].startswith("Verdict (one backend, run complete)")
    assert out[-1] == f"results: {tmp_path / 'q'}"
    assert len(out) <= 6 and not any("TTFT p50" in ln and "backend" in ln for ln in out), out
    assert "fake c1:" not in p.stdout  # no progress lines
    assert (tmp_path / "q" / "logs" / "fake.log").exists()

"""One small tune: engine starts (default + one candidate), the bracketing load search, the Pareto
plot; then the same tune again resumes from the cache (no engine start), and an SLO nothing can
meet ends with exit 2 naming the closest config. The search is orchestration: it tunes the fake
engine (backends/fake/, a test instrument whose sequence slots follow max_num_seqs). vLLM's knob
space and rules are test_tune_space.py's; max_num_seqs reaching vLLM is checked on the shared real
run (tests/backends/test_http_vllm_server.py)."""
from __future__ import annotations

import json

import pytest

from compare.tuning.report import tuned_specs
from adapters.spec import ServingSpec
from tests.conftest import run_cli

# the fake engine: 10 ms to the first token, 2.5 ms per token (30 ms a request: one slot serves ~33 req/s)
FAKE = ["--native", "fake.ttft=10ms", "--native", "fake.itl=2.5ms"]
COMMON = ["tune", "--backend", "fake", *FAKE, "--knob", "max_num_seqs=1,8", "--num-requests", "12",
          "--input-len", "32", "--output-len", "8", "--start-load", "80", "--max-probes", "3",
          "--repeats", "2", "--trial-timeout", "600"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune")
    cache = root / "cache"
    args = [*COMMON, "--slo", "ttft_p95=2s,tpot_p95=500ms", "--budget", "2", "--out", str(root),
            "--cache-dir", str(cache)]
    first = run_cli(*args, "--run-id", "a", timeout=600)
    again = run_cli(*args, "--run-id", "b", timeout=300)
    return root, first, again


def test_tune_measures_real_trials_and_writes_results(tuned):
    root, first, _ = tuned
    assert first.returncode == 0, first.stderr[-3000:]
    doc = json.loads((root / "a" / "tune.json").read_text())
    rep = doc["backends"][0]
    labels = [t["label"] for t in rep["trials"]]
    assert labels[0] == "default" and len(labels) == 2 and labels[1].startswith("max_num_seqs=")
    assert rep["engine_starts"] == 2 and rep["cache_hits"] == 0
    for t in rep["trials"]:
        assert t["status"] == "measured" and t["describe"]["framework"] == "fake (test instrument)"
        loads = [p["load"] for p in t["probes"]]
        assert len(loads) >= 3 and loads[0] == 80.0  # bracketing started at --start-load
        if t["feasible"]:
            ci = t["goodput_req_s"]
            assert ci["n"] == 2 and ci["lo"] <= ci["mean"] <= ci["hi"]
            assert t["bracket"][0] == t["goodput"]
    # the engine really ran the candidate config (the fake's slots: what it resolved from the spec)
    cand = rep["trials"][1]
    assert cand["describe"]["native_config"]["resolved"]["max_num_seqs"] == cand["config"]["max_num_seqs"]
    assert rep["best"] is not None and "verdict" in rep["gain"]
    png = (root / "a" / "pareto.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "tuned vs default" in first.stderr


def test_rerun_resumes_from_the_cache_without_engine_starts(tuned):
    root, first, again = tuned
    assert again.returncode == 0, again.stderr[-2000:]
    a = json.loads((root / "a" / "tune.json").read_text())["backends"][0]
    b = json.loads((root / "b" / "tune.json").read_text())["backends"][0]
    assert b["engine_starts"] == 0 and b["cache_hits"] == 2
    assert [t["goodput"] for t in a["trials"]] == [t["goodput"] for t in b["trials"]]


def test_tuned_config_feeds_compare_run(tuned, tmp_path):
    root, _, _ = tuned
    doc = json.loads((root / "a" / "tune.json").read_text())
    rep = doc["backends"][0]
    base = ServingSpec(model="/m")
    # the measured winner: its knobs, and only those, are applied over the run's spec
    best = rep["best"]
    spec = tuned_specs(str(root / "a"), ["fake", "replicas@2*fake:lb=lor"], base)
    assert spec["fake"] == spec["replicas@2*fake:lb=lor"]
    assert spec["fake"].max_num_seqs == best["config"].get("max_num_seqs", base.max_num_seqs)
    # whichever config won, a winning candidate's knob must reach the run: the same tune with the
    # measured candidate as the best (its value differs from the spec's default, None)
    cand = next(t for t in rep["trials"] if t["label"] != "default")
    assert cand["config"]["max_num_seqs"] in (1, 8) and base.max_num_seqs is None
    rep["best"] = cand
    (tmp_path / "tune.json").write_text(json.dumps(doc))
    assert tuned_specs(str(tmp_path), ["fake"], base)["fake"].max_num_seqs == cand["config"]["max_num_seqs"]


def test_an_slo_no_config_meets_says_so_and_shows_the_closest(tmp_path):
    # one engine start and two short probes (4 requests at 32 and 16 req/s) miss a 1 us TTFT;
    # the longer bracketing search of COMMON (down to 2 req/s x 12 requests) would add ~10 s
    small = ["tune", "--backend", "fake", *FAKE, "--num-requests", "4", "--input-len", "32", "--output-len", "8",
             "--start-load", "32", "--max-probes", "2", "--repeats", "1", "--trial-timeout", "600"]
    r = run_cli(*small, "--slo", "ttft_p95=1us", "--budget", "1", "--out", str(tmp_path),
                "--cache-dir", str(tmp_path / "cache"), timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no config of fake meets the SLO ttft_p95=1us") and "closest: default" in last
    assert "Traceback" not in r.stderr

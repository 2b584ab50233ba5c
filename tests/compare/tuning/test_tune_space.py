"""compare tune without engines: knob spaces and the engines' rules, bad input (exit 2, one line),
the trial cache and the hung-trial path, Pareto frontier, CIs and the gain verdict."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import psutil
import pytest

from adapters.spec import ServingSpec
from adapters.trtllm import trtllm_plan
from adapters.vllm import vllm_engine_args
from core.results.tune import Trial
from core.slo import SLO
from compare.tuning.search import LiveTrials, pareto_frontier, search
from compare.tuning.probe import LoadSearch, mean_ci
from compare.tuning.report import gain, tuned_specs
from compare.tuning.space import KnobError, apply_config, grid_points, parse_knobs, space_for
from compare.workload.build import WorkloadSpec, build_requests
from tests.conftest import cli

SPEC = ServingSpec(model="/m", max_model_len=512)


def test_vllm_knobs_reach_the_engine_args_through_the_adapter():
    space = space_for("vllm")
    spec = apply_config(space, SPEC, {"max_num_seqs": 8, "enable_chunked_prefill": False,
                                      "max_num_batched_tokens": 1024, "block_size": 64})
    args = vllm_engine_args(spec)
    assert (args["max_num_seqs"], args["enable_chunked_prefill"], args["max_num_batched_tokens"],
            args["block_size"]) == (8, False, 1024, 64)


def test_native_knobs_of_tgi_and_trtllm_land_in_spec_native():
    spec = apply_config(space_for("tgi"), SPEC, {"max-waiting-tokens": 5, "waiting-served-ratio": 1.2})
    assert spec.native["tgi"] == {"--max-waiting-tokens": 5, "--waiting-served-ratio": 1.2}
    # TRT-LLM's knobs set the spec fields the plan maps (a dotted native key would be refused by it)
    spec = apply_config(space_for("trtllm"), SPEC, {"max_batch_size": 64, "enable_block_reuse": False,
                                                    "kv_free_fraction": 0.9})
    plan = trtllm_plan(spec)
    assert plan.llm_args["max_batch_size"] == 64
    assert plan.llm_args["kv_cache_config"] == {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False}


@pytest.mark.parametrize("items, needle", [
    (["block_size=48"], "not a multiple of 32"),
    (["max_num_seqs=0"], "must be > 0"),
    (["max_num_seqs=four"], "must be a number"),
    (["nope=1"], "has no knob 'nope'"),
    (["max_num_seqs"], "expected NAME=V1,V2"),
    (["gpu_memory_utilization=0.9"], "only meaningful on a GPU"),
])
def test_bad_knob_ranges_are_one_line_errors(items, needle):
    with pytest.raises(KnobError, match=needle):
        parse_knobs(space_for("vllm"), items, SPEC, gpu=False)


def test_tgi_space_searches_only_knobs_tgi_honours():
    """TGI 3.3 ignores --max-batch-total-tokens for flash-attention models (backends/v3/src/lib.rs):
    the KV knob is --cuda-memory-fraction, and a prefill budget below max-input-tokens is valid
    whenever TGI chunks prefills (backends/v3/src/main.rs)."""
    space = space_for("tgi")
    names = {k.name for k in space.knobs}
    assert "max-batch-total-tokens" not in names and "cuda-memory-fraction" in names
    long_ctx = SPEC.model_copy(update={"max_model_len": 8192})
    grid = parse_knobs(space, [], long_ctx, gpu=True)
    assert not [c for c in grid_points(grid) if space.rules(c, long_ctx, True)]  # chunking: all valid
    no_chunk = long_ctx.model_copy(update={"chunked_prefill": False})
    bad = [c for c in grid_points(grid) if space.rules(c, no_chunk, True)]
    assert bad and all(c["max-batch-prefill-tokens"] < 8191 for c in bad)
    with pytest.raises(KnobError, match="fraction"):
        parse_knobs(space, ["cuda-memory-fraction=1.5"], long_ctx, gpu=True)


def test_a_grid_with_no_accepted_combination_is_rejected():
    with pytest.raises(KnobError, match="no combination"):
        parse_knobs(space_for("vllm"), ["max_num_seqs=64,128", "max_num_batched_tokens=32"], SPEC, gpu=False)


def test_default_space_skips_gpu_only_knobs_on_cpu_and_rules_prune_combinations():
    space = space_for("vllm")
    long_ctx = SPEC.model_copy(update={"max_model_len": 4096})
    grid = parse_knobs(space, [], long_ctx, gpu=False)
    assert "gpu_memory_utilization" not in grid and "max_model_len" not in grid
    assert "gpu_memory_utilization" in parse_knobs(space, [], long_ctx, gpu=True)
    bad = [c for c in grid_points(grid) if space.rules(c, long_ctx, False)]
    # vLLM refuses a step budget below max_model_len when chunked prefill is off
    assert bad and all(c["enable_chunked_prefill"] is False and c["max_num_batched_tokens"] < 4096 for c in bad)


def test_tune_cli_bad_input_exits_2_with_one_line(tmp_path):
    cases = [
        (["--knob", "block_size=48"], "not a multiple of 32"),
        (["--slo", "ttft=2s"], "SLO term"),
        (["--backend", "tgi", "--max-model-len", "8192", "--chunked-prefill", "false",
          "--knob", "max-batch-prefill-tokens=2048,4096"], "without prefill chunking"),
        (["--budget", "0"], "--budget"),
    ]
    for extra, needle in cases:
        args = ["tune", "--out", str(tmp_path), *(["--slo", "ttft_p95=2s"] if "--slo" not in extra else []), *extra]
        r = cli(*args)
        assert r.returncode == 2, (extra, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        assert needle in last and "Traceback" not in r.stderr, r.stderr


def test_topology_needing_more_devices_than_present_exits_2():
    n = len(psutil.Process().cpu_affinity()) + 1
    r = cli("plan", "--backends", f"replicas@{n}*vllm")
    assert r.returncode == 2 and f"needs {n} cpu cores" in r.stderr and "Traceback" not in r.stderr
    r = cli("run", "--backends", "vllm", "--topology", f"tp={n}", "--out", "/tmp/never")
    assert r.returncode == 2 and f"tp={n}" in r.stderr and "Traceback" not in r.stderr


def _live(tmp_path: Path, timeout: float = 900.0) -> LiveTrials:
    wl = WorkloadSpec(num_requests=4)
    return LiveTrials("vllm", space_for("vllm"), ServingSpec(model="/nonexistent"), wl, build_requests(wl),
                      SLO.parse("ttft_p95=1s"), LoadSearch(), tmp_path, {"cpu_model": "x"},
                      trial_timeout_s=timeout)


def test_trial_cache_key_and_resume(tmp_path):
    lt = _live(tmp_path)
    k1, k2 = lt.key({"max_num_seqs": 4}), lt.key({"max_num_seqs": 8})
    assert k1 != k2 and k1 == lt.key({"max_num_seqs": 4})
    # a different hardware fingerprint or SLO is a different trial
    other = _live(tmp_path)
    other.hardware = {"cpu_model": "y"}
    assert other.key({"max_num_seqs": 4}) != k1
    # a finished trial on disk is returned without starting anything
    (tmp_path / f"{k1}.json").write_text(json.dumps({"status": "measured", "feasible": True, "goodput": 3.0}))
    t0 = time.perf_counter()
    res = lt({"max_num_seqs": 4})
    assert res["cached"] and res["goodput"] == 3.0 and lt.cache_hits == 1
    assert time.perf_counter() - t0 < 1.0


def test_hung_trial_is_infeasible_and_leaves_no_process(tmp_path):
    lt = _live(tmp_path, timeout=2.0)  # the trial process cannot even import vLLM in 2 s
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    res = lt({"max_num_seqs": 4})
    assert res["status"] == "crashed" and not res["feasible"] and "did not finish within 2 s" in res["reason"]
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
    # a crashed trial is cached as infeasible: a resumed tune does not retry it
    assert lt({"max_num_seqs": 4})["cached"]


def test_search_never_exceeds_budget_and_skips_rejected_configs():
    grid = {"a": (1, 2, 3, 4), "b": (True, False)}
    calls = []

    def evaluate(cfg):
        calls.append(cfg)
        return {"status": "measured", "feasible": True, "goodput": float(cfg.get("a", 0))}

    log = search(grid, 3, evaluate, seed=1, rules=lambda c: "no" if c.get("a") == 4 else None, baseline={})
    assert log.measured == 3 == len(calls)
    assert {} in calls and all(c.get("a") != 4 for c in calls)
    assert len({json.dumps(c, sort_keys=True) for c in calls}) == len(calls)  # never measured twice


def test_pareto_frontier_keeps_only_non_dominated_points():
    pts = [{"ok": 1, "output_tok_s": t, "ttft_p95_ms": l} for t, l in
           [(100, 50), (200, 80), (150, 90), (300, 200), (250, 300), (50, 40)]]
    front = pareto_frontier(pts, "ttft_p95_ms")
    assert [(p["output_tok_s"], p["ttft_p95_ms"]) for p in front] == [(50, 40), (100, 50), (200, 80), (300, 200)]


def test_mean_ci_and_gain_verdicts():
    ci = mean_ci([10.0, 12.0, 11.0])
    assert ci["lo"] < 11.0 < ci["hi"] and math.isclose(ci["mean"], 11.0)
    assert mean_ci([5.0]) == {"mean": 5.0, "lo": 5.0, "hi": 5.0, "n": 1}

    def t(label, goodput, vals):
        return Trial(label=label, feasible=True, goodput=goodput, goodput_req_s=mean_ci(vals))

    assert gain(t("a", 8, [7.9, 8.1]), t("default", 4, [3.9, 4.1])).beyond_ci is True
    g = gain(t("a", 8, [4.0, 8.0]), t("default", 4, [3.0, 7.0]))
    assert g.beyond_ci is False and g.ratio == 2.0 and "already optimal within noise" in g.verdict
    assert "already the best" in gain(t("default", 4, [4, 4]), t("default", 4, [4, 4])).verdict
    assert gain(None, t("default", 4, [4, 4])).verdict == "no config met the SLO"


def test_tuned_specs_for_plain_and_topology_names(tmp_path):
    # a tune.json as `compare tune` wrote it (an H200 tune kept in benchmarks/), its best config changed
    doc = json.loads((Path(__file__).parents[3] / "benchmarks/results/h200/2026-12-01-tune/tune.json").read_text())
    tuned = doc["backends"][0]
    doc["backends"] = [{**tuned, "backend": "vllm", "best": {**tuned["best"], "config": {"max_num_seqs": 8}}}]
    (tmp_path / "tune.json").write_text(json.dumps(doc))
    specs = tuned_specs(str(tmp_path), ["vllm", "replicas@2*vllm:lb=lor"], SPEC)
    assert specs["vllm"].max_num_seqs == 8 and specs["replicas@2*vllm:lb=lor"].max_num_seqs == 8
    r = cli("run", "--backends", "hf", "--tuned", str(tmp_path), "--out", str(tmp_path / "r"))
    assert r.returncode == 2 and "backend hf was not tuned there" in r.stderr

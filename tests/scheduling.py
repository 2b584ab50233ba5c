"""How the suite is spread over pytest-xdist workers (scripts/test.sh runs ``-n 2``).

The suite's time is real engine starts (~35 s each on 2 cores, almost all single-threaded module
imports in 2-3 processes), so two workers roughly halve it, provided that

- the session fixtures that start engines run ONCE, not once per worker: every file using one
  goes to the same worker (GROUPS), and
- the longest groups start first (WEIGHTS, seconds measured on 2026-11-30, see
  docs/benchmarks.md), so the two workers finish close together (longest-processing-time-first).

Without xdist (``-p no:xdist`` or a plain ``pytest tests/x.py``) none of this does anything.
"""
from __future__ import annotations

# file -> group. Files sharing an expensive session fixture run on one worker.
GROUPS = {
    # real_run (compare run vllm,hf) and prefix_run (vllm,vllm-server on a shared-prefix workload)
    "test_engines_e2e.py": "shared-runs",
    "test_report_e2e.py": "shared-runs",
    "test_console_e2e.py": "shared-runs",
    "test_http_vllm_server.py": "shared-runs",
    "test_telemetry_e2e.py": "shared-runs",
    "test_breakdown_e2e.py": "shared-runs",
    "test_http_vllm_server_tmp.py": "shared-runs",
    # tgi_url: the TGI-protocol test double on a real vLLM engine
    "test_tgi_double_protocol.py": "tgi-double",
    "test_length_match_e2e.py": "tgi-double",
    "test_tgi_client_double.py": "tgi-double",
    "test_served_model_e2e.py": "tgi-double",  # and served_vllm_url: one `vllm serve` (~60 s)
    "test_multiproc_vllm_server.py": "tgi-double",  # served_vllm_url too
    # Ray: `ray stop` in one file ends every Ray process of the machine, so both run on one worker
    "test_ray_e2e.py": "ray",
    "test_ray_start_e2e.py": "ray",
}

# group (or file) -> seconds with two workers, 2026-11-30 16:37 run (vLLM's worker inside its
# engine-core process, tests/conftest.py), from --durations; absent: short
WEIGHTS = {
    # real_run and prefix_run, the engine-crash run and a vLLM start that fails
    "shared-runs": 205,
    "test_containers_e2e.py": 175,
    # five real runs stopped by signals (vLLM x2, vllm-server, hf, openvino); the policy itself runs
    # on the fake engine (test_signals_fake.py: four short runs)
    "test_signals_e2e.py": 350,
    "test_signals_fake.py": 30,
    # fake-engine orchestration tests (a few short `compare run`s each, no engine start)
    "test_gate_fake.py": 25,
    "test_failures_fake.py": 12,
    "test_tune_live.py": 40,  # compare tune on the fake engine: two tunes + a resume (was 127 on vLLM)
    # --find-max-rate on the fake engine: three short runs (was three vLLM starts, 94-330 s)
    "test_max_rate.py": 20,
    "test_quant_engine.py": 85,
    # llama.cpp (built by setup): one shared server start and four signalled runs; and a
    # vllm,openvino,llamacpp run plus two GGUF runs (2026-12-02, one worker, load ~5)
    "test_llamacpp.py": 80,
    "test_llamacpp_e2e.py": 75,
    "test_trtllm_pipeline.py": 75,
    "tgi-double": 220,  # 73 s, the text-generation client (~30 s), served-model runs (~95 s), client-procs runs (~50 s)
    "test_topology.py": 47,
    "test_trtllm_serve_http.py": 32,
    "test_http_fastsse.py": 22,  # every scripted stream twice (C and Python parser) + the loopback server
    "test_results_io.py": 21,
    "test_bundle.py": 21,
    "test_engine_cache.py": 15,
    "test_quality.py": 12,
    # compare quant quality: 2 vLLM starts, 2 OpenVINO exports + compiles, one llmcompressor run
    "test_heldout.py": 150,
    # two 3-step trainings (tokenizer + corpus each); the full trained model is cached by setup
    "test_train.py": 85,
    # OpenVINO: the three exports (fp32, int8, int4; ~35 s each, cached after) plus short runs
    "test_openvino.py": 90,
    "test_two_engines_e2e.py": 60,  # one vllm,openvino,hf-cb run
    # transformers continuous batching: three engine starts (~20 s each on a loaded box), their streams
    # and a compare run killed with its engine running
    "test_hf_cb.py": 170,
    "test_vary_e2e.py": 12,  # compare run --vary max_num_seqs=1,4 on the fake engine, then re-checks
    "test_fake.py": 15,
    "test_containers.py": 12,
    # a 3-node local Ray cluster (6 fake-engine cells, 2 load shards), the run without Ray to match,
    # and `ray start --head` + one transformers cell + a fake-engine cell stopped by Ctrl-C + `ray stop`; with
    # transformers cells in the matrix too: 285 s alone at load 6-10 (+10-40 s for the Ctrl-C case)
    "ray": 220,
    # --client-procs: a vLLM server start and two runs; loopback-server levels, a kill, a Ctrl-C
    "test_multiproc.py": 55,
}


def group_of(nodeid: str) -> str:
    file = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return GROUPS.get(file, file)


def order_heaviest_first(items: list) -> None:
    """Stable sort of collected items: heavy groups first, each group's items contiguous and in
    their original order (xdist hands out groups in collection order)."""
    first_seen: dict[str, int] = {}
    for i, it in enumerate(items):
        first_seen.setdefault(group_of(it.nodeid), i)
    items.sort(key=lambda it: (-WEIGHTS.get(group_of(it.nodeid), 1), first_seen[group_of(it.nodeid)]))


def make_scheduler(config, log):
    """LoadScopeScheduling with our groups as the scopes, in our order (its default reorders the
    scopes by test count, which puts many quick unit tests first)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False
    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)

"""How the suite is spread over pytest-xdist workers (scripts/test.sh runs ``-n 2``).

The suite's time is real engine starts (~35 s each on 2 cores, almost all single-threaded module
imports in 2-3 processes), so two workers roughly halve it, provided that

- the session fixtures that start engines run ONCE, not once per worker: every file using one
  goes to the same worker (GROUPS), and
- the longest groups start first (WEIGHTS, seconds measured on 2026-12-05, see
  docs/benchmarks.md), so the two workers finish close together (longest-processing-time-first),
- and files of independent tests (SPREAD) are split between the workers test by test.

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
    "test_trtllm_serve_http.py": "tgi-double",  # served_vllm_url as the stand-in for trtllm-serve
    "test_trace_vllm.py": "tgi-double",  # a Mooncake trace replayed on served_vllm_url
    # Ray: `ray stop` in one file ends every Ray process of the machine, so both run on one worker
    "test_ray_e2e.py": "ray",
    "test_ray_start_e2e.py": "ray",
}

# group (or file) -> seconds of worker time with two workers, from a 2026-12-05 full run with -n 2
# (19:40, 630 s of pytest on a shared machine; a session fixture's start counts to the first test
# using it); files changed since: measured after the change and scaled; absent: short. Only the
# order matters: xdist hands the next group to whichever worker is free
WEIGHTS = {
    # real_run (vllm,hf) and prefix_run (vllm,vllm-server), the engine-crash run, a vLLM start
    # that fails, the report in Chromium
    "shared-runs": 134,
    # vllm-container end to end then killed (one start), the TGI double's image, a server exiting
    # during start
    "test_containers_e2e.py": 80,
    # five real runs stopped by signals (vLLM x2, vllm-server, hf, openvino); the policy itself runs
    # on the fake engine (test_signals_fake.py: four short runs)
    "test_signals_e2e.py": 80,
    "test_signals_fake.py": 10,
    # `compare` commands refused before anything starts (in-process: tests/conftest.py cli); plans
    # that import vLLM or transformers
    "test_cli_edges.py": 8,
    "test_cli_bad_input.py": 16,
    "test_bad_input_limits.py": 7,
    # fake-engine orchestration tests (a few short `compare run`s each, no engine start)
    "test_gate_fake.py": 9,
    "test_failures_fake.py": 5,
    "test_tune_live.py": 9,  # compare tune on the fake engine: two tunes + a resume
    "test_tune_space.py": 3,
    "test_max_rate.py": 5,  # --find-max-rate on the fake engine: three short runs
    # compare quant run: fp32, W8A8-int8 and (with AVX-512) W4A16 on vLLM, quality vs the reference
    "test_quant_engine.py": 68,
    # compare quant quality: 2 vLLM starts, 2 OpenVINO exports + compiles, one llmcompressor run
    "test_heldout.py": 35,
    # llama.cpp (built by setup): one shared server start and two signalled runs (SIGKILL, SIGTERM)
    "test_llamacpp.py": 19,
    # three runs stopped mid-conversion, then a concurrent pair that converts once, then a damaged entry
    "test_llamacpp_cache_cli.py": 39,
    "test_llamacpp_interrupted_cli.py": 15,  # runs stopped during the llama.cpp build (configure, compile)
    "test_llamacpp_e2e.py": 14,  # Q8_0 and Q4_K_M in one --vary run (the three-engine run is test_two_engines_e2e.py)
    "test_trtllm_pipeline.py": 25,
    "test_trtllm_cli.py": 1,
    # the TGI double (a vLLM), `vllm serve`, the text-generation client, served-model and
    # client-procs runs, length matching (the fake engine against the double)
    "tgi-double": 70,
    "test_topology.py": 33,  # two vLLM replicas, one killed mid-level
    # a 3-node local Ray cluster (6 fake-engine cells, 2 load shards), the run without Ray to match,
    # and `ray start --head` + one transformers cell + a fake-engine cell stopped by Ctrl-C + `ray stop`
    "ray": 60,
    "test_two_engines_e2e.py": 12,  # one openvino,hf-cb,llamacpp run
    "test_sessions_e2e.py": 43,  # a session workload on vLLM and llama.cpp, prefix caching on and off
    # OpenVINO: streams, cancels, a crash, timeouts, int8/int4 runs (exports cached by setup)
    "test_openvino.py": 19,
    "test_http_fastsse.py": 21,  # every scripted stream twice (C and Python parser) + the loopback server
    "test_bundle.py": 14,
    "test_hf_cb.py": 23,  # transformers continuous batching: three engine starts, a killed run
    "test_results_io.py": 5,
    "test_killed_runs.py": 10,
    "test_quality_e2e.py": 10,
    "test_containers.py": 14,
    "test_multiproc.py": 8,  # --client-procs: loopback-server levels, a kill, a Ctrl-C
    "test_train.py": 7,  # two 3-step trainings; the full trained model is cached by setup
    "test_served_model.py": 5,
    # fake-engine and bad-input files without an entry before (seconds, the same run)
    "test_steady_state.py": 28,
    "test_file_shapes.py": 3,
    "test_odd_paths.py": 4,
    "test_quality_faults.py": 11,
    "test_merge_fake.py": 7,
    "test_stream_parsers.py": 17,
    "test_sessions_fake.py": 6,
    "test_workload_columns.py": 7,
    "test_llamacpp_native_keys.py": 12,
    "test_model_check.py": 1,
    "test_telemetry.py": 7,
}


# Files of many independent `compare` subprocesses and no fixture of their own to share: each test
# is its own unit, so the two workers split the file
SPREAD = {"test_cli_bad_input.py", "test_signals_fake.py"}


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def group_of(nodeid: str) -> str:
    file = _file(nodeid)
    return nodeid if file in SPREAD else GROUPS.get(file, file)


def _weight(nodeid: str) -> float:
    file = _file(nodeid)
    return WEIGHTS.get(file if file in SPREAD else group_of(nodeid), 1)


def order_heaviest_first(items: list) -> None:
    """Stable sort of collected items: heavy groups first, each group's items contiguous and in
    their original order (xdist hands out groups in collection order)."""
    first_seen: dict[str, int] = {}
    for i, it in enumerate(items):
        first_seen.setdefault(group_of(it.nodeid), i)
    items.sort(key=lambda it: (-_weight(it.nodeid), first_seen[group_of(it.nodeid)]))


def make_scheduler(config, log):
    """LoadScopeScheduling with our groups as the scopes, in our order (its default reorders the
    scopes by test count, which puts many quick unit tests first)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False
    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)

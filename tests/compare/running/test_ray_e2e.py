"""``compare run --ray``: the matrix's cells as Ray tasks on a real local multi-node Ray cluster, and
the CLI against a head started with ``ray start``; the results match a run without Ray."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from backends.logs import log_file
from tests.conftest import ROOT, run_cli

# a local multi-node Ray cluster (the cells are the fake engine's; a real engine in a Ray cell is
# test_ray_start_e2e.py's)
pytestmark = pytest.mark.engine

# Ray's nodes advertise 127.0.0.1 (read when Ray is imported, so set before that)
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(LOOPBACK)
ray = pytest.importorskip("ray")

VENV_BIN = Path(sys.executable).parent
# 2 columns (knob variants) x 3 repeats = 6 cells. Spreading cells over nodes and merging them is
# orchestration: the cells run the fake engine (backends/fake/, a test instrument), which starts at
# once and yields the same tokens for the same request wherever it runs
MATRIX = ("--backends", "fake", "--native", "fake.ttft=5ms", "--native", "fake.itl=2ms",
          "--vary", "max_model_len=256,512", "--repeats", "3")
WORKLOAD = ("--num-requests", "2", "--input-len", "12", "--output-len", "4", "--prompt-format", "token_ids",
            "--concurrency", "2", "--warmup", "1")
SMALL_STORE = 80 * 2**20


def _load(d: Path) -> tuple[dict, list[dict]]:
    return (json.loads((d / "run.json").read_text()),
            [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()])


def _ray_processes(marker: str) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(marker in part for part in p.info["cmdline"] or ()):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _kill_left(marker: str) -> list[int]:
    """Processes of the cluster under ``marker`` still alive: killed, by pid, and returned."""
    import psutil

    deadline = time.monotonic() + 15
    left = _ray_processes(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _ray_processes(marker)
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture(scope="module")
def plain(tmp_path_factory, tiny_model) -> Path:
    """The matrix without Ray, in a process that reports whether Ray was imported."""
    out = tmp_path_factory.mktemp("plain")
    code = ("import sys\nfrom compare.cli.main import main\nrc = main(sys.argv[1:])\n"
            "print('RAY_IMPORTED', any(m == 'ray' or m.startswith('ray.') for m in sys.modules), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    p = subprocess.run([sys.executable, "-c", code, "run", *MATRIX, "--model", str(tiny_model), *WORKLOAD, "--out", str(out), "--run-id", "plain", "--quiet"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RAY_IMPORTED False" in p.stderr  # without --ray nothing about Ray is imported
    return out / "plain"


def _same_results(plain: Path, other: Path) -> dict:
    """What a run on Ray must share with the plain one; returns the Ray run's run.json."""
    from core.results import load_run

    a, ra = _load(plain)
    b, rb = _load(other)
    load_run(other)  # validates against the models (the run.json schema)
    assert set(b) - set(a) == {"ray"} and set(a) <= set(b)
    assert b["status"] == "complete" and list(b["backends"]) == list(a["backends"])
    for name, ea in a["backends"].items():
        eb = b["backends"][name]
        assert set(eb) == set(ea) and eb["status"] == "complete"
        assert [r["repeat"] for r in eb["repeats"]] == [r["repeat"] for r in ea["repeats"]] == [0, 1, 2]
        for label, la in ea["levels"].items():
            assert set(eb["levels"][label]) == set(la)
            assert eb["levels"][label]["repeats"] == 3 and eb["levels"][label]["ok"] == la["ok"] == 6
        assert eb["describe"]["native_config"] == ea["describe"]["native_config"]
    assert len(rb) == len(ra) == 2 * 3 * 2  # columns x repeats x requests
    assert {frozenset(x) for x in rb} == {frozenset(x) for x in ra}  # the same fields per record
    key = lambda r: (r["backend"], r.get("repeat", 0), r["level"], r["request_id"])  # noqa: E731
    assert Counter(map(key, rb)) == Counter(map(key, ra))
    # the identical workload on the same engine: greedy tokens match request by request
    tokens = {key(r): r["token_ids"] for r in ra}
    assert all(r["token_ids"] == tokens[key(r)] and r["error_kind"] is None for r in rb)
    assert (other / "workload.jsonl").read_text() == (plain / "workload.jsonl").read_text()
    return b


@pytest.fixture(scope="module")
def cluster():
    """A local multi-node Ray cluster: a head without slots (the driver's node) and two nodes with
    one CPU and one "accelerator" (``llmc_slot``) each."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in LOOPBACK}
    os.environ.update(LOOPBACK)
    temp = tempfile.mkdtemp(prefix="llmc-ray-", dir="/tmp")  # Ray's socket paths must stay short
    # Cluster() writes the head's address to /tmp/ray/ray_current_cluster whatever temp_dir says,
    # and fails where no Ray ever ran on the machine (that directory missing)
    os.makedirs("/tmp/ray", exist_ok=True)
    c = None
    try:
        c = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "object_store_memory": SMALL_STORE, "temp_dir": temp, "include_dashboard": False})
        slots = [c.add_node(num_cpus=1, object_store_memory=SMALL_STORE, resources={"llmc_slot": 1})
                 for _ in range(2)]
        c.wait_for_nodes()
        yield c.address, {n.node_id[:12] for n in slots}
    finally:
        if c is not None:
            c.shutdown()
        left = _kill_left(temp)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert left == [], f"Ray processes left behind: {left}"


def test_matrix_on_a_local_multi_node_cluster(plain, cluster, tiny_model, tmp_path):
    address, slot_nodes = cluster
    p = run_cli("run", *MATRIX, "--model", str(tiny_model), *WORKLOAD, "--ray", address,
                "--out", str(tmp_path), "--run-id", "ray", env=LOOPBACK, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    run = _same_results(plain, tmp_path / "ray")
    cells = run["ray"]["cells"]
    assert [(c["backend"], c["repeat"]) for c in cells] == [  # merged in the interleaved order
        (b, rep) for rep in range(3) for b in ("fake[max_model_len=256]", "fake[max_model_len=512]")]
    assert all(c["resources"] == {"resources": {"llmc_slot": 1}, "num_cpus": 0} for c in cells)
    assert {c["node_id"] for c in cells} == slot_nodes  # both nodes took cells
    log = log_file(tmp_path / "ray", "fake[max_model_len=256]").read_text()
    assert log.count("Ray node 127.0.0.1") == 3  # the remote engines' logs came back


def test_load_shards_on_two_nodes(cluster, tmp_path):
    """An already running endpoint driven by two load-generator actors, one per node."""
    from compare.running.calibration import CalibrationServerProcess, CalibrationTiming

    address, slot_nodes = cluster
    with CalibrationServerProcess(CalibrationTiming(ttft_ms=20, itl_ms=5)) as url:
        args = ("run", "--backends", f"openai@{url}", "--num-requests", "8", "--input-len", "8", "--output-len",
                "16", "--concurrency", "4", "--rate", "40", "--warmup", "1", "--ray", address,
                "--ray-load-shards", "2", "--out", str(tmp_path))
        # a loaded 2-core box can stretch Ray's round trips: the bound is wide here, its refusal tested below
        p = run_cli(*args, "--run-id", "shards", "--ray-max-clock-error-ms", "50", env=LOOPBACK, timeout=600)
        refused = run_cli(*args, "--run-id", "refused", "--ray-max-clock-error-ms", "0.0001", env=LOOPBACK,
                          timeout=600)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    run, records = _load(tmp_path / "shards")
    entry = run["backends"][f"openai@{url}"]
    assert entry["status"] == "complete" and len(records) == 16 and all(r["error_kind"] is None for r in records)
    shards = run["ray"]["load_shards"]
    assert [s["level"] for s in shards] == ["c4", "r40"]
    for level in shards:
        assert {s["node_id"] for s in level["shards"]} == slot_nodes  # spread: one per node
        assert sum(s["requests"] for s in level["shards"]) == 8
        for s in level["shards"]:
            assert s["error_ms"] <= 50 and abs(s["offset_ms"]) < 1000  # one machine: one clock, well measured
            # how far apart the shards started is measured and kept (0.06-0.57 ms on an idle box,
            # docs/ray.md); on a loaded 2-core machine Ray's actors start seconds apart, so the
            # figure is checked for being recorded, not for its size
            assert math.isfinite(s["start_skew_ms"]), level["shards"]
    assert [s["concurrency"] for s in shards[0]["shards"]] == [2, 2]
    # records moved onto the driver's clock: each level's requests fall inside its own span
    for label in ("c4", "r40"):
        mine = [r for r in records if r["level"] == label]
        assert len(mine) == 8 and all(len(r["token_ids"]) == 16 for r in mine)
    c4_end = max(r["t_end_ns"] for r in records if r["level"] == "c4")
    assert c4_end < min(r["t_sent_ns"] for r in records if r["level"] == "r40")
    offsets = entry["levels"]["r40"]["schedule_offsets_ns"]
    assert len(offsets) == 8  # the whole level's one schedule
    # above the bound: refused with one line, the level not sent
    assert refused.returncode == 1, refused.stderr[-2000:]
    bad = json.loads((tmp_path / "refused" / "run.json").read_text())
    assert bad["status"] == "partial"
    assert "refused: its clock offset" in bad["backends"][f"openai@{url}"]["error"]
    assert (tmp_path / "refused" / "requests.jsonl").read_text() == ""


def test_bad_addresses_are_one_line(tmp_path):
    """Checked before anything is written: one line, exit 2."""
    with socket_port() as port:  # a port nothing listens on
        pass
    for arg, words in ((f"127.0.0.1:{port}", "no Ray head answers there"), ("nowhere", "expected auto or HOST:PORT")):
        p = run_cli("run", "--backends", "hf", "--ray", arg, *WORKLOAD, "--out", str(tmp_path), "--run-id", "x")
        assert p.returncode == 2, p.stderr
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and words in errors[0] and "Traceback" not in p.stderr
        assert not (tmp_path / "x").exists()  # nothing half-written
    p = run_cli("run", "--backends", "hf", "--ray-load-shards", "2", *WORKLOAD, "--out", str(tmp_path))
    assert p.returncode == 2 and "needs --ray" in p.stderr
    with socket_port() as port:
        p = run_cli("run", "--backends", "hf", "--ray", f"127.0.0.1:{port}", "--ray-load-shards", "2", *WORKLOAD,
                    "--out", str(tmp_path), "--run-id", "y")
    assert p.returncode == 2 and "applies to already running endpoints" in p.stderr, p.stderr
    assert not (tmp_path / "y").exists()


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.s.close()

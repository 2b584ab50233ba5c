"""Stopping a real `compare run` with real signals, mid-level, on real engines (the tiny model):
that each engine kind is torn down with nothing left running. The policy itself, on every signal,
and the signal during the final teardown run on the fake engine: test_signals_fake.py.

SIGINT, SIGTERM and SIGHUP follow one policy (compare/running/aio.py): stop sending, cancel what
is in flight (kept as cancelled records), summarise the completed part of the level (marked
aborted), run status "interrupted", every engine/server/container torn down, exit 128 + signal
with one line. SIGKILL cannot be handled: the reaper (containers/watchdog.py) kills the run's
engine processes, and `compare clean` finds whatever a dead run left.

Every run here uses the suite's process layout (tests/conftest.py: vLLM's worker inside its engine
core, which is still a process of its own): a SIGTERM ends the engine through vLLM's own shutdown,
the server's guard ends its whole process group, and after a SIGKILL the reaper ends every process
carrying the run's tag, however deep (vLLM's default layout, engine core + a separate worker, is
test_engines_e2e.py's engine-crash test).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from containers.watchdog import tagged
from tests.conftest import ROOT, TINY_SPEC_ARGS, VENV_BIN, cli

pytestmark = [pytest.mark.engine]


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().split("\n")[:-1] if x.strip()]


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# Long enough that the stop lands inside the level even when the signal is handled seconds late:
# on an overloaded 2-core machine (the suite's two workers and engines) the handler has run 4-24 s
# after the signal. The signal is sent once 2 records are written: short requests reach them soon
# (no warm-up either: nothing here depends on it), many keep the level long (1000 rounds of 64
# tokens at concurrency 2; a level that ends before the signal lands proves nothing, and the
# requests after the signal are never sent, so a long list costs nothing).
REQUESTS, OUTPUT_LEN = 2000, 64


class Stopped:
    """A `compare run` that was sent ``sig`` once ``min_records`` requests had finished."""

    def __init__(self, tmp: Path, backends: str, sig: int, *extra: str, min_records: int = 2,
                 args: tuple[str, ...] = ()) -> None:
        from backends.models.tiny import ensure_tiny_model

        self.dir = tmp / "s"
        argv = [str(VENV_BIN / "compare"), "run", "--backends", backends, *args, *extra,
                "--num-requests", str(REQUESTS), "--output-len", str(OUTPUT_LEN), "--concurrency", "2", "--warmup", "0",
                "--out", str(tmp), "--run-id", "s"]
        if not args:
            argv[4:4] = ["--model", str(ensure_tiny_model()), *TINY_SPEC_ARGS]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        me = psutil.Process(self.proc.pid)
        self.tag = f"{me.pid}:{me.create_time():.2f}"
        deadline = time.time() + 900  # engine start takes minutes on a loaded 2-core machine
        try:
            while len(_lines(self.dir / "requests.jsonl")) < min_records:
                assert self.proc.poll() is None, self.proc.communicate()[1][-3000:]
                assert time.time() < deadline, "no request finished in time"
                time.sleep(0.2)
            self.tree = me.children(recursive=True)
            self.names = _names(self.tree)  # while they run
            self.engine_pids = [c.pid for c in self.tree if _running(c)]
            self.sent_at = time.time()
            self.records_at_signal = len(_lines(self.dir / "requests.jsonl"))
            os.kill(self.proc.pid, sig)
            self.out, self.err = self.proc.communicate(timeout=300) if sig != signal.SIGKILL else ("", "")
            if sig == signal.SIGKILL:
                self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.stopped_s = time.time() - self.sent_at
        self.records = _lines(self.dir / "requests.jsonl")

    def run_json(self) -> dict:
        return json.loads((self.dir / "run.json").read_text())

    def assert_nothing_left(self, within_s: float = 30.0) -> None:
        """No process of the run's tree and none carrying its tag survive (the reaper may need a
        few seconds after a SIGKILL)."""
        deadline = time.time() + within_s
        while True:
            alive = [p.pid for p in self.tree if _running(p)]
            ours = [p.pid for p, _ in tagged(self.tag)]
            if not alive and not ours:
                return
            assert time.time() < deadline, f"left running: tree {alive}, tagged {ours}"
            time.sleep(0.5)


def _assert_interrupted(s: Stopped, sig: int, backend: str) -> None:
    assert s.proc.returncode == 128 + sig, s.err[-3000:]
    name = signal.Signals(sig).name
    ours = [ln for ln in s.err.splitlines() if ln.startswith("interrupted")]
    assert len(ours) == 1 and ours[0].startswith(f"interrupted by {name}: "), s.err[-2000:]
    assert "Traceback" not in s.err, s.err[-3000:]
    late = "run status complete" in ours[0] or "before its levels ran" in (s.run_json()["backends"]
                                                                        .get(backend, {}).get("error") or "")
    if late and s.records_at_signal >= REQUESTS:
        # with the CPU oversubscribed (the suite's two workers and their engines) this test's own
        # poll of requests.jsonl was starved: it saw its 2 records only once the level had ended,
        # so the signal could not land inside it (the product's exit code and teardown: asserted)
        pytest.xfail(f"the test sent {name} after the level had ended (its poll starved on an oversubscribed CPU)")
    assert "run status interrupted" in ours[0] and str(s.dir) in ours[0]
    assert "Traceback" not in s.err, s.err[-3000:]
    run = s.run_json()
    assert run["status"] == "interrupted" and name in run["error"]
    b = run["backends"][backend]
    assert b["status"] == "interrupted" and f"stopped by {name} in level c2" in b["error"]
    level = b["levels"]["c2"]
    ok = [x for x in s.records if x["error_kind"] is None]
    cancelled = [x for x in s.records if x["error_kind"] == "cancelled"]
    assert len(ok) >= 2 and all(x["usage_completion_tokens"] in (None, OUTPUT_LEN) for x in ok)
    # concurrency 2: the requests in flight when the signal came are written, marked cancelled
    assert cancelled and len(ok) + len(cancelled) == len(s.records) < REQUESTS
    assert level["aborted"].startswith(f"interrupted: {len(ok)} of {REQUESTS} requests finished")
    assert level["requests"] == len(s.records) and level["ok"] == len(ok)
    assert level["errors"] == {"cancelled": len(cancelled)}
    # the report renders the completed part (and says what failed); in this process: the report
    # needs no process of its own, and one `compare` import less per test
    r = cli("report", str(s.dir))
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"| {backend} | c2 | {len(ok)}/{len(s.records)} |" in r.stdout
    assert "interrupted" in r.stdout and "'cancelled'" in r.stdout
    s.assert_nothing_left()


# One signal per backend keeps the suite short: the policy is the same code path for every signal
# (SIGINT with hf, SIGHUP with openvino below); SIGTERM is what CI runners and schedulers send.
def test_inprocess_vllm_stopped_by_sigterm(tmp_path):
    s = Stopped(tmp_path, "vllm", signal.SIGTERM)
    assert any("EngineCore" in n for n in s.names), s.names
    _assert_interrupted(s, signal.SIGTERM, "vllm")
    assert s.stopped_s < 60  # bounded: cancel, summarise, engine shutdown


def _names(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(p.name() + " " + " ".join(p.cmdline()))
        except psutil.NoSuchProcess:
            out.append("?")
    return out


def test_vllm_server_stopped_by_sigterm(tmp_path):
    s = Stopped(tmp_path, "vllm-server", signal.SIGTERM)
    _assert_interrupted(s, signal.SIGTERM, "vllm-server")


def test_sigkill_of_the_tool_takes_the_inprocess_engine_with_it(tmp_path):
    s = Stopped(tmp_path, "vllm", signal.SIGKILL)
    assert any("EngineCore" in n for n in s.names), s.names
    assert s.proc.returncode == -signal.SIGKILL
    s.assert_nothing_left(within_s=30)  # the reaper: SIGTERM, then SIGKILL after its grace
    # what was measured before the kill is on disk; the run could not say how it ended
    assert s.run_json()["status"] == "running" and len(s.records) >= 2


def test_hf_stopped_by_sigint(tmp_path):
    s = Stopped(tmp_path, "hf", signal.SIGINT)
    _assert_interrupted(s, signal.SIGINT, "hf")


def test_openvino_stopped_by_sighup(tmp_path):
    s = Stopped(tmp_path, "openvino", signal.SIGHUP)
    assert any("backends.openvino.engine" in n for n in s.names), s.names
    _assert_interrupted(s, signal.SIGHUP, "openvino")

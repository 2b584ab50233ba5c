"""``vllm-server``: vLLM's real OpenAI API server as a subprocess, driven over HTTP.

Same spec -> same engine config as the in-process ``vllm`` backend (adapters.vllm builds both:
``vllm_engine_args`` for AsyncLLM, ``vllm_server_argv`` for the server), so
``compare run --backends vllm,vllm-server`` isolates the API-server + HTTP overhead.

Lifecycle: binds 127.0.0.1 on a free port, its own process group (``start_new_session``), stdout
and stderr captured to ``<results>/logs/vllm-server.log`` (or a temp file when no results directory
is attached), health polled until ready or the process dies. On exit, Ctrl-C or a crash of the
benchmark, the whole group gets SIGTERM, then SIGKILL after a grace period. The server runs under a small guard process
(``python -m backends.vllm_server --guard CMD...``) that kills the group when this process
disappears, even by SIGKILL (a dying parent cannot clean up; PR_SET_PDEATHSIG alone is not
enough: vLLM's SIGTERM handler can hang while the engine is still starting).
"""
from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from adapters.spec import ServingSpec
from adapters.vllm import VllmPlan, server_argv, vllm_plan
from core.errors import BackendStartError
from backends.http_backends import HttpStreamBackend
from core.engine_guard import check_start

HOST = "127.0.0.1"
# vLLM on a loaded 2-core CPU machine has been seen to need 8 minutes to become healthy
START_TIMEOUT_S = float(os.environ.get("LLM_COMPARE_SERVER_START_TIMEOUT", "600"))
STOP_GRACE_S = 15.0
_LIVE: set[int] = set()  # process groups still running; killed at interpreter exit too


def free_port(host: str = HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(spec: ServingSpec, port: int, host: str = HOST,
                   engine_args: dict[str, Any] | None = None) -> list[str]:
    """``engine_args``: the run's resolved (and placed) engine args; default: resolved here."""
    if engine_args is None:
        from backends.models.dummy import engine_args as placed
        from backends.models.probe import probe

        engine_args = placed(vllm_plan(spec, probe(spec.model)))
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *server_argv(engine_args, host, port)]


def server_plan(spec: ServingSpec, native: VllmPlan) -> dict[str, Any]:
    """What would run (port chosen at start); names a dummy copy without writing it."""
    from backends.models.dummy import engine_args

    args = engine_args(native, write=False)
    return {"command": server_command(spec, 0, engine_args=args)[1:], "engine_args": args,
            "protocol": "openai (/v1/completions, token-id prompts, return_token_ids)"}


def kill_group(pgid: int, grace_s: float = STOP_GRACE_S, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the whole group, wait, then SIGKILL whatever is left. ``leader``: the group leader
    when it is our child; it is reaped while waiting, because an exited but unreaped leader (a
    zombie) still counts as a group member and the wait would always last the whole grace period."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        _LIVE.discard(pgid)
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _LIVE.discard(pgid)


@atexit.register
def _kill_leftovers() -> None:
    for pgid in list(_LIVE):
        kill_group(pgid, 5.0)


class ServerProcess:
    """A server subprocess in its own process group with its log in a file."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.argv, self.log_path, self.env = argv, log_path, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        check_start(f"a server process ({' '.join(self.argv[:3])} ...)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            # the guard leads a new process group holding the server and all its children
            self.proc = subprocess.Popen([sys.executable, "-m", "backends.vllm_server", "--guard", *self.argv],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env={**os.environ, **(self.env or {})},
                                         cwd=str(Path(__file__).resolve().parent.parent))
        finally:
            log.close()
        _LIVE.add(self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text[-lines:])

    async def wait_healthy(self, url: str, timeout_s: float) -> float:
        t0 = time.monotonic()
        async with httpx.AsyncClient(timeout=2.0) as c:
            while time.monotonic() - t0 < timeout_s:
                if not self.alive():
                    raise BackendStartError(
                        f"server exited with code {self.proc.returncode if self.proc else '?'} before it was "
                        f"healthy; see {self.log_path}: {self.log_tail(3)}")
                try:
                    if (await c.get(url)).status_code == 200:
                        return time.monotonic() - t0
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
        raise BackendStartError(f"server not healthy after {timeout_s:g} s ({url}); see {self.log_path}; "
                                f"raise LLM_COMPARE_SERVER_START_TIMEOUT if the model is large")

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        kill_group(self.proc.pid, leader=self.proc)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return self.proc.returncode


class VllmServerBackend(HttpStreamBackend):
    framework = "vllm"

    def __init__(self, spec: ServingSpec, name: str = "vllm-server", native: VllmPlan | None = None,
                 **kw: Any) -> None:
        from backends.models.dummy import engine_args
        from backends.models.probe import probe

        # the run's plan (backends/registry.py), else resolved here; UnsupportedSpecError before any I/O
        self.engine_args = engine_args(native or vllm_plan(spec, probe(spec.model)))
        super().__init__(spec, name, protocol="openai", model=spec.model, metrics="prometheus", **kw)
        self.results_dir: Path | None = None
        self._server: ServerProcess | None = None
        self._argv: list[str] = []
        self._health_s: float | None = None
        self._tmp: str | None = None  # the server's TMPDIR while it runs

    def attach_results_dir(self, path: Path) -> None:
        """Called by the runner: the server log goes next to the results."""
        self.results_dir = Path(path)

    async def _start_server(self) -> None:
        from core.lazy import require

        vllm = require("vllm", "vllm")
        self._version = getattr(vllm, "__version__", "unknown")
        port = free_port()
        self._argv = server_command(self.spec, port, engine_args=self.engine_args)
        safe = self.name.replace("/", "_").replace(":", "_").replace("@", "_")
        log_dir = self.results_dir or Path(tempfile.mkdtemp(prefix="llm-compare-server-"))
        # the server's own temp dir, removed at stop: vLLM leaves files there (its file-store
        # rendezvous, /tmp/vllm_dist_*, one per start)
        # a short name: vLLM puts ZMQ IPC sockets in TMPDIR, whose paths must stay under 107 bytes
        self._tmp = tempfile.mkdtemp(prefix="lc-vs-")
        self._server = ServerProcess(self._argv, log_dir / f"{safe}.log", env={"TMPDIR": self._tmp})
        self._server.start()
        self.base_url = f"http://{HOST}:{port}"
        self._health_s = await self._server.wait_healthy(self.base_url + "/health", START_TIMEOUT_S)

    async def _stop_server(self) -> None:
        try:
            if self._server is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._server.stop)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def describe(self):  # type: ignore[no-untyped-def]
        d = super().describe()
        d.native_config.update({"engine_args": self.engine_args, "server_argv": self._argv[1:]})
        d.extra.update({"server_log": str(self._server.log_path) if self._server else None,
                        "health_after_s": self._health_s})
        if self._server is not None and self.results_dir is None:
            # no results directory attached: keep the log's tail in the results themselves
            d.extra["server_log_tail"] = self._server.log_tail(40).split(" | ")
        return d


def _guard(argv: list[str]) -> int:
    """Run ``argv`` in this process group; kill the group when our parent dies or we are told to."""
    parent = os.getppid()
    child = subprocess.Popen(argv)
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while child.poll() is None:
        if stopping or os.getppid() != parent:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.killpg(0, signal.SIGTERM)  # the server and everything it started
            deadline = time.monotonic() + STOP_GRACE_S
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(0, signal.SIGKILL)  # includes this guard
        time.sleep(0.2)
    # the server is gone (crash or stop): take whatever it started with it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    return child.returncode or 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--guard":
        sys.exit(_guard(sys.argv[2:]))
    sys.exit("usage: python -m backends.vllm_server --guard CMD [ARGS...]")

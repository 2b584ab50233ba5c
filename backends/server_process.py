"""A server subprocess we launch (an engine's HTTP server): its own process group under a guard,
its log in a file, health-polled until ready, the whole group stopped at the end.

The server runs under a small guard process (``python -m backends.server_process --guard CMD...``)
that kills the group when this process disappears, even by SIGKILL (a dying parent cannot clean
up; PR_SET_PDEATHSIG alone is not enough: vLLM's SIGTERM handler can hang while the engine is
still starting). On exit, Ctrl-C or a crash of the benchmark, the whole group gets SIGTERM, then
SIGKILL after a grace period.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.engine_guard import check_start
from core.errors import BackendStartError

HOST = "127.0.0.1"
# vLLM on a loaded 2-core CPU machine has been seen to need 8 minutes to become healthy
START_TIMEOUT_S = float(os.environ.get("LLM_COMPARE_SERVER_START_TIMEOUT", "600"))
STOP_GRACE_S = 15.0
_LIVE: set[int] = set()  # process groups still running; killed at interpreter exit too


def free_port(host: str = HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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
            self.proc = subprocess.Popen([sys.executable, "-m", "backends.server_process", "--guard", *self.argv],
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

    def said_at_exit(self) -> str:
        """The log's last lines, led by its last error line when that is further up (llama-server
        says which argument it refused, then prints its usage: the tail alone is the usage)."""
        from backends.logs import tail

        lines = [ln.strip() for ln in tail(self.log_path, 40)]
        last = lines[-3:]
        errors = [ln for ln in lines[:-3] if "error" in ln.lower()]
        return " | ".join(errors[-1:] + last)

    async def wait_healthy(self, url: str, timeout_s: float) -> float:
        t0 = time.monotonic()
        async with httpx.AsyncClient(timeout=2.0) as c:
            while time.monotonic() - t0 < timeout_s:
                if not self.alive():
                    raise BackendStartError(
                        f"server exited with code {self.proc.returncode if self.proc else '?'} before it was "
                        f"healthy; see {self.log_path}: {self.said_at_exit()}")
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
    sys.exit("usage: python -m backends.server_process --guard CMD [ARGS...]")

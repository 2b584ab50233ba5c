"""One serving container's whole life on the Docker SDK: preflight, start, ready, logs, teardown.

Rules it enforces:
- only a local image is used; pulling happens only when asked (``pull=True``, the user's --pull);
- the port is published on 127.0.0.1 only (the server inside binds 0.0.0.0 of its own netns);
- the model directory is mounted read-only; GPUs are requested with ``device_requests``;
- readiness is decided by the caller's protocol probe, never by "the container is running";
- teardown is guaranteed: ``stop()`` from the backend's ``__aexit__`` (normal end, Ctrl-C,
  exceptions), an atexit hook and a SIGTERM handler for the process, and a watchdog process
  (containers/watchdog.py) that removes the container if this process is killed outright;
- every container carries labels (run id, backend, owner pid/start time/host) so
  ``compare containers prune`` can remove whatever a dead run left.

Errors the user can fix (no daemon, missing image, port taken, no GPUs) are UserErrors: one line,
exit code 2. A server that dies while starting is a BackendStartError naming its last log lines.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Awaitable, Callable

from core.errors import BackendStartError
from core.errors import UserError
from core.engine_guard import check_start
from containers.spec import (  # noqa: F401  (re-exported: callers import them from here)
    BACKEND, LABEL, OWNER_HOST, OWNER_PID, OWNER_START, RUN_ID, ContainerSpec, device_requests, is_secret,
    parse_gpus, run_id,
)

class DockerUnavailableError(UserError):
    pass


class ImageNotPresentError(UserError):
    pass


class PortConflictError(UserError):
    pass


class GpuUnavailableError(UserError):
    pass


class ContainerExitedError(BackendStartError):
    pass


def connect() -> Any:
    """A Docker client, or one line saying the daemon is not reachable and how to start it."""
    from core.lazy import require

    docker = require("docker", "docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except Exception as e:  # DockerException, connection errors, permission errors
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailableError(
            f"the Docker daemon is not reachable at {where} ({type(e).__name__}); start it "
            f"(`sudo dockerd &` or `systemctl start docker`, or run scripts/setup.d/20-docker.sh)") from None


def ensure_image(client: Any, image: str, pull: bool = False, pull_flag: str = "") -> Any:
    """The local image; pulled only when ``pull`` (never implicitly). ``pull_flag``: how the
    user spells --pull for this backend, e.g. ``--native tgi.pull=true``."""
    from docker.errors import APIError, ImageNotFound

    try:
        return client.images.get(image)
    except ImageNotFound:
        if not pull:
            how = f" (as {pull_flag})" if pull_flag else ""
            local = " (local images: containers/images/build.sh)" if image.startswith("llm-compare/") else ""
            raise ImageNotPresentError(
                f"image {image} is not present locally; pull it with `docker pull {image}` or pass "
                f"--pull{how}{local}") from None
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    try:
        return client.images.pull(repo, tag=tag)
    except APIError as e:
        raise ImageNotPresentError(f"pulling {image} failed: {e.explanation or e}; check the name "
                                   f"and registry access, or build/load it locally") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ process-wide teardown
_LIVE: dict[str, "ManagedContainer"] = {}
_LOCK = threading.RLock()  # re-entered when SIGTERM arrives while the main thread holds it


def create_tracked(owner: "ManagedContainer", kw: dict[str, Any]) -> Any:
    """create + start (never containers.run: it pulls a missing image silently), registered
    for teardown on exit / Ctrl-C / SIGTERM before it starts. ``owner.container`` is set before
    the start, so a start that fails can still be removed by the owner."""
    owner.container = owner.client.containers.create(**kw)
    with _LOCK:
        _LIVE[owner.name] = owner
    owner.container.start()
    return owner.container
_HOOKS = False


def _teardown_all() -> None:
    with _LOCK:
        live = list(_LIVE.values())
    for c in live:
        c.stop(timeout=2)


def _on_sigterm(signum: int, frame: Any) -> None:
    # turn SIGTERM into an exception so `async with` blocks and atexit hooks run
    _teardown_all()
    raise SystemExit(128 + signum)


def _install_hooks() -> None:
    global _HOOKS
    if _HOOKS:
        return
    _HOOKS = True
    atexit.register(_teardown_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_sigterm)


class ManagedContainer:
    """``with ManagedContainer(spec, backend="tgi") as c: url = c.start(); await c.wait_ready(probe)``."""

    def __init__(self, spec: ContainerSpec, backend: str, pull: bool = False, client: Any = None) -> None:
        self.spec = spec
        self.backend = backend
        self.pull = pull
        self.client = client
        self.container: Any = None
        self.host_port: int | None = None
        self.name = f"llm-compare-{re.sub(r'[^a-zA-Z0-9_.-]', '-', backend)}-{uuid.uuid4().hex[:8]}"
        self.final_logs: str | None = None
        self.exit_code: int | None = None
        self.image_id: str | None = None
        self._watchdog: subprocess.Popen | None = None

    # ---------------------------------------------------------------- preflight
    def preflight(self) -> None:
        """Daemon reachable and image present: checked before any backend starts."""
        check_start(f"a container ({self.spec.image})")
        if self.client is None:
            self.client = connect()
        self.image_id = ensure_image(self.client, self.spec.image, self.pull,
                                     f"--native {self.backend.partition('@')[0]}.pull=true").id

    def labels(self) -> dict[str, str]:
        import psutil

        me = psutil.Process()
        return {RUN_ID: run_id(), BACKEND: self.backend, OWNER_PID: str(me.pid),
                OWNER_START: f"{me.create_time():.2f}", OWNER_HOST: socket.gethostname(),
                **dict(self.spec.extra_labels)}

    # ---------------------------------------------------------------- start / ready
    def start(self) -> str:
        """Create and start the container; returns the base URL on 127.0.0.1."""
        from docker.errors import APIError

        if self.image_id is None:
            self.preflight()
        _install_hooks()
        tries = 1 if self.spec.host_port else 3  # a free port can be taken between pick and bind
        for attempt in range(tries):
            self.host_port = self.spec.host_port or free_port()
            try:
                self._create_and_start()
                break
            except APIError as e:
                self._remove_quietly()
                msg = str(e.explanation or e)
                if re.search(r"port is already allocated|address already in use", msg):
                    if attempt + 1 < tries:
                        continue
                    raise PortConflictError(
                        f"port 127.0.0.1:{self.host_port} is already in use: stop what holds it or pick "
                        f"another (host_port), or leave host_port unset to use a free port") from None
                if re.search(r"device driver|capabilities: \[\[gpu\]\]|nvidia", msg, re.I):
                    raise GpuUnavailableError(
                        f"GPUs were requested (gpus={self.spec.gpus}) but this Docker engine cannot provide "
                        f"them ({msg.splitlines()[0][:160]}); use a host with the NVIDIA Container "
                        f"Toolkit, or set gpus=none") from None
                raise BackendStartError(f"docker could not start {self.spec.image}: {msg.splitlines()[0]}") from None
        self._spawn_watchdog()
        return f"http://127.0.0.1:{self.host_port}"

    def _create_and_start(self) -> None:
        kw: dict[str, Any] = dict(
            image=self.spec.image, command=list(self.spec.command) or None, name=self.name, detach=True,
            environment=dict(self.spec.env), labels=self.labels(),
            ports={f"{self.spec.container_port}/tcp": ("127.0.0.1", self.host_port)},
            volumes={h: {"bind": c, "mode": "ro"} for h, c in self.spec.mounts},
            shm_size=self.spec.shm_size, init=True,
        )
        if self.spec.entrypoint:
            kw["entrypoint"] = list(self.spec.entrypoint)
        if self.spec.gpus:
            kw["device_requests"] = device_requests(self.spec.gpus)
        self.container = create_tracked(self, kw)

    async def wait_ready(self, probe: Callable[[str], Awaitable[bool]], timeout_s: float = 600.0,
                         poll_s: float = 0.1) -> float:
        """Poll ``probe(base_url)`` until True; seconds waited. Fails fast if the container exits."""
        base = f"http://127.0.0.1:{self.host_port}"
        t0 = time.perf_counter()
        next_state = t0
        while True:
            if await probe(base):
                return time.perf_counter() - t0
            now = time.perf_counter()
            if now >= next_state:  # the Docker API call costs more than a probe: every 0.5 s
                next_state = now + 0.5
                state = await asyncio.to_thread(self.state)
                if state.get("Status") in ("exited", "dead"):
                    self.exit_code = state.get("ExitCode")
                    raise ContainerExitedError(
                        f"{self.spec.image} exited with code {self.exit_code} while starting"
                        f"{' (killed: out of memory)' if state.get('OOMKilled') else ''}; last log lines: "
                        + " | ".join(self.logs(tail=12).strip().splitlines()[-12:]))
            if now - t0 > timeout_s:
                raise BackendStartError(
                    f"{self.spec.image} was not ready after {timeout_s:g} s; last log lines: "
                    + " | ".join(self.logs(tail=8).strip().splitlines()[-8:]))
            await asyncio.sleep(poll_s)

    def state(self) -> dict[str, Any]:
        from docker.errors import NotFound

        try:
            self.container.reload()
            return dict(self.container.attrs.get("State", {}))
        except NotFound:
            return {"Status": "removed"}

    def is_running(self) -> bool:
        return self.container is not None and self.state().get("Status") == "running"

    # ---------------------------------------------------------------- logs / teardown
    def logs(self, tail: int | str = "all") -> str:
        if self.container is None:
            return self.final_logs or ""
        try:
            raw = self.container.logs(stdout=True, stderr=True, tail=tail)
        except Exception:  # container already removed
            return self.final_logs or ""
        text = raw.decode("utf-8", "replace")
        for k, v in self.spec.env:  # secrets never reach logs/results
            if is_secret(k) and v:
                text = text.replace(v, "***")
        return text

    def stop(self, timeout: int = 10) -> None:
        """Idempotent: keep the logs, stop gracefully, remove, reap the watchdog."""
        with _LOCK:
            mine = _LIVE.pop(self.name, None)
        if mine is not None and self.container is not None:
            self.final_logs = self.logs(tail=2000)
            try:
                self.container.stop(timeout=timeout)
            except Exception:
                pass  # already gone; remove below is what matters
            try:
                self.exit_code = self.container.attrs.get("State", {}).get("ExitCode")
            except Exception:
                pass
            self._remove_quietly()
        if self._watchdog is not None:
            self._watchdog.terminate()
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()
            self._watchdog = None

    def _remove_quietly(self) -> None:
        if self.container is None:
            return
        with _LOCK:
            _LIVE.pop(self.name, None)
        try:
            self.container.remove(force=True, v=True)
        except Exception:
            pass  # NotFound: gone already

    def _spawn_watchdog(self) -> None:
        # removes the container if this process dies without running any cleanup (SIGKILL)
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "containers.watchdog", str(os.getpid()), self.container.id],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def describe(self) -> dict[str, Any]:
        """Container facts for run.json: what ran, where, and its log tail."""
        return {"name": self.name, "id": self.container.id[:12] if self.container else None,
                "image": self.spec.image, "image_id": self.image_id,
                "port": f"127.0.0.1:{self.host_port}->{self.spec.container_port}/tcp",
                "settings": self.spec.settings(), "labels": self.labels() if self.container else {},
                "exit_code": self.exit_code, "logs_tail": self.logs(tail=200)[-20000:]}

    def __enter__(self) -> "ManagedContainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

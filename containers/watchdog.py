"""What a run leaves behind when it dies without cleaning up (SIGKILL, the OOM killer), removed.

Two watchdogs, each a small process in its own session that outlives its owner:

- ``python -m containers.watchdog PID ID``: started by ManagedContainer.start(); removes the
  container when PID dies. It exits by itself once the container is gone, and is terminated by
  ManagedContainer.stop().
- ``python -m containers.watchdog --reap TAG``: started once per measuring process
  (compare/running/aio.py). That process puts ``LLM_COMPARE_OWNER=TAG`` (its pid and start time)
  into its environment, so every process it starts inherits it, however it is started (vLLM's
  engine core and workers via multiprocessing, servers, their children). When the owner dies
  this watchdog terminates (then kills) every process whose environment carries TAG.

The tag names one process by pid AND start time, so a recycled pid never makes another
process's children look like ours, and ``compare clean`` (``orphans``) removes exactly the
tagged processes whose owner is gone, never anything else.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TAG_ENV = "LLM_COMPARE_OWNER"
REAP_GRACE_S = 3.0
_REAPER: subprocess.Popen | None = None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (killed, not yet reaped by its parent) is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------- tagged processes


def owner_tag(pid: int | None = None) -> str:
    import psutil

    p = psutil.Process(pid)
    return f"{p.pid}:{p.create_time():.2f}"


def tag_alive(tag: str) -> bool:
    """The process the tag names still runs (same pid, same start time, not a zombie)."""
    import psutil

    try:
        pid_s, start_s = tag.split(":", 1)
        p = psutil.Process(int(pid_s))
        return abs(p.create_time() - float(start_s)) <= 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except (ValueError, psutil.NoSuchProcess):
        return False
    except psutil.AccessDenied:
        return True


def _is_container_watchdog(p: Any) -> bool:
    # it inherits the tag but must outlive the owner: it removes the owner's container
    cmd = p.info.get("cmdline") or []
    return "containers.watchdog" in cmd and "--reap" not in cmd


def tagged(tag: str | None = None) -> list[tuple[Any, str]]:
    """(process, its tag) for every process carrying a tag (``tag``: only that one)."""
    import psutil

    me = os.getpid()
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if p.pid == me:
            continue
        try:
            t = p.environ().get(TAG_ENV)
            if not t or (tag is not None and t != tag) or p.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if not _is_container_watchdog(p):
            out.append((p, t))
    return out


def orphans() -> list[tuple[Any, str]]:
    """Processes started by an llm-compare process that is gone (``compare clean`` removes them)."""
    return [(p, t) for p, t in tagged() if not tag_alive(t)]


def _ended(p: Any) -> bool:
    """Exited: reaped here if it is our child, else gone or a zombie. A zombie waits for its
    parent to reap it (a live parent that does not, or one being stopped with it): waiting on
    it as psutil.wait_procs does would spend the whole grace period on a process already dead."""
    import psutil

    try:
        p.wait(timeout=0)
        return True
    except psutil.TimeoutExpired:
        pass
    except psutil.NoSuchProcess:
        return True
    try:
        return bool(p.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _wait_ended(procs: list[Any], timeout_s: float) -> list[Any]:
    """The processes still running after up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if not _ended(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if not _ended(p)]
    return left


def terminate(procs: list[Any], grace_s: float = REAP_GRACE_S) -> list[Any]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL (vLLM's engine core ignores SIGTERM once
    orphaned); returns the processes that were still there to stop."""
    import psutil

    live = []
    for p in procs:
        try:
            p.terminate()
            live.append(p)
        except psutil.NoSuchProcess:
            pass
    left = _wait_ended(live, grace_s)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _wait_ended(left, grace_s)
    return live


def start_reaper() -> None:
    """Tag this process's future children and start the reaper for them (once per process)."""
    global _REAPER
    if _REAPER is not None or sys.platform != "linux":
        return
    try:
        tag = owner_tag()
    except ImportError:  # psutil is a dependency; without it there is no reaper
        return
    os.environ[TAG_ENV] = tag
    # vLLM names its processes with setproctitle, which by default writes the title over the
    # environment block that /proc/PID/environ shows: the tag would vanish from exactly the
    # processes it is for. SPT_NOENV makes it keep the environment (titles are then cut to the
    # length of the original command line, which is only cosmetic).
    os.environ.setdefault("SPT_NOENV", "1")
    env = {k: v for k, v in os.environ.items() if k != TAG_ENV}  # the reaper is not one of them
    _REAPER = subprocess.Popen([sys.executable, "-m", "containers.watchdog", "--reap", tag],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, env=env, cwd=str(Path(__file__).resolve().parent.parent))


def _reap(tag: str) -> int:
    owner = int(tag.split(":", 1)[0])
    while pid_alive(owner):
        time.sleep(0.25)
    for _ in range(3):  # again: a process may have been forking while we stopped the others
        procs = [p for p, _ in tagged(tag)]
        if not procs:
            break
        terminate(procs)
    return 0


def _guard_container(owner: int, container_id: str) -> int:
    import docker
    from docker.errors import NotFound

    client = docker.from_env(timeout=30)
    next_check = 0.0
    while True:
        if not pid_alive(owner):
            try:
                client.containers.get(container_id).remove(force=True, v=True)
            except NotFound:
                pass
            return 0
        now = time.monotonic()
        if now >= next_check:  # the owner removed it already: nothing left to guard
            next_check = now + 5
            try:
                client.containers.get(container_id)
            except NotFound:
                return 0
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--reap":
        return _reap(argv[1])
    return _guard_container(int(argv[0]), argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

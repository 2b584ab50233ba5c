"""Removes a container when the process that owns it dies without cleaning up (e.g. SIGKILL).

Started by ManagedContainer.start() in its own session: ``python -m containers.watchdog PID ID``.
It exits by itself once the container is gone, and is terminated by ManagedContainer.stop().
"""
from __future__ import annotations

import os
import sys
import time


def _alive(pid: int) -> bool:
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


def main(argv: list[str]) -> int:
    owner, container_id = int(argv[0]), argv[1]
    import docker
    from docker.errors import NotFound

    client = docker.from_env(timeout=30)
    next_check = 0.0
    while True:
        if not _alive(owner):
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

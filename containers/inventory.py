"""What containers this tool started, whether their owner still lives, and pruning the orphans.

Every container we start carries labels naming its run, backend and owner (pid, process start
time, host). An owner is alive when a process with that pid exists on this host AND started at
the recorded time (a recycled pid does not keep an orphan alive). Containers labelled by another
host are left alone unless ``all_hosts``.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from containers.manager import BACKEND, LABEL, OWNER_HOST, OWNER_PID, OWNER_START, RUN_ID


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    image: str
    status: str
    backend: str
    run_id: str
    owner_pid: int | None
    owner: str  # "alive", "dead", "other-host"
    ports: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def owner_state(labels: dict[str, str]) -> str:
    import psutil

    if labels.get(OWNER_HOST) not in (None, socket.gethostname()):
        return "other-host"
    try:
        pid = int(labels.get(OWNER_PID, ""))
        started = float(labels.get(OWNER_START, "nan"))
        proc = psutil.Process(pid)
        if abs(proc.create_time() - started) > 1.0 or proc.status() == psutil.STATUS_ZOMBIE:
            return "dead"  # the pid was recycled by an unrelated process, or it is a zombie
        return "alive"
    except (ValueError, psutil.NoSuchProcess):
        return "dead"
    except psutil.AccessDenied:
        return "alive"


def list_ours(client: Any) -> list[Entry]:
    out = []
    for c in client.containers.list(all=True, filters={"label": OWNER_PID}):
        labels = c.labels or {}
        ports = ", ".join(f"{b[0]['HostIp']}:{b[0]['HostPort']}->{p}" for p, b in (c.ports or {}).items() if b)
        try:
            image = c.image.tags[0] if c.image.tags else c.image.short_id
        except Exception:  # image removed under the container
            image = c.attrs.get("Config", {}).get("Image", "?")
        pid = labels.get(OWNER_PID, "")
        out.append(Entry(id=c.short_id, name=c.name, image=image, status=c.status,
                         backend=labels.get(BACKEND, "?"), run_id=labels.get(RUN_ID, "?"),
                         owner_pid=int(pid) if pid.isdigit() else None, owner=owner_state(labels),
                         ports=ports))
    return out


def prune(client: Any, all_hosts: bool = False, dry_run: bool = False) -> list[Entry]:
    """Remove containers whose owning run is dead; returns what was (or would be) removed."""
    from docker.errors import NotFound

    removed = []
    for e in list_ours(client):
        if e.owner == "dead" or (all_hosts and e.owner == "other-host"):
            if not dry_run:
                try:
                    client.containers.get(e.id).remove(force=True, v=True)
                except NotFound:
                    pass
            removed.append(e)
    return removed


__all__ = ["Entry", "LABEL", "list_ours", "owner_state", "prune"]

"""Who writes a run, and whether that process still lives.

run.json records its owner when the run starts: pid, the process's start time (clock ticks after
boot, from /proc) and the boot id. A run killed outright (SIGKILL, the OOM killer) cannot finish
its own record; the next command that reads the results sees ``running`` with an owner that is
gone and records the run as killed (compare/cli/killed.py). The start time and boot id make a
reused pid, or a reboot, read as "gone", never as the owner.
"""
from __future__ import annotations

import os
import socket
from typing import Any


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (after the parenthesised command, which may hold spaces)."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat.rsplit(")", 1)[1].split()[19]) if stat else None
    except (IndexError, ValueError):
        return None


def _state(pid: int) -> str | None:
    stat = _read(f"/proc/{pid}/stat")
    try:
        return stat.rsplit(")", 1)[1].split()[0] if stat else None
    except IndexError:
        return None


def boot_id() -> str | None:
    text = _read("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


def current_owner() -> dict[str, Any]:
    """This process, as run.json's ``owner``."""
    pid = os.getpid()
    return {"pid": pid, "start_ticks": _start_ticks(pid), "boot_id": boot_id(), "host": socket.gethostname()}


def owner_alive(owner: Any) -> bool | None:
    """True: the owner still runs; False: it is gone (dead, a zombie, its pid reused, rebooted
    since); None: cannot tell here (no owner recorded, another host, no /proc)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return None
    if owner.get("host") not in (None, socket.gethostname()):
        return None  # another machine's process: its pid means nothing here
    here = boot_id()
    if owner.get("boot_id") and here and owner["boot_id"] != here:
        return False  # rebooted since: every process of that boot is gone
    pid = owner["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    except OverflowError:
        return False
    if _state(pid) in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    ticks = owner.get("start_ticks")
    now = _start_ticks(pid)
    if ticks is not None and now is not None and now != ticks:
        return False  # the pid was reused by a later process
    if now is None and not os.path.isdir("/proc"):
        return None  # no /proc here: a live pid is all that can be said, and it may be reused
    return True

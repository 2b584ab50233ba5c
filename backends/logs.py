"""Engine logs go to files, never to the user's console.

Engines write through every channel there is: Python logging (vLLM's frontend), print and
warnings (torch, transformers), native code writing to file descriptors 1 and 2 (OpenVINO), and
child processes that inherit those descriptors when they are spawned (vLLM's engine core, the HTTP
servers' launchers). Only a redirect at the file-descriptor level catches them all, so while a
backend lives (start, warm-up, levels, stop) fds 1 and 2 point at its log file
(``<results>/logs/<backend>.log``); a child spawned meanwhile keeps writing there after the
redirect ends. The console writes to :func:`terminal`, a duplicate of the original descriptor
taken before any redirect, so progress stays visible while the engine's own output is filed.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TextIO

LOG_DIR = "logs"
# per process, as the fds they duplicate are: this process's fd 1 and 2 as they were at first use
_TERMINALS: dict[int, TextIO] = {}
_LOGGING_FILE: TextIO | None = None  # where vLLM's Python logging points after the last capture
_ACTIVE: list[Path] = []  # the capture in force (fds are process-wide, so one at a time)


def log_file(results_dir: Path, backend: str) -> Path:
    """``<results>/logs/<backend>.log``, the name made safe for a file (topology names hold '@*:/')."""
    safe = "".join(c if c.isalnum() or c in "-_.+=" else "_" for c in backend)
    if len(safe.encode()) > 200:  # a file name is at most 255 bytes (a long fake@... or --vary name)
        import hashlib

        safe = safe.encode()[:160].decode(errors="ignore") + "-" + hashlib.sha256(backend.encode()).hexdigest()[:16]
    return Path(results_dir) / LOG_DIR / f"{safe}.log"


def terminal(fd: int = 1) -> TextIO:
    """A text stream on a duplicate of ``fd`` taken now (once per fd): it keeps reaching the
    user's terminal (or pipe) while :func:`capture` points fd 1/2 at a log file. Call it before
    the first capture."""
    if fd not in _TERMINALS:
        stream = sys.stdout if fd == 1 else sys.stderr
        stream.flush()
        _TERMINALS[fd] = os.fdopen(os.dup(fd), "w", buffering=1, encoding=getattr(stream, "encoding", None)
                                   or "utf-8", errors="replace")
    return _TERMINALS[fd]


@contextmanager
def terminals_to(out: TextIO, err: TextIO) -> Iterator[None]:
    """:func:`terminal` answers ``out``/``err`` for fd 1/2 meanwhile (``compare`` run in-process with
    its console captured); the duplicates taken before come back afterwards, none is taken here."""
    global _TERMINALS
    saved, _TERMINALS = _TERMINALS, {1: out, 2: err}
    try:
        yield
    finally:
        _TERMINALS = saved


def tail(path: Path | None, lines: int = 8, max_bytes: int = 16384) -> list[str]:
    """The last non-empty lines of a log (empty when there is none)."""
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    # progress bars rewrite their line with '\r': keep what the line ended as
    out = [ln.rsplit("\r", 1)[-1].rstrip() for ln in data.splitlines()]
    return [ln for ln in out if ln.strip()][-lines:]


# a log record's prefix, e.g. vLLM's "(EngineCore pid=7) ERROR 12-01 15:29:47 [core.py:1510] "
_PREFIX = re.compile(r"^(\([\w:-]+ pid=\d+\) )?([A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\] )?")

_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")


def error_tail(path: Path | None, lines: int = 6) -> list[str]:
    """The last lines of a failed engine's log, record prefixes stripped, without traceback frames
    (``File ...`` lines, the source line under each, ``^^^`` markers) or repeats: what is left is
    the exception and what the engine said before it."""
    out: list[str] = []
    skip_next = False
    for ln in tail(path, 80, 65536):
        body = _PREFIX.sub("", ln).rstrip()
        s = body.strip()
        if skip_next and not s.startswith("File "):
            skip_next = False
            continue
        # a frame's "File ..." line and a Python warning's "x.py:N: ...Warning:" line: each is
        # followed by a source line, left out with it
        skip_next = s.startswith("File ") or bool(_WARNING.search(s))
        if skip_next or set(s) <= set("^~ ") or s.startswith("Traceback (most recent call last)"):
            continue
        if body in out:  # the same exception logged and printed: keep its last place
            out.remove(body)
        out.append(body)
    return out[-lines:]


def _point_vllm_logging(path: Path) -> None:
    """vLLM's frontend logs through Python logging to a stream it picked at import; point it at
    the log file too, so its messages land there even outside a redirect (at interpreter exit)."""
    global _LOGGING_FILE
    logger = logging.Logger.manager.loggerDict.get("vllm")
    if not isinstance(logger, logging.Logger):
        return
    new = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
    for h in logger.handlers:
        # vLLM's own console handler only: a subclass (a file handler, or a capturing handler
        # another tool attached, such as pytest's log capture) keeps its stream
        if type(h) is logging.StreamHandler:
            h.setStream(new)
    if _LOGGING_FILE is not None:
        _LOGGING_FILE.close()
    _LOGGING_FILE = new


class _Follower(threading.Thread):
    """Hands each new line of a growing log file to ``on_line`` (``-v``: logs streamed live)."""

    def __init__(self, path: Path, on_line: Callable[[str], None]) -> None:
        super().__init__(daemon=True, name="log-follower")
        self.path, self.on_line = path, on_line
        self._stop_evt = threading.Event()
        self._pos = path.stat().st_size if path.exists() else 0

    def run(self) -> None:
        while not self._stop_evt.wait(0.2):
            self._drain()
        self._drain()

    def _drain(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # whole lines only; the rest is read next time
        self._pos += end
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            if line.strip():
                self.on_line(line.rsplit("\r", 1)[-1])

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(timeout=2)


@contextmanager
def capture(path: Path, on_line: Callable[[str], None] | None = None) -> Iterator[Path]:
    """fds 1 and 2 (and vLLM's logging) into ``path`` (appended) for the body; ``on_line`` hears
    every line written there meanwhile. Nested captures write to the outer file."""
    if _ACTIVE:
        yield _ACTIVE[0]
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for s in (sys.stdout, sys.stderr):
        s.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = (os.dup(1), os.dup(2))
    follower = None
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        _ACTIVE.append(path)
        _point_vllm_logging(path)
        if on_line is not None:
            follower = _Follower(path, on_line)
            follower.start()
        yield path
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for x in (*saved, fd):
            os.close(x)
        _ACTIVE.clear()
        _point_vllm_logging(path)  # vLLM was perhaps imported inside: its handler now exists
        if follower is not None:
            follower.stop()

"""Engine cache: built artifacts (TensorRT-LLM engines, quantized checkpoints) keyed by what decides them.

Key = sha256 over a canonical JSON of: the checkpoint's CONTENT digest (every file's bytes, not its
path or mtime, so a changed checkpoint at the same path misses), the quantization, the argv of every
step that produces the artifact, the TensorRT-LLM version and image id/digest, the GPU name and
compute capability. Runtime-only LlmArgs (KV fraction, batch limits of the PyTorch flow) are left
out on purpose: they do not change the artifact and would only cause false misses.

Publishing is atomic: the builder writes into ``<root>/.tmp/<key>-<pid>-<rand>/`` and the finished
directory is renamed to ``<root>/<key>`` (same filesystem), so a reader sees a whole entry or none.
A per-key ``flock`` serialises concurrent builders across processes: the second one waits (and
says so, naming the builder's pid written in the lock file), then finds the published entry (a
hit). The kernel drops the lock when a builder dies (SIGTERM, SIGKILL), its temp dir (named with
its pid) is swept by the next builder, and nothing was published: the next run builds again.

An entry's meta records the digest of its content (every file's path, size and sha256). An entry
whose meta is missing or whose files no longer match it (a truncated binary, a deleted file) is
damaged: it is never used, but moved aside and rebuilt. The digest is recomputed only when a file
changed since it was last checked (size, mtime, ctime, inode; kept in ``.verified/``), so a hit
costs a stat per file. Entries written before digests were recorded are used as they are.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from containers.watchdog import pid_alive, terminate
from core.errors import BackendStartError
from core.errors import UserError
from core.fsutil import write_json_atomic

META = "meta.json"
DIGEST = "content_sha256"  # meta field: tree_digest of the entry when it was published
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def default_root() -> Path:
    base = os.environ.get("LLM_COMPARE_CACHE", str(Path.home() / ".cache" / "llm-compare"))
    return Path(os.environ.get("LLM_COMPARE_ENGINE_CACHE", Path(base) / "engines"))


class CheckpointError(UserError):
    """The checkpoint directory is missing files a build needs."""


def validate_checkpoint(model_dir: str | os.PathLike[str]) -> None:
    """config.json, at least one weight file, and every shard a *.index.json names."""
    d = Path(model_dir)
    if not d.is_dir():
        raise CheckpointError(f"checkpoint {d} is not a directory; pass --model DIR (a local HF checkpoint)")
    if not (d / "config.json").is_file():
        raise CheckpointError(f"checkpoint {d} has no config.json; pass the directory of a complete HF checkpoint")
    weights = [p for p in d.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)]
    if not weights:
        raise CheckpointError(f"checkpoint {d} has no weight files (*.safetensors/*.bin); copy the weights there")
    for index in d.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError):
            raise CheckpointError(f"checkpoint {d}: {index.name} is not valid JSON; re-copy the checkpoint") from None
        missing = sorted(s for s in shards if not (d / s).is_file())
        if missing:
            raise CheckpointError(f"checkpoint {d} is missing {len(missing)} shard(s) named in {index.name}, "
                                  f"e.g. {missing[0]}; re-copy the checkpoint")


def file_sha256(path: Path) -> str:
    """A file's sha256, hex (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_digest(model_dir: str | os.PathLike[str], memo_dir: Path | None = None) -> str:
    """sha256 over (relative path, size, content sha256) of every regular file, sorted.

    Content hashes of big files are memoised by (path, size, mtime_ns, ctime_ns, inode): any write
    to a file changes its ctime, so a rewritten file is re-hashed even if size and mtime are kept.
    """
    d = Path(model_dir)
    validate_checkpoint(d)
    memo_path = None
    memo: dict[str, Any] = {}
    if memo_dir is not None:
        memo_path = memo_dir / (hashlib.sha256(str(d.resolve()).encode()).hexdigest()[:24] + ".json")
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}
    new_memo: dict[str, Any] = {}
    lines = []
    for p in sorted(x for x in d.rglob("*") if x.is_file()):
        rel = p.relative_to(d).as_posix()
        st = p.stat()
        sig = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        old = memo.get(rel)
        sha = old["sha256"] if old and old.get("sig") == sig else file_sha256(p)
        new_memo[rel] = {"sig": sig, "sha256": sha}
        lines.append(f"{rel}\0{st.st_size}\0{sha}\n")
    if memo_path is not None and new_memo != memo:
        write_json_atomic(memo_path, new_memo)
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def cache_key(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _files(path: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every file and symlink of an entry but its meta, sorted."""
    return sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*")
                  if (p.is_symlink() or p.is_file()) and p.relative_to(path).as_posix() != META)


def _signature(path: Path) -> dict[str, list[int]]:
    """Per file: what changes when it is written to (size, mtime, ctime, inode); cheap to take."""
    out = {}
    for rel, p in _files(path):
        st = p.lstat()
        out[rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    return out


def tree_digest(path: Path) -> str:
    """sha256 over (relative path, size, content sha256) of every file of an entry but its meta;
    a symlink counts by its target."""
    lines = []
    for rel, p in _files(path):
        if p.is_symlink():
            lines.append(f"{rel}\0->{os.readlink(p)}\n")
        else:
            lines.append(f"{rel}\0{p.stat().st_size}\0{file_sha256(p)}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path  # the published directory; artifacts live directly in it
    meta: dict[str, Any]

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file() and not p.is_symlink())


class BuildFailed(BackendStartError):
    """A build step failed; nothing was published. One line: the cause, then the log's last lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        lines = [ln.strip() for ln in log_tail.strip().splitlines() if ln.strip()]
        super().__init__(message + (f"; nothing was cached; last log lines: {' | '.join(lines)}" if lines else ""))
        self.log_tail = log_tail


class BuildStopped(BuildFailed):
    """The run was stopped (a signal) while a build step ran: the step was ended, nothing published."""


def run_step(argv: list[str], stop: threading.Event | None = None, tick: Callable[[float], None] | None = None,
             **popen: Any) -> int:
    """Run one build step (a converter, cmake) to its end and return its exit code; ``tick(elapsed)``
    is called about once a second. When ``stop`` is set (the run got SIGTERM or Ctrl-C on its own
    process, which the step does not see), the step and everything it started (ninja, compilers) are
    terminated, then killed, and :class:`BuildStopped` is raised: the caller's temp dir is dropped
    and nothing is published, instead of the stop waiting for a conversion or build of many minutes."""
    import psutil

    p = subprocess.Popen(argv, **popen)
    t0 = time.monotonic()
    while True:
        try:
            return p.wait(timeout=1.0 if stop is None else 0.2)
        except subprocess.TimeoutExpired:
            pass
        if stop is not None and stop.is_set():
            try:
                procs = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                procs = []
            terminate(procs, grace_s=10)
            p.wait()
            raise BuildStopped(f"{os.path.basename(argv[0])} was stopped after {time.monotonic() - t0:.0f} s "
                               f"because the run was stopped")
        if tick is not None:
            tick(time.monotonic() - t0)


class EngineCache:
    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # ------------------------------------------------------------------ reading
    def get(self, key: str) -> Entry | None:
        path = self.root / key
        try:
            meta = json.loads((path / META).read_text())
        except (OSError, ValueError):
            return None
        return Entry(key, path, meta)

    def damage(self, entry: Entry) -> str | None:
        """Why ``entry`` must not be used (its files no longer match the digest in its meta), or None."""
        recorded = entry.meta.get(DIGEST)
        if recorded is None:
            return None  # (written before digests were recorded)
        memo = self.root / ".verified" / f"{entry.key}.json"
        sig = _signature(entry.path)
        try:
            if json.loads(memo.read_text()) == sig:
                return None  # nothing written to since its digest was last checked
        except (OSError, ValueError):
            pass
        if tree_digest(entry.path) != recorded:
            return "its files do not match the digest recorded when it was built"
        try:
            write_json_atomic(memo, sig)
        except OSError:
            pass  # (a read-only cache: checked again next time)
        return None

    def entries(self) -> list[Entry]:
        if not self.root.is_dir():
            return []
        out = []
        for p in sorted(self.root.iterdir()):
            if p.is_dir() and not p.name.startswith("."):
                e = self.get(p.name)
                if e is not None:
                    out.append(e)
        return out

    def find(self, prefix: str) -> list[Entry]:
        return [e for e in self.entries() if e.key.startswith(prefix)]

    # ------------------------------------------------------------------ writing
    @contextmanager
    def _lock(self, key: str, timeout_s: float, say: Callable[[str], None] | None = None) -> Iterator[None]:
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{key}.lock", "a+") as f:
            deadline = time.monotonic() + timeout_s
            waited = False
            while True:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waited and say is not None:
                        f.seek(0)
                        holder = f.read().strip() or "?"
                        say(f"waiting for another build of engine cache entry {key[:12]} (process {holder}) "
                            f"to finish; it is used once published")
                    waited = True
                    if time.monotonic() > deadline:
                        raise UserError(f"another build of cache entry {key} has held its lock for over "
                                        f"{timeout_s:.0f}s; wait for it or check `compare cache ls`") from None
                    time.sleep(0.05)
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")  # (who holds it, for the next one's message)
            f.flush()
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _sweep_dead_tmp(self) -> None:
        """Remove temp dirs of builders that died (pid in the name no longer alive)."""
        tmp = self.root / ".tmp"
        if not tmp.is_dir():
            return
        for p in tmp.iterdir():
            try:
                pid = int(p.name.split("-")[1])
            except (IndexError, ValueError):
                continue
            if pid != os.getpid() and not pid_alive(pid):
                _rmtree(p)

    def get_or_build(self, key: str, meta: dict[str, Any], build: Callable[[Path], None],
                     lock_timeout_s: float = 6 * 3600,
                     log: Callable[[str], None] | None = None) -> tuple[Entry, bool]:
        """Return (entry, hit). ``build(tmpdir)`` fills tmpdir; on any exception nothing is published.
        A damaged entry is rebuilt; ``log`` hears why, and that another builder is waited for."""
        say = log or (lambda s: print(s, file=sys.stderr, flush=True))
        entry = self._usable(key, say)
        if entry is not None:
            return entry, True
        with self._lock(key, lock_timeout_s, say):
            entry = self._usable(key, None)  # another process may have published while we waited
            if entry is not None:
                return entry, True
            self._sweep_dead_tmp()
            if (self.root / key).exists() or (self.root / key).is_symlink():
                self._discard(key)  # damaged (said above): never used, moved aside before the rebuild
            tmp = self.root / ".tmp" / f"{key}-{os.getpid()}-{secrets.token_hex(4)}"
            tmp.mkdir(parents=True)
            try:
                build(tmp)
                write_json_atomic(tmp / META, {**meta, "key": key, "created": time.time(),
                                               DIGEST: tree_digest(tmp)})
                os.rename(tmp, self.root / key)
                _fsync_dir(self.root)
            except BaseException:
                _rmtree(tmp)
                raise
        entry = self.get(key)
        assert entry is not None
        write_json_atomic(self.root / ".verified" / f"{key}.json", _signature(entry.path))
        return entry, False

    def _usable(self, key: str, say: Callable[[str], None] | None) -> Entry | None:
        """The published entry ``key`` when it is whole; None when missing or damaged (said to ``say``)."""
        entry = self.get(key)
        problem = self.damage(entry) if entry is not None else None
        if entry is None and (self.root / key).is_dir():
            problem = f"its {META} is missing or unreadable"
        if problem and say is not None:
            say(f"engine cache entry {key[:12]} is damaged ({problem}); it is not used: building it again")
        return entry if entry is not None and problem is None else None

    def _discard(self, key: str) -> None:
        """Move an entry aside (atomic for readers), then delete it; the caller holds the key's lock."""
        path = self.root / key
        trash = self.root / ".tmp" / f"{key}-{os.getpid()}-rm{secrets.token_hex(4)}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, trash)
        _rmtree(trash) if trash.is_dir() and not trash.is_symlink() else trash.unlink()
        (self.root / ".verified" / f"{key}.json").unlink(missing_ok=True)

    def remove(self, key: str) -> None:
        """Under the key's lock: move the entry aside (atomic for readers), then delete it."""
        with self._lock(key, 60):
            if (self.root / key).exists():
                self._discard(key)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rmtree(path: Path) -> None:
    """rmtree that first makes every directory writable (some tools write read-only trees)."""
    if not path.exists():
        return
    for root, _dirs, _files in os.walk(path):
        try:
            os.chmod(root, stat.S_IRWXU)
        except OSError:
            pass  # not ours (e.g. written by a root container): rmtree reports it
    shutil.rmtree(path)

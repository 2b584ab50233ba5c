"""The results directory: run.json (summary + provenance) and requests.jsonl (raw stamps).

run.json is rewritten atomically after every load level, so a run that fails or is interrupted
keeps everything it measured, with ``status`` saying how it ended. The writer holds the run as
the typed ``RunResults`` (core/results/models.py) from the start: callers replace a backend's
section or a field through ``update``/``update_backend`` (validated there, so a wrong field fails
where it is made), and a flush only serialises the model, never re-validates the whole run. requests.jsonl gets one complete line per finished request (one append each; a torn
last line is cut off or skipped by readers); workload.jsonl holds the exact request list so a
run can be replayed. The directory is created atomically and probed before any engine starts;
a write that fails mid-run (full disk) stops the run with status "failed" naming the problem.
A run id is one name under the results root (never a path); an id whose run never measured
anything (it failed or was killed before its first request) may be used again. run.json records
its owner (core/results/owner.py), so a run killed outright can be told from one still running.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any, Iterator, Sequence

from core.errors import RunFailed, UserError
from core.fsutil import (disk_problem, make_dirs, missing_top, open_user_file, read_user_json, remove_empty_dirs,
                          write_atomic)
from core.records import RequestRecord
from core.shape import ShapeError
from core.results.migrate import to_current
from core.results.evolve import evolve
from core.results.models import SCHEMA_VERSION, BackendResult, RunResults
from core.results.owner import current_owner
from core.results.rundir import REQUESTS, check_results_dir_free, never_measured, set_aside

# records are written on the measuring event loop: msgspec (a dependency) encodes them ~5x faster than json
from msgspec.json import encode as _encode


def record_line(rec: RequestRecord) -> bytes:
    """One requests.jsonl line. msgspec writes NaN/inf as null, so a record that may hold one
    (logprobs, engine metrics) takes json's way, which round-trips them as Python reads JSON."""
    if rec.logprobs or rec.engine_metrics:
        return (json.dumps(rec.to_json()) + "\n").encode()
    return _encode(rec) + b"\n"  # the dataclass field by field, tuples as arrays: to_json's JSON


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


RUN_ID_MAX = 128
_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` cannot name a results directory (None: it can). It is one path component
    under the results root: a separator or ``..`` would write the run elsewhere."""
    if not run_id:
        return "a run id cannot be empty"
    if len(run_id) > RUN_ID_MAX:
        return f"a run id is at most {RUN_ID_MAX} characters (this one has {len(run_id)})"
    if not _RUN_ID.fullmatch(run_id):
        return ("a run id is a name of letters, digits, '.', '_' and '-', not starting with a dot "
                "(no path separators), e.g. baseline-v1")
    return None


def check_run_id(run_id: str) -> None:
    problem = run_id_problem(run_id)
    if problem:
        raise UserError(f"--run-id {run_id!r}: {problem}")


def dump(run: RunResults) -> dict[str, Any]:
    """JSON-ready dict of a run: only the fields that were given (absent stays absent), NaN as
    null (a metric without a value, e.g. an SLO check when no request succeeded) so the file
    is strict JSON for readers outside Python."""
    out: dict[str, Any] = json.loads(run.model_dump_json(exclude_unset=True))
    return out


def run_json_bytes(run: RunResults) -> bytes:
    """run.json's text: the fields that were given, NaN as null, indented as it always was."""
    return run.model_dump_json(indent=2, exclude_unset=True).encode() + b"\n"


class ResultsWriteError(RunFailed):
    """The results directory stopped taking writes mid-run (full disk, quota, I/O error)."""


# Space set aside in the results directory while a run measures, given back when a write fails,
# so that the final run.json (status "failed" and why) still fits on a disk that filled up.
RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 64 * 1024
MAX_RECORD = 64 << 20  # one request's record (its tokens' times and logprobs) is kilobytes


def create_results_dir(root: str | os.PathLike[str], run_id: str) -> Path:
    """Create ``root/run_id`` atomically (it must not exist: of simultaneous starts with one run
    id exactly one gets it) and prove it takes writes, before any engine starts. Bad -> UserError
    (one line, nothing left behind)."""
    check_run_id(run_id)  # before anything is created
    root = Path(root)
    try:
        made = make_dirs(root)  # (taken back when the probe below fails: nothing is left behind)
    except FileExistsError:
        raise UserError(f"results directory {root} is a file, not a directory; pass a directory with --out") from None
    except OSError as e:
        raise UserError(f"cannot create the results directory {root}: {disk_problem(e)}; pass a writable "
                        f"directory with --out") from None
    d = root / run_id
    try:
        try:
            d.mkdir()  # no exist_ok: the existence check and the creation are one step
        except FileExistsError:
            check_results_dir_free(root, run_id)  # refuses unless it holds a run that never measured
            set_aside(d)
            d.mkdir()  # (a simultaneous start with the same id that got there first wins)
    except FileExistsError:
        raise UserError(f"results directory {d} already exists; pick another --run-id") from None
    except OSError as e:
        raise UserError(f"cannot create the results directory {d}: {disk_problem(e)}; pass a writable "
                        f"directory with --out") from None
    try:  # the probe: a file written, synced and removed
        probe = d / ".write-probe"
        with open(probe, "wb") as f:
            f.write(b"probe\n")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        shutil.rmtree(d, ignore_errors=True)
        remove_empty_dirs(made, root)
        raise UserError(f"cannot write to the results directory {root}: {disk_problem(e)}; pass a writable "
                        f"directory with --out") from None
    return d


class ResultsWriter:
    """Writes one run's results directory (created by ``create_results_dir``).

    Records are appended to requests.jsonl one whole line per ``write`` (O_APPEND): a crash or a
    full disk leaves at most a torn last line without its newline, which the writer cuts off when
    it can and readers skip with a warning when it could not. The first write that fails (any
    file) stops the run: ResultsWriteError naming the disk problem, and run.json says "failed"
    and why (written into the reserved space). Later writes are dropped silently: the run is
    already failing."""

    def __init__(self, root: Path, run_id: str, header: dict[str, Any]) -> None:
        made = self._made = missing_top(Path(root))  # (taken back when the directory cannot be written)
        self.dir = create_results_dir(root, run_id)
        self._run = RunResults.model_validate({
            "schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "running",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "owner": current_owner(), **header,
            "backends": {}})
        self.error: ResultsWriteError | None = None
        self._req = -1
        try:
            self._req = os.open(self.dir / REQUESTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
            self._req_size = 0
            self._reserve()
            self._write_run()
        except OSError as e:
            self._close_fd()
            shutil.rmtree(self.dir, ignore_errors=True)
            remove_empty_dirs(made, Path(root))
            raise UserError(f"cannot write to the results directory {self.dir}: {disk_problem(e)}; pass a "
                            f"writable directory with --out") from None

    @property  # the run so far, typed (frozen: change it through ``update``/``update_backend``)
    def results(self) -> RunResults:
        return self._run

    @property
    def run(self) -> dict[str, Any]:
        """The run so far as run.json's JSON (a copy, for printing; changes go through ``update``)."""
        return dump(self._run)

    def update(self, **fields: Any) -> RunResults:
        """Set top-level fields of run.json (validated now; written at the next flush)."""
        self._run = evolve(self._run, **fields)
        return self._run

    def backend(self, name: str) -> BackendResult:
        """A backend's section so far (a pending, empty one before anything was recorded)."""
        entry = self._run.backends.get(name)
        return entry if entry is not None else BackendResult(status="pending", levels={})

    def set_backend(self, name: str, entry: BackendResult) -> BackendResult:
        self._run = evolve(self._run, backends={**self._run.backends, name: entry})
        return entry

    def update_backend(self, name: str, **fields: Any) -> BackendResult:
        """Set fields of a backend's section (validated now; written at the next flush)."""
        return self.set_backend(name, evolve(self.backend(name), **fields))

    def _reserve(self) -> None:
        fd = os.open(self.dir / RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except (AttributeError, OSError) as e:  # not every file system allocates: write zeros
                if isinstance(e, OSError) and e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                os.write(fd, bytes(RESERVE_BYTES))
        finally:
            os.close(fd)

    def _release(self) -> None:
        with suppress(OSError):
            os.unlink(self.dir / RESERVE_NAME)

    def _fail(self, what: str, e: OSError) -> ResultsWriteError:
        """The first failed write: cut the torn line, give back the reserve, record "failed"."""
        err = ResultsWriteError(f"cannot write {what} in {self.dir}: {disk_problem(e)}; free space on that "
                                f"disk (or pass another --out) and run again; the results so far are kept")
        if self.error is not None:
            return self.error
        self.error = err
        if self._req >= 0:
            with suppress(OSError):  # (when it fails, readers skip a torn last line)
                os.ftruncate(self._req, self._req_size)  # the torn part of the last line
        self._release()
        # the one measuring when the disk failed
        backends = {name: evolve(entry, status="failed", error=str(err)) if entry.status == "running" else entry
                    for name, entry in self._run.backends.items()}
        self.update(status="failed", finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), error=str(err),
                    backends=backends)
        with suppress(OSError):  # (nothing can be written there any more: the last complete run.json stays)
            self._write_run()
        return err

    def write_workload(self, requests: list[dict[str, Any]]) -> None:
        """Written before anything starts: a disk that cannot take it is refused like a bad --out
        (UserError), and the directory is taken back (nothing was measured, nothing is kept)."""
        try:
            write_atomic(self.dir / "workload.jsonl", "".join(json.dumps(r) + "\n" for r in requests))
        except OSError as e:
            self._close_fd()
            shutil.rmtree(self.dir, ignore_errors=True)
            remove_empty_dirs(self._made, self.dir.parent)
            raise UserError(f"cannot write workload.jsonl in {self.dir}: {disk_problem(e)}; free space on that "
                            f"disk or pass another --out; nothing was written") from None

    def add_record(self, rec: RequestRecord) -> None:
        self.add_records((rec,))

    def add_records(self, recs: Sequence[RequestRecord]) -> None:
        """Records appended in one system call (the runner's records that ended in one pass of its
        event loop: one write on the client's core for all of them, not one each). A write that
        fails part-way keeps the whole lines before it."""
        if self.error is not None or not recs:
            return
        data = b"".join(record_line(r) for r in recs)
        n = 0
        try:
            n = os.write(self._req, data)
            while n < len(data):  # a short write (the disk filled mid-line): the rest raises ENOSPC
                n += os.write(self._req, data[n:])
        except OSError as e:
            self._req_size += data.rfind(b"\n", 0, n) + 1  # (the whole lines that made it)
            raise self._fail(REQUESTS, e) from None
        self._req_size += len(data)

    def write_text(self, relpath: str, text: str) -> None:
        if self.error is not None:
            return
        try:
            write_atomic(self.dir / relpath, text)
        except OSError as e:
            raise self._fail(relpath, e) from None

    def _write_run(self) -> None:
        write_atomic(self.dir / "run.json", run_json_bytes(self._run))

    def flush(self) -> None:
        if self.error is not None:
            return  # run.json already says how the run ended
        try:
            self._write_run()
        except OSError as e:
            raise self._fail("run.json", e) from None

    def finish(self, status: str, error: str | None = None) -> None:
        if self.error is not None:  # a failed write ended the run, whatever the caller saw
            status, error = "failed", error or str(self.error)
        self._release()  # (after a failure: already given back)
        self.update(status=status, finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **({"error": error} if error else {}))
        try:
            self._write_run()
        except OSError as e:
            if self.error is None:
                raise self._fail("run.json", e) from None
        finally:
            self._close_fd()

    def _close_fd(self) -> None:
        if self._req >= 0:
            os.close(self._req)
            self._req = -1


def as_run(run: RunResults | dict[str, Any]) -> RunResults:
    """Readers accept the typed run or a run.json-shaped dict (of any readable schema version)."""
    return run if isinstance(run, RunResults) else to_current(run)


def load_run(path: str | os.PathLike[str]) -> RunResults:
    """run.json of a results directory (or the file itself); bad input is a one-line UserError."""
    p = Path(path)
    run_json = p / "run.json" if p.is_dir() else p
    if p.is_dir() and not run_json.exists() and not run_json.is_symlink():
        raise UserError(f"{p} holds no run.json: pass a results directory written by `compare run`")
    if not run_json.exists() and not run_json.is_symlink():
        raise UserError(f"{run_json} not found: pass a results directory written by `compare run`")
    doc = read_user_json(run_json, "results file", "pass a results directory written by `compare run`")
    return to_current(doc, str(run_json))


def records_file(path: str | os.PathLike[str]) -> Path:
    """requests.jsonl, or requests.jsonl.gz when only that is there (archived results)."""
    p = Path(path) / REQUESTS
    gz = p.with_name(p.name + ".gz")
    return gz if not p.exists() and gz.is_file() else p


def iter_records(path: str | os.PathLike[str]) -> Iterator[RequestRecord]:
    """The records of requests.jsonl (or requests.jsonl.gz when only that is there). A torn last
    line (no newline, not JSON: the writer died or the disk filled while appending it) is skipped
    with a one-line warning on stderr; a corrupt line anywhere else raises (load_results makes that
    a UserError)."""
    p = records_file(path)
    with open_user_file(p, "results file", "pass a complete results directory") as raw_f:
        import gzip

        f = gzip.GzipFile(fileobj=raw_f) if p.suffix == ".gz" else raw_f
        for n, raw in enumerate(iter(lambda: f.readline(MAX_RECORD), b""), 1):  # (bounded: NULs have no lines)
            if len(raw) >= MAX_RECORD and not raw.endswith(b"\n"):
                raise ValueError(f"line {n} is longer than {MAX_RECORD >> 20} MiB, so not a record")
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw)
            except ValueError as e:
                if not raw.endswith(b"\n"):  # (only the last line can lack one) never finished
                    sys.stderr.write(f"warning: {p}: skipped the torn last line ({len(raw)} bytes, no "
                                     f"newline): the run stopped while writing it\n")
                    return
                if isinstance(e, UnicodeDecodeError):
                    raise
                raise ValueError(f"line {n} is not JSON ({getattr(e, 'msg', e)})") from None
            try:
                yield RequestRecord.from_json(doc)
            except ShapeError as e:
                raise ValueError(f"line {n}: {e}") from None


def load_results(path: str | os.PathLike[str]) -> tuple[RunResults, list[RequestRecord]]:
    """run.json + records of a results directory, with bad input as one-line UserErrors."""
    run = load_run(path)
    if not records_file(path).exists():
        raise UserError(f"{path}: no requests.jsonl; pass a complete results directory")
    try:
        return run, list(iter_records(path))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        problem = ("not UTF-8" if isinstance(e, UnicodeDecodeError) else
                   str(e) if type(e) is ValueError else f"{type(e).__name__}: {e}")
        raise UserError(f"{path}/requests.jsonl has a corrupt line ({problem}); "
                        f"pass a complete results directory") from None

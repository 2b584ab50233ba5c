"""Atomic file writes (readers never see a half-written results file), and reading and writing the
files and directories a user names, with whatever is wrong with them as one line."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc/self/status)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # (elsewhere: read by setting it back at once, at import)
    os.umask(old)
    return old


# the mode every file we write gets, as open() would create it: mkstemp's 0600 made run.json
# unreadable to the group/others that could read requests.jsonl next to it
FILE_MODE = 0o666 & ~_umask()


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """``path`` holds ``data`` whole, or is left as it was (a full disk, a kill mid-write): written
    to a temp file beside it, synced, renamed over it. An OSError names ``path``."""
    path = Path(path)
    created = make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        remove_empty_dirs(created, path.parent)
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        remove_empty_dirs(created, path.parent)
        if isinstance(e, OSError) and e.filename is None:  # (a write: say which file it was)
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def disk_problem(e: OSError) -> str:
    """"No space left on device (ENOSPC)": the OS's words and the errno name."""
    import errno

    name = errno.errorcode.get(e.errno or 0)
    text = e.strerror or str(e)
    return f"{text} ({name})" if name else text


def missing_top(d: Path) -> Path | None:
    """The topmost part of ``d`` that does not exist yet (None: ``d`` is there): what
    ``d.mkdir(parents=True)`` would create, so a caller that fails can take it back."""
    top = None
    for p in [d, *d.parents]:
        if p.exists() or p.is_symlink():
            break
        top = p
    return top


def make_dirs(d: Path) -> Path | None:
    """``d.mkdir(parents=True, exist_ok=True)``; returns :func:`missing_top` from before."""
    top = missing_top(d)
    d.mkdir(parents=True, exist_ok=True)
    return top


def remove_empty_dirs(top: Path | None, d: Path) -> None:
    """Remove ``d`` and its parents up to ``top`` (from :func:`make_dirs`) while they are empty."""
    if top is None:
        return
    for p in [d, *d.parents]:
        try:
            p.rmdir()
        except OSError:
            return
        if p == top:
            return


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


# ---------------------------------------------------------------- reading what a user gave us
#
# Every file the tool reads on a user's say-so (specs, workloads, datasets, results, baselines,
# tunes) comes through these: whatever is wrong with it (missing, a directory, unreadable, a
# symlink loop, not UTF-8, not JSON/YAML, the wrong shape) is one UserError naming the file and
# the problem, never a traceback.


def _problem(e: OSError) -> str:
    import errno

    if e.errno == errno.ELOOP:
        return "is a symlink loop"
    if e.errno == errno.ENOENT:
        return "does not exist"
    if e.errno == errno.EISDIR:
        return "is a directory, not a file"
    if e.errno == errno.ENOTDIR:
        return "does not exist (a part of the path is a file)"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "is not readable (permission denied)"
    name = errno.errorcode.get(e.errno or 0)
    text = e.strerror or str(e)
    return f"cannot be read: {text} ({name})" if name else f"cannot be read: {text}"


def _user_error(what: str, path: str | os.PathLike[str], problem: str, fix: str | None) -> Exception:
    from core.errors import UserError

    return UserError(f"{what} {path} {problem}" + (f"; {fix}" if fix else ""))


def open_user_file(path: str | os.PathLike[str], what: str = "file", fix: str | None = None) -> Any:
    """A file the user named, open for binary reading; missing, a directory, unreadable: UserError."""
    import stat

    if "\0" in os.fspath(path):  # (no file system has such a name; os.open raises ValueError)
        raise _user_error(what, path, "holds a NUL character, so it names no file", fix)
    try:  # non-blocking: opening a FIFO must not wait for a writer (it is refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a loop, missing, unreadable: here
    except OSError as e:
        problem = _problem(e)
        raise _user_error(what, path, problem, fix or ("check the path" if problem == "does not exist" else
                                                       None)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # a directory; a FIFO or device would block or never end
        os.close(fd)
        kind = "is a directory, not a file" if stat.S_ISDIR(mode) else "is not a regular file (a pipe or device)"
        raise _user_error(what, path, kind, fix)
    return os.fdopen(fd, "rb")


def check_user_file(path: str | os.PathLike[str], what: str = "file", fix: str | None = None) -> None:
    """Fail early (before anything starts) when a file the user named cannot be read."""
    open_user_file(path, what, fix).close()


# The most of a user's file read into memory: a ShareGPT dump is ~700 MB; a file larger than this is
# a mistake (a disk image, a log) that would take the machine's memory before its first line is parsed.
MAX_USER_FILE = 1 << 30


def _size_text(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def read_user_bytes(path: str | os.PathLike[str], what: str = "file", fix: str | None = None,
                    limit: int = MAX_USER_FILE) -> bytes:
    """The bytes of a file the user named, at most ``limit`` of them; any way it cannot be read,
    and a larger file, is one UserError."""
    with open_user_file(path, what, fix) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise _user_error(what, path, f"is too large ({_size_text(size)}; at most {_size_text(limit)} is read)",
                              fix or "pass a smaller file")
        try:  # bounded even where the size said less (a file still growing, a /proc file)
            data: bytes = f.read(limit + 1)
        except OSError as e:
            raise _user_error(what, path, _problem(e), fix) from None
        if len(data) > limit:
            raise _user_error(what, path, f"is too large (more than {_size_text(limit)}; at most that is read)",
                              fix or "pass a smaller file")
        return data


def read_if_regular(path: str | os.PathLike[str], limit: int = MAX_USER_FILE) -> bytes | None:
    """A file's bytes, or None when it is missing, unreadable, not a regular file (a FIFO or a
    device put where a results file belongs would block or never end) or larger than ``limit``:
    for the quick looks (is this run still running?) whose caller passes over what it cannot read."""
    from core.errors import UserError

    try:
        return read_user_bytes(path, limit=limit)
    except UserError:
        return None


def read_user_text(path: str | os.PathLike[str], what: str = "file", fix: str | None = None,
                   limit: int = MAX_USER_FILE) -> str:
    """A user's file as UTF-8 text (a BOM is dropped); not UTF-8 -> UserError naming the byte."""
    raw = read_user_bytes(path, what, fix, limit)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise _user_error(what, path, f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at line {line}, offset "
                                      f"{e.start})", fix or "save it as UTF-8") from None


def parse_user_json(text: str, path: str | os.PathLike[str], what: str = "file", fix: str | None = None,
                    line: int | None = None) -> Any:
    """One JSON document; invalid -> UserError with its line and column (``line``: of a JSONL file)."""
    try:
        return json.loads(text)
    except ValueError as e:  # JSONDecodeError, and recursion/size errors json raises as ValueError
        msg = getattr(e, "msg", str(e))
        lineno, colno = getattr(e, "lineno", None), getattr(e, "colno", None)
        if line is not None:
            where = f"line {line}" + (f", column {colno}" if colno is not None else "")
        else:
            where = f"line {lineno}, column {colno}" if lineno is not None else "somewhere"
        raise _user_error(what, path, f"is not valid JSON at {where} ({msg})", fix) from None
    except RecursionError:
        raise _user_error(what, path, "is not valid JSON (nested too deeply)", fix) from None


def read_user_json(path: str | os.PathLike[str], what: str = "file", fix: str | None = None) -> Any:
    return parse_user_json(read_user_text(path, what, fix), path, what, fix)


def read_user_jsonl(path: str | os.PathLike[str], what: str = "file", fix: str | None = None) -> list[Any]:
    """Every non-blank line of a JSONL file as JSON (a bad line: UserError naming its number)."""
    rows = []
    for n, line in enumerate(read_user_text(path, what, fix).splitlines(), 1):
        if line.strip():
            rows.append(parse_user_json(line, path, what, fix, line=n))
    return rows


# a spec or workload YAML is a screenful; parsing a large one would take minutes
MAX_CONFIG_FILE = 16 << 20


def read_user_yaml(path: str | os.PathLike[str], what: str = "file", fix: str | None = None) -> Any:
    """A user's YAML file (safe loader); bad syntax -> UserError with the line."""
    import yaml

    text = read_user_text(path, what, fix, MAX_CONFIG_FILE)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise _user_error(what, path, f"is not valid YAML{where}", fix or "fix the syntax") from None
    except RecursionError:
        raise _user_error(what, path, "is not valid YAML (nested too deeply)", fix) from None


def check_dir_option(path: str | os.PathLike[str], flag: str, must_exist: bool = False) -> None:
    """A directory option (``--out``, ``--dir``, ``--cache-dir``): refused at once when it is a file, a
    symlink loop, under a file, or (``must_exist``) missing; a missing one is otherwise created later."""
    import errno

    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOENT and not must_exist:
            parent = Path(os.path.abspath(path)).parent
            while not parent.exists() and parent != parent.parent:  # the deepest part that exists
                parent = parent.parent
            if parent.is_dir() or parent == parent.parent:
                return
            raise _user_error(flag, path, f"cannot be created: {parent} is a file", "pass a directory") from None
        if e.errno == errno.ENOTDIR:
            raise _user_error(flag, path, "cannot be created (a part of its path is a file)",
                              "pass a directory") from None
        raise _user_error(flag, path, _problem(e), "pass a directory") from None
    import stat

    if not stat.S_ISDIR(st.st_mode):
        raise _user_error(flag, path, "is a file, not a directory", "pass a directory")


def write_user_file(path: str | os.PathLike[str], data: str | bytes, flag: str) -> None:
    """``write_atomic`` to a path the user named (``--out FILE``): a directory there, a missing or
    read-only directory is one UserError, never a traceback."""
    if Path(path).is_dir():
        raise _user_error(flag, path, "is a directory", "pass a file name")
    if os.path.islink(path) and not os.path.exists(path):  # a loop or dangling: not replaced silently
        raise _user_error(flag, path, "is a symlink to nothing (a loop or a missing target)", "pass a file name")
    try:
        write_atomic(path, data)
    except OSError as e:
        import errno

        text = {errno.EEXIST: "cannot be created (a part of its path is a file)",
                errno.ENOTDIR: "cannot be created (a part of its path is a file)",
                errno.ENOENT: "cannot be created (its directory cannot be made there)"}.get(e.errno or 0)
        problem = _problem(e).replace("is not readable", "is not writable").replace("cannot be read", "cannot be written")
        raise _user_error(flag, path, text or problem, "pass a writable file path (or free space on its disk)") from None

"""Build the HTTP client's optional C helpers (``_native.c`` + ``_rxthread.c``, ``_stamp.h``) into a Python environment.

    python -m backends.http.native_build [--dest DIR] [--cc CC] [--force]

The one build recipe: ``scripts/setup.d/50-http-native.sh`` runs it for the repo's ``.venv``, and
on a machine where llm-compare was pip-installed it is the step that turns the helpers on
(kernel-stamped reads in C and the receive thread, backends/http/rxstamp.py). Optional by
design: without a C compiler or Python's headers it says so and exits 0, and the pure-Python
path runs. The module records the sha256 of its sources (``native.SOURCES``, concatenated);
``native.py`` ignores a build whose sha does not match the sources beside it.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from backends.http import native

MODULE = "_llm_compare_http"


def sources() -> list[Path]:
    return [Path(native.__file__).with_name(n) for n in native.SOURCES]


def source_sha() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources())).hexdigest()


def _built_sha(target: Path) -> str | None:
    """SOURCE_SHA of the module file ``target`` (loaded in a fresh interpreter: this one may hold
    an older copy, and another copy elsewhere on sys.path must not answer for it), or None."""
    if not target.exists():
        return None
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location(%r, sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.SOURCE_SHA)" % MODULE)
    r = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def build(dest: Path | None = None, cc: str | None = None, force: bool = False) -> tuple[bool, str]:
    """(built or up to date, what happened in one line). Never raises for a missing toolchain."""
    dest = Path(dest or sysconfig.get_paths()["platlib"])
    missing = [str(p) for p in sources() if not p.exists()]
    if missing:
        return False, f"sources missing ({', '.join(missing)}): the pure-Python path will be used"
    sha = source_sha()
    target = dest / (MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if not force and _built_sha(target) == sha:
        return True, f"up to date: {target}"
    cc = cc or os.environ.get("CC") or "gcc"
    inc = sysconfig.get_paths()["include"]
    if shutil.which(cc) is None or not (Path(inc) / "Python.h").exists():
        return False, (f"no C compiler ({cc}) or no Python.h in {inc}: the pure-Python path will be used "
                       f"(install gcc and the python3-dev headers, then re-run)")
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", dir=dest)
    os.close(fd)
    cmd = [cc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{inc}", f'-DSOURCE_SHA="{sha}"',
           "-o", tmp, *(str(p) for p in sources() if p.suffix == ".c"), "-lpthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        first = (r.stderr.strip().splitlines() or ["?"])[0]
        return False, f"build failed ({first}): the pure-Python path will be used"
    os.replace(tmp, target)  # atomic: a running client keeps the file it loaded
    return True, f"built {target}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m backends.http.native_build", description=__doc__.split("\n")[0])
    p.add_argument("--dest", type=Path, help="directory to put the module in (default: this environment's site-packages)")
    p.add_argument("--cc", help="C compiler (default: $CC or gcc)")
    p.add_argument("--force", action="store_true", help="rebuild even when an up-to-date build is there")
    a = p.parse_args(argv)
    ok, msg = build(a.dest, a.cc, a.force)
    print(f"[http-native] {msg}", file=sys.stderr)
    return 0  # optional either way: the client works without the helpers


if __name__ == "__main__":
    sys.exit(main())

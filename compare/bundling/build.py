"""Offline bundles: a package plus the dependencies an air-gapped target lacks, pruned, split.

``compare bundle`` (compare/cli/commands/bundle.py) drives four steps:
1. resolve: walk ``Requires-Dist`` from the root wheel with the *target's* markers (Python
   version, platform), stopping at packages the target already has (a package list, optionally
   with versions: a known version must satisfy the specifier, else the package is bundled) and at
   packages a profile names as not imported on the path used (each with its reason);
2. download: ``pip download --no-deps --only-binary=:all:`` for the target's tags, round by round;
3. install + prune: ``pip install --no-deps --target`` into a tree, then a profile's removals
   (each checked against the source: compare/bundling/prune.py) and fatbin pruning;
4. pack: a reproducible tar.xz of the tree, split into parts of at most ``part_size`` bytes,
   SHA256SUMS, install.sh (verify, reassemble, extract to a directory; prints the PYTHONPATH),
   and manifest.json (what is inside and why).
"""
from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path
from typing import Callable

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

MiB = 1 << 20


@dataclass(frozen=True)
class Platform:
    python: str = "3.12"  # major.minor
    machine: str = "x86_64"
    glibc: tuple[int, int] = (2, 39)  # newest manylinux tag the target accepts

    def markers(self, extra: str = "") -> dict[str, str]:
        return {"python_version": self.python, "python_full_version": f"{self.python}.0",
                "implementation_version": f"{self.python}.0", "platform_machine": self.machine,
                "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "platform_release": "", "platform_version": "", "extra": extra}

    def pip_args(self) -> list[str]:
        # pip matches platform tags exactly: name every manylinux level the target's glibc accepts
        plats = [f"manylinux_2_{n}_{self.machine}" for n in range(self.glibc[1], 4, -1)]
        plats += [f"manylinux2014_{self.machine}", f"manylinux2010_{self.machine}", f"manylinux1_{self.machine}"]
        args = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp"]
        for p in plats:
            args += ["--platform", p]
        return args


def read_package_list(text: str) -> dict[str, str | None]:
    """``name`` or ``name==version`` per line (pip freeze works); ``#`` comments."""
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, ver = line.partition("==")
        out[canonicalize_name(name.strip())] = ver.strip() or None
    return out


def wheel_requires(wheel: Path) -> tuple[str, Version, list[Requirement]]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode("utf-8", "replace"))
    reqs = [Requirement(r) for r in msg.get_all("Requires-Dist") or []]
    return canonicalize_name(msg["Name"]), Version(msg["Version"]), reqs


@dataclass
class Plan:
    root: str
    wheels: dict[str, Path] = field(default_factory=dict)  # canonical name -> wheel file
    required_by: dict[str, list[str]] = field(default_factory=dict)
    on_target: dict[str, str] = field(default_factory=dict)  # name -> "version satisfies spec"
    skipped: dict[str, str] = field(default_factory=dict)  # name -> reason (profile)

    def as_dict(self) -> dict:
        return {"root": self.root, "wheels": {k: v.name for k, v in sorted(self.wheels.items())},
                "required_by": {k: sorted(set(v)) for k, v in sorted(self.required_by.items())},
                "on_target": dict(sorted(self.on_target.items())), "skipped": dict(sorted(self.skipped.items()))}


Downloader = Callable[[list[str], Path], None]


def pip_downloader(target: Platform) -> Downloader:
    def download(reqs: list[str], dest: Path) -> None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), *target.pip_args(), *reqs]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise RuntimeError(f"pip download {' '.join(reqs)} failed: {last}")
    return download


def _find_wheel(dest: Path, name: str, spec: SpecifierSet) -> Path | None:
    best: tuple[Version, Path] | None = None
    for w in dest.glob("*.whl"):
        n, v, _, _ = parse_wheel_filename(w.name)
        if n == name and spec.contains(v, prereleases=True) and (best is None or v > best[0]):
            best = (v, w)
    return best[1] if best else None


class _Conflict(Exception):
    def __init__(self, blame: str, version: Version) -> None:
        super().__init__(f"{blame}=={version}")
        self.blame, self.version = blame, version


def resolve(root: str, target: Platform, have: dict[str, str | None], skip: dict[str, str],
            dest: Path, download: Downloader, max_backtracks: int = 30) -> Plan:
    """Breadth-first over Requires-Dist with the target's markers; one pip call per round.

    Backtracking, kept simple: when a package's requirement excludes the version already chosen
    for a dependency (e.g. the newest xgrammar needs apache-tvm-ffi>=0.1.11 while vLLM pins
    ==0.1.10), that package's version is excluded and resolution restarts, so an older release
    compatible with the earlier pin is picked."""
    excluded: dict[str, SpecifierSet] = {}
    for _ in range(max_backtracks + 1):
        try:
            return _resolve_once(root, target, have, skip, dest, download, excluded)
        except _Conflict as c:
            excluded[c.blame] = excluded.get(c.blame, SpecifierSet()) & SpecifierSet(f"!={c.version}")
    raise RuntimeError(f"no consistent set after {max_backtracks} backtracks (excluded: "
                       f"{', '.join(f'{k}{v}' for k, v in excluded.items())})")


def _resolve_once(root: str, target: Platform, have: dict[str, str | None], skip: dict[str, str],
                  dest: Path, download: Downloader, excluded: dict[str, SpecifierSet]) -> Plan:
    dest.mkdir(parents=True, exist_ok=True)
    root_req = Requirement(root)
    plan = Plan(root=root)
    rname = canonicalize_name(root_req.name)
    specs: dict[str, SpecifierSet] = {rname: root_req.specifier}
    extras: dict[str, set[str]] = {rname: set(root_req.extras)}
    todo = [rname]
    while todo:
        for n in todo:
            specs[n] = specs[n] & excluded.get(n, SpecifierSet())
        missing = [n for n in todo if _find_wheel(dest, n, specs[n]) is None]
        if missing:
            download([f"{n}{specs[n]}" for n in missing], dest)
        for name in todo:
            wheel = _find_wheel(dest, name, specs[name])
            if wheel is None:
                raise RuntimeError(f"no wheel of {name}{specs[name]} for Python {target.python} "
                                   f"{target.machine} after download")
            plan.wheels[name] = wheel
        nxt: list[str] = []
        for name in todo:
            _, version, reqs = wheel_requires(plan.wheels[name])
            for r in reqs:
                envs = [target.markers(e) for e in ({""} | extras.get(name, set()))]
                if r.marker is not None and not any(Marker(str(r.marker)).evaluate(e) for e in envs):
                    continue
                dep = canonicalize_name(r.name)
                plan.required_by.setdefault(dep, []).append(name)
                if dep in skip:
                    plan.skipped[dep] = skip[dep]
                    continue
                if dep in have:
                    ver = have[dep]
                    if ver is None or r.specifier.contains(Version(ver), prereleases=True):
                        plan.on_target[dep] = f"{ver or 'present'} (needs {r.specifier or 'any'})"
                        continue
                chosen = plan.wheels.get(dep)
                if chosen is not None and name != rname:
                    v = parse_wheel_filename(chosen.name)[1]
                    if not r.specifier.contains(v, prereleases=True):
                        raise _Conflict(name, version)  # this release of `name` cannot join the set
                new_spec = specs.get(dep, SpecifierSet()) & r.specifier
                new_extras = extras.get(dep, set()) | set(r.extras)
                if dep not in specs or str(new_spec) != str(specs[dep]) or new_extras != extras.get(dep, set()):
                    specs[dep], extras[dep] = new_spec, new_extras
                    if dep not in nxt:
                        nxt.append(dep)
        todo = nxt
    return plan


def install_tree(plan: Plan, site: Path, target: Platform) -> None:
    """pip's own installer, no resolution, into a plain directory (becomes the PYTHONPATH); the
    target's tags let it unpack wheels for another Python than the one running here."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-index",
           "--target", str(site), *target.pip_args(), *map(str, plan.wheels.values())]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip install --target failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    for p in list(site.rglob("__pycache__")):
        if p.is_dir():
            for f in p.iterdir():
                f.unlink()
            p.rmdir()


def _tar(site: Path, dest: Path) -> None:
    """Reproducible tar: sorted names, owner 0, mtime 0."""
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(site.rglob("*")):
            info = tar.gettarinfo(str(p), arcname=str(p.relative_to(site)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if p.is_file() and not p.is_symlink():
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


def pack(site: Path, out: Path, part_size: int, name: str = "bundle") -> list[Path]:
    """tar.xz of ``site`` split into ``name.partNN`` files of <= part_size bytes, + SHA256SUMS."""
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f".{name}.tar"
    _tar(site, raw)
    xz = out / f".{name}.tar.xz"
    if shutil.which("xz"):  # multi-threaded, same format; Python's lzma is single-threaded
        with open(xz, "wb") as f:
            subprocess.run(["xz", "-9e", "-T0", "-c", str(raw)], stdout=f, check=True)
    else:
        with open(raw, "rb") as src, lzma.open(xz, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    raw.unlink()
    parts = []
    with open(xz, "rb") as f:
        i = 0
        while chunk := f.read(part_size):
            p = out / f"{name}.part{i:02d}"
            p.write_bytes(chunk)
            parts.append(p)
            i += 1
    xz.unlink()
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in parts)
    (out / "SHA256SUMS").write_text(sums)
    return parts


INSTALL_SH = r"""#!/bin/sh
# Reassemble and install this bundle (made by `compare bundle`). No network needed.
#   sh install.sh [DEST]       (default DEST=/tmp/site; then: export PYTHONPATH=DEST)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:-/tmp/site}
cd "$HERE"
sha256sum -c SHA256SUMS >/dev/null || { echo "install.sh: checksum mismatch: a part is damaged or missing" >&2; exit 2; }
PY=${PYTHON:-python3}
mkdir -p "$DEST"
# parts in name order (part00, part01, ...) are one xz-compressed tar
cat $(awk '{print $2}' SHA256SUMS | sort) | "$PY" -c '
import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz") as t:
    t.extractall(sys.argv[1], filter="data") if hasattr(tarfile, "data_filter") else t.extractall(sys.argv[1])
' "$DEST"
echo "installed into $DEST: export PYTHONPATH=$DEST${PYTHONPATH:+:\$PYTHONPATH}"
"""


def write_install(out: Path, manifest: dict) -> None:
    (out / "install.sh").write_text(INSTALL_SH)
    (out / "install.sh").chmod(0o755)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")

"""``compare bundle``: an offline install of vLLM (or any wheel) for an air-gapped target.

  compare bundle --out DIR [--package vllm==0.26.0] [--python 3.12] [--have PACKAGES.txt]
                 [--profile vllm-dense-sm90 | --no-profile] [--gpu-arch 90] [--part-size-mib 60]

DIR gets ``bundle.partNN`` (<= part size), SHA256SUMS, install.sh and manifest.json (every wheel,
why it is there, what was left out and why, the import sites of each removed module, fatbin
pruning). On the target: ``sh DIR/install.sh /tmp/site && export PYTHONPATH=/tmp/site``.
"""
from __future__ import annotations

import argparse
import fnmatch
import shutil
import sys
import tempfile
from pathlib import Path

from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bundle", help="download + prune + split a package and the dependencies a target lacks")
    p.add_argument("--out", type=Path, required=True, help="output directory (must be empty or absent)")
    p.add_argument("--package", default="vllm==0.26.0", help="root requirement (default vllm==0.26.0)")
    p.add_argument("--python", default="3.12", help="target Python major.minor (default 3.12)")
    p.add_argument("--machine", default="x86_64", help="target machine (default x86_64)")
    p.add_argument("--have", type=Path, help="target's package list: name or name==version per line (pip freeze)")
    p.add_argument("--profile", default=None, help="pruning profile (default: vllm-dense-sm90 for vllm)")
    p.add_argument("--no-profile", action="store_true", help="bundle every declared dependency, prune nothing")
    p.add_argument("--gpu-arch", type=int, default=None, help="keep GPU code for sm_<ARCH> only, e.g. 90")
    p.add_argument("--part-size-mib", type=float, default=60.0, help="largest part (default 60 MiB)")
    p.add_argument("--cache", type=Path, default=None, help="wheel download cache (default DIR/../.bundle-cache)")
    p.set_defaults(func=_bundle)


def _validate(a: argparse.Namespace):
    from packaging.requirements import InvalidRequirement, Requirement

    from compare.bundling.profiles import PROFILES

    try:
        root = Requirement(a.package)
    except InvalidRequirement:
        raise UserError(f"--package {a.package!r} is not a requirement; use e.g. vllm==0.26.0") from None
    from core.fsutil import check_dir_option

    check_dir_option(a.out, "--out")  # a file, a loop, under a file
    if a.cache is not None:
        check_dir_option(a.cache, "--cache")
    if a.out.exists() and any(a.out.iterdir()):
        raise UserError(f"--out {a.out} is not empty; pass a new directory")
    if not a.python.count(".") == 1 or not all(x.isdigit() for x in a.python.split(".")):
        raise UserError(f"--python {a.python!r}: give major.minor, e.g. 3.12")
    if a.part_size_mib <= 0:
        raise UserError("--part-size-mib must be > 0")
    if a.have is not None and not a.have.exists():
        raise UserError(f"--have {a.have} does not exist; give the target's `pip freeze` output")
    name = a.profile or ("vllm-dense-sm90" if root.name.lower() == "vllm" and not a.no_profile else None)
    if a.no_profile:
        name = None
    if name is not None and name not in PROFILES:
        raise UserError(f"unknown --profile {name!r}; known: {', '.join(PROFILES)} (or --no-profile)")
    profile = PROFILES[name] if name else None
    if profile is not None and profile.root != root.name.lower():
        raise UserError(f"profile {name} is for {profile.root}, not {root.name}; pass --no-profile")
    return root, profile


def _bundle(a: argparse.Namespace) -> int:
    from compare.bundling.build import Platform, install_tree, pack, pip_downloader, read_package_list, resolve, write_install
    from compare.bundling.prune import import_sites, prune_fatbin

    root, profile = _validate(a)
    target = Platform(python=a.python, machine=a.machine)
    from core.fsutil import read_user_text

    have = read_package_list(read_user_text(a.have, "--have file")) if a.have else {}
    skip = {k: v[0] for k, v in (profile.skip.items() if profile else [])}
    cache = a.cache or a.out.resolve().parent / ".bundle-cache"
    print(f"resolving {a.package} for CPython {a.python} {a.machine} ({len(have)} packages on the target)",
          file=sys.stderr)
    try:
        plan = resolve(a.package, target, have, skip, cache, pip_downloader(target))
    except RuntimeError as e:
        raise UserError(f"{e}; check the name/version on PyPI and --python") from None
    manifest: dict = {"package": a.package, "target": {"python": a.python, "machine": a.machine},
                      "profile": profile.name if profile else None, "plan": plan.as_dict()}
    with tempfile.TemporaryDirectory(prefix="bundle-") as tmp:
        site = Path(tmp) / "site"
        install_tree(plan, site, target)
        if profile:
            manifest["skipped_evidence"] = {
                dist: {m: [s.__dict__ for s in import_sites(site, m)][:20] for m in mods}
                for dist, (_, mods) in profile.skip.items() if dist in plan.skipped}
            manifest["removed"] = _remove(site, profile, import_sites)
        arch = a.gpu_arch or (profile.gpu_arch if profile else None)
        if arch and profile:
            manifest["fatbins"] = {f: prune_fatbin(site / f, site / f, arch) for f in profile.fatbins
                                   if (site / f).exists()}
        parts = pack(site, a.out, int(a.part_size_mib * (1 << 20)))
    write_install(a.out, manifest)
    total = sum(p.stat().st_size for p in parts)
    print(f"{len(plan.wheels)} wheels ({len(plan.on_target)} requirements already on the target, "
          f"{len(plan.skipped)} left out by profile) -> {len(parts)} part(s), {total / (1 << 20):.1f} MiB in {a.out}")
    print(f"on the target: sh {a.out}/install.sh /tmp/site && export PYTHONPATH=/tmp/site")
    return 0


def _module_of(rel: str) -> str:
    parts = Path(rel).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _only_lazily_imported(site: Path, module: str, import_sites, seen: set[str], depth: int = 4) -> bool:
    """A module-level import is harmless when the importing module is itself only imported
    guarded or lazily (followed a few levels up; a cycle or the depth limit counts as no)."""
    if module in seen or depth == 0:
        return False
    seen = seen | {module}
    for s in import_sites(site, module):
        if s.kind == "module-level" and _module_of(s.file) != module and not _only_lazily_imported(
                site, _module_of(s.file), import_sites, seen, depth - 1):
            return False
    return True


def _remove(site: Path, profile, import_sites) -> list[dict]:
    done = []
    files = [p for p in site.rglob("*") if p.is_file() or p.is_symlink()]
    for r in profile.remove:
        hits = [p for p in files if fnmatch.fnmatch(str(p.relative_to(site)), r.glob)]
        if not hits:
            continue
        sites = import_sites(site, r.module) if r.module else []
        # files of the removed module itself do not count as evidence either way
        outside = [s for s in sites if not fnmatch.fnmatch(s.file, r.glob)]
        bad = [s for s in outside if s.kind == "module-level"
               and not _only_lazily_imported(site, _module_of(s.file), import_sites, {r.module})]
        if bad:
            raise UserError(f"profile {profile.name}: {r.glob} is imported unguarded at module level in "
                            f"{bad[0].file}:{bad[0].line}; this vLLM version needs it (update the profile)")
        size = sum(p.stat().st_size for p in hits if p.is_file())
        for p in hits:
            p.unlink()
        done.append({"glob": r.glob, "files": len(hits), "bytes": size, "reason": r.reason,
                     "import_sites": [s.__dict__ for s in outside][:20]})
    for d in sorted((p for p in site.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):
            shutil.rmtree(d)
    return done

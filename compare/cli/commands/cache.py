"""``compare cache ls|rm``: the engine cache (built TensorRT-LLM engines, OpenVINO IR exports)."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list or remove cached engines / quantized checkpoints")
    csub = p.add_subparsers(dest="cache_cmd", metavar="ACTION", required=True)
    ls = csub.add_parser("ls", help="list cache entries")
    ls.add_argument("--json", action="store_true")
    rm = csub.add_parser("rm", help="remove entries by key (a unique prefix is enough)")
    rm.add_argument("keys", nargs="*", metavar="KEY")
    rm.add_argument("--all", action="store_true", help="remove every entry")
    for q in (ls, rm):
        q.add_argument("--cache-dir", type=Path, default=None,
                       help="cache root (default $LLM_COMPARE_ENGINE_CACHE or ~/.cache/llm-compare/engines)")
    ls.set_defaults(func=_ls)
    rm.set_defaults(func=_rm)


def _cache(args: argparse.Namespace):
    from backends.models.engine_cache import EngineCache

    if args.cache_dir is not None:
        from core.fsutil import check_dir_option

        check_dir_option(args.cache_dir, "--cache-dir")
    return EngineCache(args.cache_dir)


def _row(e) -> dict:
    m = e.meta
    head = {"key": e.key, "size_bytes": e.size_bytes(), "created": m.get("created")}
    if isinstance(m.get("listing"), dict):  # an entry that says how it is listed (backends/llamacpp/)
        return {**head, "compute_capability": None, "path": str(e.path), **m["listing"]}
    from backends import registry

    for b in registry.with_hook("cache_listing"):  # the engine whose entry it is says how it is listed
        listing = registry.cache_listing_of(b)
        row = listing(m) if listing is not None else None
        if row is not None:
            return {**head, **row, "path": str(e.path)}
    return {**head, "kind": m.get("kind", "unknown"), "model": m.get("model") or m.get("source"),
            "compute_capability": None, "path": str(e.path)}


def _ls(args: argparse.Namespace) -> int:
    rows = [_row(e) for e in _cache(args).entries()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"engine cache {_cache(args).root} is empty")
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"engine cache {_cache(args).root}")
    for c in ("key", "kind", "size", "created", "model", "quant", "built by", "gpu (cc)"):
        t.add_column(c)
    for r in rows:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])) if r["created"] else "?"
        gpu = f"{r['gpu']} ({r['compute_capability']})" if r["gpu"] else "-"
        t.add_row(r["key"][:12], r["kind"], f"{r['size_bytes'] / 2**20:.1f} MiB", created,
                  Path(str(r["model"])).name, r["quant"], r["built_by"], gpu)
    Console().print(t)
    return 0


def _rm(args: argparse.Namespace) -> int:
    cache = _cache(args)
    if args.all == bool(args.keys):
        raise UserError("compare cache rm: name KEY(s) (see `compare cache ls`) or pass --all, not both")
    targets = cache.entries() if args.all else []
    for k in args.keys:
        found = cache.find(k)
        if not found:
            raise UserError(f"no cache entry matches {k!r}; see `compare cache ls`")
        if len(found) > 1:
            raise UserError(f"{k!r} matches {len(found)} entries; give more of the key")
        targets += found
    for e in targets:
        try:
            cache.remove(e.key)
        except PermissionError as err:
            raise UserError(f"cannot remove {e.path}: {err.strerror} ({err.filename}); it was written by "
                            "another user (a root container?): remove it with sudo") from None
        print(f"removed {e.key}")
    return 0

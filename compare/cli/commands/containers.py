"""``compare containers ls|prune``: the serving containers this tool started, and removing the
ones whose run is gone (labels: llm-compare.run-id, .backend, .owner-pid/-start/-host)."""
from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("containers", help="list / prune the containers started by llm-compare runs")
    csub = p.add_subparsers(dest="containers_cmd", metavar="ACTION", required=True)
    ls = csub.add_parser("ls", help="containers labelled by llm-compare, with their owner's state")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_ls)
    pr = csub.add_parser("prune", help="remove containers whose owning run is no longer alive")
    pr.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    pr.add_argument("--all-hosts", action="store_true",
                    help="also remove containers labelled by another host (shared daemon)")
    pr.set_defaults(func=_prune)


def _ls(args: argparse.Namespace) -> int:
    from containers.inventory import list_ours
    from containers.manager import connect

    rows = [e.as_dict() for e in list_ours(connect())]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no llm-compare containers")
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="llm-compare containers")
    for c in ("id", "name", "image", "status", "backend", "run id", "owner pid", "owner", "ports"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["id"], r["name"], r["image"], r["status"], r["backend"], r["run_id"],
                  str(r["owner_pid"]), r["owner"], r["ports"])
    Console().print(t)
    return 0


def _prune(args: argparse.Namespace) -> int:
    from containers.inventory import prune
    from containers.manager import connect

    removed = prune(connect(), all_hosts=args.all_hosts, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for e in removed:
        print(f"{verb} {e.id} {e.name} ({e.image}, backend {e.backend}, run {e.run_id}, owner pid {e.owner_pid} {e.owner})")
    print(f"{verb} {len(removed)} container(s)")
    return 0

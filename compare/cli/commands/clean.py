"""``compare clean``: remove whatever dead llm-compare runs left behind.

A run that was killed outright (SIGKILL, the OOM killer) cannot clean up; its watchdogs
(containers/watchdog.py) normally do. Should they have died with it, this finds what is left:

- processes carrying the ``LLM_COMPARE_OWNER`` tag (every process a run starts inherits it:
  engine cores, workers, servers) whose owning run is gone (pid and start time), and
- containers labelled by llm-compare whose owner is gone (as ``compare containers prune``).

Nothing else is touched: an untagged process, or a tagged one whose run still lives, is never killed.
"""
from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clean", help="remove processes and containers left by dead llm-compare runs")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.add_argument("--all-hosts", action="store_true",
                   help="also remove containers labelled by another host (shared daemon)")
    p.set_defaults(func=_clean)


def _clean(args: argparse.Namespace) -> int:
    from containers.watchdog import orphans, terminate

    verb = "would remove" if args.dry_run else "removed"
    found = orphans()
    for p, tag in found:
        try:
            cmd = " ".join(p.cmdline())[:120]
        except Exception:  # gone meanwhile
            cmd = "?"
        print(f"{verb} process {p.pid} ({cmd}) of dead run owner {tag}")
    if found and not args.dry_run:
        terminate([p for p, _ in found])
    print(f"{verb} {len(found)} process(es)")
    _containers(args, verb)
    return 0


def _containers(args: argparse.Namespace, verb: str) -> None:
    from core.errors import UserError

    try:
        from containers.inventory import prune
        from containers.manager import connect

        client = connect()
    except UserError as e:  # no Docker here: there are no containers of ours either
        print(f"containers: skipped ({e})")
        return
    removed = prune(client, all_hosts=args.all_hosts, dry_run=args.dry_run)
    for e in removed:
        print(f"{verb} container {e.id} {e.name} ({e.image}, backend {e.backend}, run {e.run_id})")
    print(f"{verb} {len(removed)} container(s)")

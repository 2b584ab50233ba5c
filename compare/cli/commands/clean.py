"""``compare clean``: remove whatever dead llm-compare runs left behind.

A run that was killed outright (SIGKILL, the OOM killer) cannot clean up; its watchdogs
(containers/watchdog.py) normally do. Should they have died with it, this finds what is left:

- processes carrying the ``LLM_COMPARE_OWNER`` tag (every process a run starts inherits it:
  engine cores, workers, servers) whose owning run is gone (pid and start time),
- containers labelled by llm-compare whose owner is gone (as ``compare containers prune``).

- runs in the results root (`--out`, default ./results) left "running" by a process that is gone:
  recorded as killed, with what they measured kept (compare/cli/killed.py).

Nothing else is touched: an untagged process, or a tagged one whose run still lives, is never killed.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clean", help="remove processes and containers left by dead llm-compare runs")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.add_argument("--all-hosts", action="store_true",
                   help="also remove containers labelled by another host (shared daemon)")
    p.add_argument("--out", type=Path, default=Path("results"), metavar="RESULTS_ROOT",
                   help="results root whose killed runs are recorded as killed (default ./results)")
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
    _killed_runs(args)
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


def _killed_runs(args: argparse.Namespace) -> None:
    """Runs in the results root left "running" by a killed process: recorded as killed."""
    from compare.cli.killed import settle_root
    from core.results.owner import owner_alive

    if not args.out.is_dir():
        return
    if args.dry_run:
        import json

        for d in sorted(p for p in args.out.iterdir() if p.is_dir()):
            from core.fsutil import read_if_regular

            raw = read_if_regular(d / "run.json")  # (a FIFO or device there: passed over, never a hang)
            try:
                doc = json.loads(raw) if raw is not None else None
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("status") == "running" and owner_alive(doc.get("owner")) is False:
                print(f"would record run {d.name} in {d} as killed (its process is gone)")
        return
    for note in settle_root(args.out):
        print(note.removeprefix("note: "))

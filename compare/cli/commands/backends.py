"""``compare backends``: every backend, whether it can run here (and why not), its capabilities."""
from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backends", help="list backends, whether they can run here, capabilities")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    from backends.registry import availability, entries

    rows = []
    for e in entries():
        ok, why = availability(e)
        rows.append({"name": e.name + ("@TARGET" if e.needs_target else ""), "summary": e.summary,
                     "runnable_here": ok, "reason": why, "capabilities": _caps(e.capabilities),
                     "notes": list(e.notes)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="backends")
    for c in ("backend", "runs here", "capabilities", "what / notes"):
        t.add_column(c)
    for r in rows:
        caps = ", ".join(k for k, v in r["capabilities"].items() if v is True)
        no = ", ".join(f"no {k}" for k, v in r["capabilities"].items() if v is False)
        t.add_row(r["name"], ("yes" if r["runnable_here"] else "no: ") + ("" if r["runnable_here"] else r["reason"]),
                  "; ".join(x for x in (caps, no) if x), "\n".join([r["summary"], *r["notes"]]))
    Console().print(t)
    return 0


def _caps(caps: Any) -> dict[str, bool]:
    """The yes/no capabilities of an entry (its notes are the backend's, shown when it runs)."""
    if caps is None:
        return {}
    return {k: v for k, v in caps.as_dict().items() if isinstance(v, bool)}

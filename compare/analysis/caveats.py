"""What a reader must know before trusting a run's numbers, one sentence each."""
from __future__ import annotations

from typing import Any


def caveats(run: dict[str, Any]) -> list[str]:
    """Things the reader must know before trusting the table."""
    out = []
    for name, b in run["backends"].items():
        caps = b.get("capabilities", {})
        if run.get("workload", {}).get("ignore_eos") and not caps.get("forced_output_length", True):
            out.append(f"{name}: output length cannot be forced; compare length-matched tokens only")
        for label, s in b.get("levels", {}).items():
            if s.get("client_lagged"):
                out.append(f"{name} {label}: client event loop lagged {s['loop_lag_ms']['max']:.1f} ms "
                           f"(result marked invalid: the client, not the engine, may be the bottleneck)")
            if s.get("short_outputs"):
                out.append(f"{name} {label}: {s['short_outputs']} request(s) returned fewer tokens than asked")
            if s.get("failed"):
                out.append(f"{name} {label}: {s['failed']} failed request(s): {s.get('errors')}")
        if b.get("error"):
            out.append(f"{name}: {b['error']}")
    for label, lv in ((run.get("length_matched") or {}).get("levels") or {}).items():
        dropped = lv.get("excluded_failed", 0) + lv.get("excluded_empty", 0)
        if dropped:
            out.append(f"length-matched {label}: {dropped} of {lv['requests']} request(s) left out "
                       f"(failed on some backend: {lv.get('excluded_failed', 0)}, no token: "
                       f"{lv.get('excluded_empty', 0)})")
    return out

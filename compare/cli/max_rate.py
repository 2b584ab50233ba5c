"""``compare run --find-max-rate`` options: the highest request rate meeting the SLO, per backend
(compare/tuning/max_rate.py does the search; this only reads and checks the options)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from core.errors import UserError
from core.slo import SLO


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("max rate under the SLO")
    g.add_argument("--find-max-rate", action="store_true",
                   help="after the levels, search each backend's highest Poisson rate (req/s) that still "
                        "meets --slo (bracket, then bisect; each probe sends the whole request list)")
    g.add_argument("--max-rate-start", type=float, default=1.0, metavar="REQ_S",
                   help="first rate probed (default 1); doubled while the SLO holds, halved (down to "
                        "start/8) while it does not")
    g.add_argument("--max-rate-probes", type=int, default=8, metavar="N",
                   help="probes per engine start (default 8); fewer probes, a wider met/missed interval")
    g.add_argument("--max-rate-tol", type=float, default=0.15, metavar="F",
                   help="stop bisecting when missed/met <= 1+F (default 0.15)")


@dataclass(frozen=True)
class MaxRateOptions:
    """``--find-max-rate``'s search, checked: the first rate, probes per engine start, tolerance."""

    start: float = 1.0
    probes: int = 8
    tol: float = 0.15
    # the run's open-loop shape, so probes are the same kind of level as --rate's
    arrival: str = "poisson"
    burstiness: float = 1.0
    duration_s: float | None = None  # --duration: each probe sends for this long (steady state)
    warmup_s: float | None = None  # --warmup-seconds / --cooldown-seconds: each probe's trims
    cooldown_s: float | None = None


def options(find: bool, slo: SLO, start: float, probes: int, tol: float) -> MaxRateOptions | None:
    """The search options, or None without --find-max-rate; bad options: UserError."""
    if not find:
        return None
    if not slo:
        raise UserError("--find-max-rate needs an SLO to meet; add e.g. --slo ttft_p95=2s,tpot_p95=50ms")
    if not start > 0 or start == float("inf"):
        raise UserError(f"--max-rate-start must be a finite rate > 0 req/s, got {start:g}")
    if probes < 1:
        raise UserError(f"--max-rate-probes must be >= 1, got {probes}")
    if not tol > 0:
        raise UserError(f"--max-rate-tol must be > 0, got {tol:g}")
    return MaxRateOptions(start, probes, tol)


def hook(opts: MaxRateOptions | None, slo: SLO, timeout_s: float):
    """The runner's after-levels step, or None without --find-max-rate."""
    if opts is None:
        return None
    from compare.tuning.max_rate import make_hook
    from compare.tuning.probe import LoadSearch

    return make_hook(slo, LoadSearch(kind="rate", start=opts.start, tol=opts.tol, max_probes=opts.probes, repeats=1,
                                     warmup=0, timeout_s=timeout_s, arrival=opts.arrival,
                                     burstiness=opts.burstiness, duration_s=opts.duration_s,
                                     warmup_s=opts.warmup_s, cooldown_s=opts.cooldown_s))

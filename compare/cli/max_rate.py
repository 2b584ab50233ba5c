"""``compare run --find-max-rate`` options: the highest request rate meeting the SLO, per backend
(compare/tuning/max_rate.py does the search; this only reads and checks the options)."""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import UserError
from core.slo import SLO


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
    """The search options (each already range-checked: compare/cli/run_options.py), or None
    without --find-max-rate; no SLO to meet: UserError."""
    if not find:
        return None
    if not slo:
        raise UserError("--find-max-rate needs an SLO to meet; add e.g. --slo ttft_p95=2s,tpot_p95=50ms")
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

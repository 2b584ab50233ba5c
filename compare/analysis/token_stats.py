"""Per-token metrics (ITL) in the paired comparison: percentiles of every token gap of a level,
with the request as the unit that is resampled.

A level's ITL percentile pools the gaps of all its requests (compare/analysis/metrics.py), so a
request counts once per token it streamed. The paired bootstrap (compare/analysis/stats.py) draws
repeats and request ids; for a per-token metric a draw weights each request's gaps by how often
that request (and its repeat) was drawn, and takes the weighted percentile of all gaps (the
inverse of the weighted empirical CDF). Resampling requests, not single gaps, keeps the gaps of
one request together: they are not independent (one slow request has many slow gaps).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class TokenValues:
    """One backend at one level: per repeat, every token value (ms) sorted, and the request column
    each came from (the same order)."""

    values: tuple[np.ndarray, ...]
    cols: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, repeats: Sequence[dict[int, Sequence[float]]]) -> "TokenValues":
        """From per repeat ``{request column: that request's values in ms}``."""
        vals, cols = [], []
        for row in repeats:
            v = np.fromiter((x for c in sorted(row) for x in row[c]), dtype=float)
            c = np.fromiter((c for c in sorted(row) for _ in row[c]), dtype=np.int64, count=v.size)
            order = np.argsort(v, kind="stable")
            vals.append(v[order])
            cols.append(c[order])
        return cls(tuple(vals), tuple(cols))

    def pooled(self, q: float, repeats: int | None = None) -> float:
        """Percentile of the values of the first ``repeats`` repeats (all by default) together."""
        v = np.concatenate(self.values[:repeats]) if self.values else np.empty(0)
        return float(np.percentile(v, q)) if v.size else float("nan")

    def per_repeat(self, q: float) -> list[float]:
        return [float(np.percentile(v, q)) if v.size else float("nan") for v in self.values]


def boot_ratios(a: TokenValues, b: TokenValues, k: int, n: int, q: float, rng: np.random.Generator,
                n_boot: int) -> np.ndarray:
    """Bootstrap of b's percentile / a's over the first ``k`` repeats and ``n`` request columns:
    each draw picks k repeat pairs and n request ids, the same for both sides."""
    sides = [_flat(s, k) for s in (a, b)]
    size = max(1, max(v.size for v, _ in sides))
    chunk = max(1, int(2e6 // size))
    out = np.empty(n_boot)
    for s in range(0, n_boot, chunk):
        m = min(chunk, n_boot - s)
        rep_w = _counts(rng.integers(0, k, size=(m, k)), k)  # (m, k): how often each repeat was drawn
        req_w = _counts(rng.integers(0, n, size=(m, n)), n)  # (m, n): how often each request
        qa, qb = (_weighted_pct(v, rep_w[:, r] * req_w[:, c], q) for v, (r, c) in sides)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[s:s + m] = qb / qa
    return out[np.isfinite(out) & (out > 0)]


def _flat(t: TokenValues, k: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The first k repeats' values sorted together, with each value's (repeat, column)."""
    v = np.concatenate(t.values[:k]) if k else np.empty(0)
    r = np.concatenate([np.full(x.size, i, dtype=np.int64) for i, x in enumerate(t.values[:k])]) if k \
        else np.empty(0, dtype=np.int64)
    c = np.concatenate(t.cols[:k]) if k else np.empty(0, dtype=np.int64)
    order = np.argsort(v, kind="stable")
    return v[order], (r[order], c[order])


def _counts(draws: np.ndarray, size: int) -> np.ndarray:
    m = draws.shape[0]
    out = np.zeros((m, size))
    np.add.at(out, (np.repeat(np.arange(m), draws.shape[1]), draws.ravel()), 1.0)
    return out


def _weighted_pct(v: np.ndarray, w: np.ndarray, q: float) -> np.ndarray:
    """Per row of weights ``w`` (m, len(v)) over the sorted values ``v``: the smallest value whose
    cumulative weight reaches q % of the row's total (NaN where nothing was drawn)."""
    if v.size == 0:
        return np.full(w.shape[0], np.nan)
    cum = np.cumsum(w, axis=1)
    total = cum[:, -1]
    idx = np.minimum((cum < (q / 100.0 * total)[:, None]).sum(axis=1), v.size - 1)
    return np.where(total > 0, v[idx], np.nan)

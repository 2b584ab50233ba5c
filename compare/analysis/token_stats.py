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


BINS = 256  # coarse steps of a weighted percentile: a matrix product finds the step, a scan within it the value


def boot_ratios(a: TokenValues, b: TokenValues, k: int, n: int, q: float, rng: np.random.Generator,
                n_boot: int) -> np.ndarray:
    """Bootstrap of b's percentile / a's over the first ``k`` repeats and ``n`` request columns:
    each draw picks k repeat pairs and n request ids, the same for both sides."""
    sides = [Pooled(t, k, n) for t in (a, b)]
    width = max(k * n, *(max(s.h.shape[1], s.step) for s in sides))  # the widest array per draw
    chunk = max(1, int(2e6 // width))
    out = np.empty(n_boot)
    for s in range(0, n_boot, chunk):
        m = min(chunk, n_boot - s)
        rep_w = _counts(rng.integers(0, k, size=(m, k)), k)  # (m, k): how often each repeat was drawn
        req_w = _counts(rng.integers(0, n, size=(m, n)), n)  # (m, n): how often each request
        w = (rep_w[:, :, None] * req_w[:, None, :]).reshape(m, k * n)  # each (repeat, request) cell's weight
        qa, qb = (side.percentile(w, q) for side in sides)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[s:s + m] = qb / qa
    return out[np.isfinite(out) & (out > 0)]


class Pooled:
    """The first k repeats' values sorted together, each with its (repeat, request) cell
    ``repeat * n + request``, ready for weighted percentiles."""

    def __init__(self, t: TokenValues, k: int, n: int) -> None:
        vals = list(t.values[:k])
        v = np.concatenate(vals) if vals else np.empty(0)
        cell = np.concatenate([r * n + c for r, c in enumerate(t.cols[:k])]) if vals else np.empty(0, np.int64)
        order = np.argsort(v, kind="stable")
        self.v, self.cell = v[order], cell[order].astype(np.int64)
        size = self.v.size
        self.step = max(1, -(-size // BINS))
        # h[cell, j]: how many of the cell's values are in the j-th run of ``step`` sorted values
        self.h = np.zeros((k * n, max(1, -(-size // self.step))))
        np.add.at(self.h, (self.cell, np.arange(size) // self.step), 1.0)

    def percentile(self, w: np.ndarray, q: float) -> np.ndarray:
        """Per row of cell weights ``w`` (m, cells): the smallest value whose cumulative weight
        reaches q % of the row's total (the weighted inverse CDF; NaN where nothing was drawn)."""
        size, step = self.v.size, self.step
        if size == 0:
            return np.full(w.shape[0], np.nan)
        coarse = np.cumsum(w @ self.h, axis=1)  # (m, runs): weight up to the end of each run
        total = coarse[:, -1]
        target = q / 100.0 * total
        run = np.minimum((coarse < target[:, None]).sum(axis=1), coarse.shape[1] - 1)
        before = np.where(run > 0, np.take_along_axis(coarse, np.maximum(run - 1, 0)[:, None], 1)[:, 0], 0.0)
        idx = run[:, None] * step + np.arange(step)  # the values of that run, scanned one by one
        inside = idx < size
        idx = np.minimum(idx, size - 1)
        cum = before[:, None] + np.cumsum(np.take_along_axis(w, self.cell[idx], 1) * inside, axis=1)
        j = np.minimum((cum < target[:, None]).sum(axis=1), step - 1)
        return np.where(total > 0, self.v[np.minimum(run * step + j, size - 1)], np.nan)


def _counts(draws: np.ndarray, size: int) -> np.ndarray:
    m = draws.shape[0]
    out = np.zeros((m, size))
    np.add.at(out, (np.repeat(np.arange(m), draws.shape[1]), draws.ravel()), 1.0)
    return out

"""Per-token percentiles and their request-resampling bootstrap (compare/analysis/token_stats.py)."""
import numpy as np
import pytest

import compare.analysis.token_stats as ts
from compare.analysis.token_stats import Pooled, TokenValues, boot_ratios


def test_pooled_and_per_repeat_percentiles_are_numpy_s():
    t = TokenValues.of([{0: [1.0, 5.0], 1: [3.0]}, {0: [2.0], 2: [9.0, 4.0]}])
    assert t.pooled(50) == pytest.approx(np.percentile([1, 5, 3, 2, 9, 4], 50))
    assert t.per_repeat(95) == pytest.approx([np.percentile([1, 5, 3], 95), np.percentile([2, 9, 4], 95)])
    assert list(t.cols[1]) == [0, 2, 2]  # sorted values keep their request: 2.0 (req 0), 4.0, 9.0 (req 2)


def _brute(t: TokenValues, w: np.ndarray, n: int, q: float) -> float:
    """The weighted inverse CDF, value by value."""
    pairs = sorted((v, w[r * n + c]) for r, (vs, cs) in enumerate(zip(t.values, t.cols)) for v, c in zip(vs, cs))
    total = sum(x for _, x in pairs)
    if total == 0:
        return float("nan")
    cum = 0.0
    for v, x in pairs:
        cum += x
        if cum >= q / 100 * total:
            return v
    return pairs[-1][0]


@pytest.mark.parametrize("bins", [1, 3, 256])  # one run of values, several, one value per run
def test_weighted_percentile_is_the_inverse_cdf_of_the_drawn_cells(monkeypatch, bins):
    monkeypatch.setattr(ts, "BINS", bins)
    rng = np.random.default_rng(3)
    k, n = 2, 5
    t = TokenValues.of([{c: list(rng.lognormal(0, 1, rng.integers(1, 9))) for c in range(n)} for _ in range(k)])
    w = rng.integers(0, 3, size=(40, k * n)).astype(float)
    w[0] = 0.0  # nothing drawn
    p = Pooled(t, k, n)
    for q in (5, 50, 95, 100):
        got = p.percentile(w, q)
        want = [_brute(t, row, n, q) for row in w]
        assert np.isnan(got[0]) and np.allclose(got[1:], want[1:])


def test_bootstrap_resamples_whole_requests_paired():
    rng = np.random.default_rng(0)
    same = TokenValues.of([{j: list(rng.uniform(1, 2, 5)) for j in range(8)} for _ in range(3)])
    r = boot_ratios(same, same, 3, 8, 95, np.random.default_rng(1), 200)
    assert r.size == 200 and np.allclose(r, 1.0)  # the same draw for both sides
    slow = TokenValues.of([{j: [x * 2 for x in same.values[k][same.cols[k] == j]] for j in range(8)}
                           for k in range(3)])
    assert np.allclose(boot_ratios(same, slow, 3, 8, 50, np.random.default_rng(2), 100), 2.0)

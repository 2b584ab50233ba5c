"""Per-token percentiles and their request-resampling bootstrap (compare/analysis/token_stats.py)."""
import numpy as np
import pytest

from compare.analysis.token_stats import TokenValues, _weighted_pct, boot_ratios


def test_pooled_and_per_repeat_percentiles_are_numpy_s():
    t = TokenValues.of([{0: [1.0, 5.0], 1: [3.0]}, {0: [2.0], 2: [9.0, 4.0]}])
    assert t.pooled(50) == pytest.approx(np.percentile([1, 5, 3, 2, 9, 4], 50))
    assert t.per_repeat(95) == pytest.approx([np.percentile([1, 5, 3], 95), np.percentile([2, 9, 4], 95)])
    assert list(t.cols[1]) == [0, 2, 2]  # sorted values keep their request: 2.0 (req 0), 4.0, 9.0 (req 2)


def test_weighted_percentile_is_the_inverse_cdf_of_the_drawn_requests():
    v = np.array([1.0, 2.0, 3.0, 10.0])
    w = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [3, 0, 0, 1], [0, 0, 0, 0]], dtype=float)
    got = _weighted_pct(v, w, 50)
    assert list(got[:3]) == [2.0, 3.0, 1.0] and np.isnan(got[3])
    assert _weighted_pct(v, np.ones((1, 4)), 100)[0] == 10.0


def test_bootstrap_resamples_whole_requests_paired():
    rng = np.random.default_rng(0)
    same = TokenValues.of([{j: list(rng.uniform(1, 2, 5)) for j in range(8)} for _ in range(3)])
    r = boot_ratios(same, same, 3, 8, 95, np.random.default_rng(1), 200)
    assert r.size == 200 and np.allclose(r, 1.0)  # the same draw for both sides
    slow = TokenValues.of([{j: [x * 2 for x in same.values[k][same.cols[k] == j]] for j in range(8)}
                           for k in range(3)])
    assert np.allclose(boot_ratios(same, slow, 3, 8, 50, np.random.default_rng(2), 100), 2.0)

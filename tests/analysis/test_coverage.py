"""The paired intervals' coverage, measured by simulation at a study's numbers of seeds, and the
small statistics by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.stats import bootstrap_ci, holm, t_ci, t_pvalue, with_failures

REPS = 2000  # simulated studies per case: the coverage's standard error is about 0.5 pp


def _coverage(draw, n: int, interval, true_mean: float, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(REPS):
        lo, hi = interval(draw(rng, n))
        hits += lo <= true_mean <= hi
    return hits / REPS


# paired test-accuracy differences as a study sees them: a mean gap of 0.005 with a seed-to-seed
# spread of 0.01, normal, heavy-tailed (t with 4 degrees of freedom) and skewed (a gamma)
CASES = {
    "normal": (lambda rng, n: 0.005 + 0.01 * rng.standard_normal(n), 0.005),
    "heavy": (lambda rng, n: 0.005 + 0.01 * rng.standard_t(4, n) / math.sqrt(2), 0.005),
    "skewed": (lambda rng, n: 0.01 * (rng.gamma(4.0, 1.0, n) - 4.0) / 2 + 0.005, 0.005),
}


# at a study's 10 seeds every case; at 5, the symmetric ones (the skewed case measured 0.931 at
# 5 seeds: too close to the bar to hold across numpy's generators)
@pytest.mark.parametrize(
    ("case", "n"), [("normal", 5), ("heavy", 5), ("normal", 10), ("heavy", 10), ("skewed", 10)]
)
def test_the_paired_t_interval_covers_at_least_93_percent(case, n):
    draw, mean = CASES[case]
    assert _coverage(draw, n, t_ci, mean) >= 0.93


def test_the_percentile_bootstrap_at_five_pairs_does_not_cover_which_is_why_it_is_gone():
    draw, mean = CASES["normal"]
    cover = _coverage(draw, 5, lambda x: bootstrap_ci(x, n_boot=400), mean)
    assert cover < 0.88  # about 0.83: the figure the audit found


def test_t_interval_and_p_value_by_hand():
    # x = [1, 2, 3]: mean 2, s = 1, t_{2, 0.975} = 4.302653, half-width 4.302653/sqrt(3)
    lo, hi = t_ci([1.0, 2.0, 3.0])
    half = 4.302652729749464 / math.sqrt(3)
    assert lo == pytest.approx(2 - half, rel=1e-9) and hi == pytest.approx(2 + half, rel=1e-9)
    # t = 2 / (1/sqrt(3)) = 3.4641 on 2 df: two-sided p = 0.07418
    assert t_pvalue([1.0, 2.0, 3.0]) == pytest.approx(0.0741799, abs=1e-6)
    assert math.isnan(t_ci([0.3])[0]) and math.isnan(t_pvalue([0.3]))
    assert t_pvalue([0.0, 0.0]) == 1.0 and t_pvalue([0.1, 0.1]) == 0.0


def test_holm_by_hand():
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (monotone), 0.5
    assert holm([0.03, 0.01, 0.5, 0.02]) == pytest.approx([0.06, 0.04, 0.5, 0.06])
    got = holm([0.2, float("nan"), 0.9])  # m = 2
    assert got[0] == pytest.approx(0.4) and math.isnan(got[1]) and got[2] == pytest.approx(0.9)
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_a_failed_run_counts_at_chance():
    # three finished runs at 0.84 and two diverged at chance 0.1: (3 · 0.84 + 2 · 0.1) / 5
    assert with_failures([0.84, 0.84, 0.84], 2, 0.1) == pytest.approx(0.544)
    assert with_failures([0.8, float("nan")], 0, 0.1) == pytest.approx(0.8)

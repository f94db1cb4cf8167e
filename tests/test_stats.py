"""gpuopt.stats: Student's t quantiles exact at every number of degrees of freedom, percentiles
that are numpy's to the bit, and a bootstrap whose draws are the same for the same seed."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuopt.stats.bootstrap import (
    LEVEL,
    RESAMPLES,
    SEED,
    hierarchical_levels,
    resample,
    tail_percentiles,
    tails,
)
from gpuopt.stats.quantiles import (
    median,
    median_last_axis,
    percentile,
    percentiles,
    quantile_sorted,
)
from gpuopt.stats.t import Z90, t_quantile

ROOT = Path(__file__).resolve().parents[1]

# t's 95th percentile by degrees of freedom: mpmath's incomplete beta at 40 digits (the
# published tables' values, to 12 digits)
T95 = {
    1: 6.31375151468,
    2: 2.91998558035,
    3: 2.3533634348,
    4: 2.13184678633,
    5: 2.01504837333,
    6: 1.94318028052,
    7: 1.89457860509,
    8: 1.85954803753,
    9: 1.83311293266,
    10: 1.81246112281,
    11: 1.7958848187,
    12: 1.78228755565,
    13: 1.77093339599,
    14: 1.76131013577,
    15: 1.75305035569,
    16: 1.74588367628,
    17: 1.73960672608,
    18: 1.73406360662,
    19: 1.72913281152,
    20: 1.72471824292,
    21: 1.72074290281,
    22: 1.71714437438,
    23: 1.71387152775,
    24: 1.71088207991,
    25: 1.70814076125,
    26: 1.70561791976,
    27: 1.70328844572,
    28: 1.70113093427,
    29: 1.69912702653,
    30: 1.69726088659,
    60: 1.6706488649,
    120: 1.65765089936,
    1000: 1.64637881729,
    100000: 1.64486886478,
}


@pytest.mark.parametrize(("df", "want"), sorted(T95.items()))
def test_t_95th_percentile_at_every_df(df: int, want: float) -> None:
    assert t_quantile(0.95, df) == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize(
    ("p", "df", "want"),
    [
        (0.975, 1, 12.7062047362),
        (0.975, 10, 2.22813885199),
        (0.975, 30, 2.0422724563),
        (0.995, 5, 4.03214298356),
        (0.9, 4, 1.53320627406),
        (0.9, 500, 1.28324702071),  # past the exact sums: Cornish-Fisher
    ],
)
def test_t_quantile_at_other_levels(p: float, df: int, want: float) -> None:
    assert t_quantile(p, df) == pytest.approx(want, rel=1e-10)


def test_t_falls_to_the_normal_and_z90_is_its_95th_percentile() -> None:
    values = [t_quantile(0.95, df) for df in range(1, 450)]
    assert all(a > b for a, b in itertools.pairwise(values))  # one curve, across the 400 df seam
    assert values[-1] > Z90
    assert t_quantile(0.95, 10**7) == pytest.approx(Z90, rel=1e-6)
    assert Z90 == 1.6448536269514722
    assert t_quantile(0.95, 10) / Z90 == pytest.approx(1.1019, abs=1e-4)  # +10% over 11 steps
    assert t_quantile(0.95, 30) / Z90 == pytest.approx(1.0319, abs=1e-4)


@pytest.mark.parametrize(("p", "df"), [(0.5, 3), (1.0, 3), (0.3, 3), (0.95, 0)])
def test_t_quantile_refuses_what_it_does_not_compute(p: float, df: int) -> None:
    with pytest.raises(ValueError, match="t_quantile needs"):
        t_quantile(p, df)


PS = (0.0, 4.999999999999999, 5.0, 10.0, 25.0, 50.0, 90.0, 95.0, 99.9, 100.0)


def test_percentile_and_median_are_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(7)
    for n in [*range(1, 40), 1999, 2000]:
        for x in (rng.normal(size=n), rng.gamma(2.0, 3.0, size=n), rng.integers(0, 5, size=n)):
            ps = [*PS, *rng.uniform(0, 100, size=5)]
            want = np.percentile(x, ps)
            got = percentiles(x, ps)
            assert [v.hex() for v in got] == [float(v).hex() for v in want], (n, ps)
            assert percentile(x, ps[3]).hex() == float(np.percentile(x, ps[3])).hex()
            assert median(x).hex() == float(np.median(x)).hex()


def test_nan_gives_nan_as_numpy_does() -> None:
    x = [1.0, float("nan"), 3.0]
    assert np.isnan(percentile(x, 50)) and np.isnan(np.percentile(x, 50))
    assert np.isnan(median(x)) and np.isnan(np.median(x))


def test_median_last_axis_is_numpys() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 8):
        x = rng.normal(size=(50, 4, n))
        assert np.array_equal(median_last_axis(x), np.median(x, axis=-1))


def test_quantile_sorted_interpolates_linearly() -> None:
    xs = [1.0, 2.0, 4.0, 8.0]
    assert quantile_sorted(xs, 0.0) == 1.0 and quantile_sorted(xs, 1.0) == 8.0
    assert quantile_sorted(xs, 0.5) == 3.0  # between 2 and 4
    assert quantile_sorted(xs, 0.9) == pytest.approx(4.0 + 4.0 * 0.7)
    assert quantile_sorted([5.0], 0.1) == 5.0
    with pytest.raises(ValueError):
        quantile_sorted([], 0.5)
    # the plain a + (b - a) * t, which numpy's lerp equals to within one unit in the last place
    rng = np.random.default_rng(11)
    for _ in range(200):
        s = sorted(rng.normal(size=int(rng.integers(2, 30))).tolist())
        q = float(rng.uniform())
        pos = (len(s) - 1) * q
        lo = int(pos)
        want = s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)
        assert quantile_sorted(s, q) == want
        assert quantile_sorted(s, q) == pytest.approx(np.percentile(s, q * 100), abs=1e-15)


def test_tails_and_tail_percentiles() -> None:
    assert LEVEL == 0.90 and RESAMPLES == 2000 and SEED == 0
    low, high = tails()
    assert low == pytest.approx(5.0) and high == 95.0
    reps = np.random.default_rng(5).normal(size=RESAMPLES)
    want = np.percentile(reps, [low, high])
    assert tail_percentiles(reps) == (float(want[0]), float(want[1]))
    s = np.sort(reps).tolist()
    plain = tail_percentiles(reps, LEVEL, numpy_lerp=False)
    assert plain == (quantile_sorted(s, low / 100), quantile_sorted(s, high / 100))
    assert plain == pytest.approx(tuple(want), abs=1e-15)


def test_resample_draws_what_one_integers_call_draws() -> None:
    idx = resample(7, np.random.default_rng(SEED))
    assert idx.shape == (RESAMPLES, 7) and idx.min() >= 0 and idx.max() <= 6
    same = np.random.default_rng(SEED).integers(0, 7, size=(RESAMPLES, 7))
    assert np.array_equal(idx, same)  # the call sites' draw order depends on it
    assert np.array_equal(idx, resample(7, np.random.default_rng(SEED)))


def test_hierarchical_levels_are_the_same_for_the_same_seed() -> None:
    runs = [[0.10, 0.11, 0.12, 0.10], [0.13, 0.12, 0.14], [0.11, 0.10, 0.12, 0.11, 0.13]]
    a, b = hierarchical_levels(runs), hierarchical_levels(runs)
    assert a.shape == (RESAMPLES,) and np.array_equal(a, b)
    assert not np.array_equal(a, hierarchical_levels(runs, seed=1))
    assert 0.10 - 1e-12 <= a.min() and a.max() <= 0.14 + 1e-12  # geometric means of run medians
    whole = hierarchical_levels(runs, mean=True)  # two runs or more: the runs alone are drawn
    run_means = [float(np.mean(r)) for r in runs]
    assert min(run_means) - 1e-12 <= whole.min() and whole.max() <= max(run_means) + 1e-12
    one = hierarchical_levels([runs[0]], mean=True)  # one run: its steps are drawn
    assert len(set(one.tolist())) > 1


def test_stats_is_at_the_bottom_and_light() -> None:
    """It imports nothing from gpuopt outside itself, and numpy (and statistics) only when a
    function needs them: t and quantile_sorted run on the CLI's start-up path."""
    for path in (ROOT / "gpuopt" / "stats").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("gpuopt.") or node.module.startswith(
                    "gpuopt.stats"
                ), (path.name, node.module)
    code = (
        "import sys\n"
        "from gpuopt.stats.t import t_quantile\n"
        "from gpuopt.stats.quantiles import quantile_sorted\n"
        "import gpuopt.stats.bootstrap\n"
        "t_quantile(0.95, 2)\n"
        "quantile_sorted([1.0, 2.0], 0.5)\n"
        "print(sorted(m for m in ('numpy', 'statistics') if m in sys.modules))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_lone_outlier_is_found_by_its_modified_z_score() -> None:
    """Iglewicz & Hoaglin's modified z-score (median and MAD): one value far off among five or
    more is found; two far off are a second mode (none); under five values, none; identical
    values set nothing apart for a rounding's difference."""
    from gpuopt.stats.outliers import lone_outlier, modified_z

    logs = [0.81, 0.70, 0.81, 0.97, -0.66, 0.95]  # io_loader's pairs, one candidate stalled
    assert lone_outlier(logs) == 4
    assert modified_z(logs)[4] == pytest.approx(8.0, abs=0.1)
    assert lone_outlier([0.81, 0.70, 0.81, 0.97, -0.66, -0.70, 0.95]) is None
    assert lone_outlier([0.81, 0.70, 0.81, -0.66]) is None
    assert lone_outlier([0.5, 0.5, 0.5, 0.5, 0.505]) is None
    assert lone_outlier([0.5, 0.5, 0.5, 0.5, 0.9]) == 4

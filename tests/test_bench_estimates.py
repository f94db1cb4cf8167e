"""The verdict of benchmarks/bench_estimates.py: estimate against measured outcome."""

from __future__ import annotations

import pytest
from conftest import load_benchmark

_bench = load_benchmark("bench_estimates")
verdict = _bench.verdict  # type: ignore[attr-defined]
noise_of = _bench.noise_of  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("est", "measured", "noise", "expect"),
    [
        (1.96, 0.77, 0.05, "over-estimate (measured slowdown)"),  # the corpus VAE
        (1.0, 0.83, 0.05, "right (measured slowdown)"),  # "no gain expected": none came
        (1.0, 0.97, 0.05, "right (no measurable gain)"),
        (1.5, 1.6, 0.05, "right (measured gain)"),  # conservative
        (1.5, 1.45, 0.05, "right (measured gain)"),  # within the noise
        (2.0, 1.3, 0.05, "over-estimate (measured gain)"),
        (1.2, 1.02, 0.05, "over-estimate (no measurable gain)"),
        (None, 1.0, 0.05, "not measured"),
    ],
)
def test_verdicts(est: float | None, measured: float, noise: float, expect: str) -> None:
    assert verdict(est, measured, noise) == expect


def test_noise_is_the_scripts_own_run_to_run_floor() -> None:
    assert noise_of([1.0]) is None
    assert noise_of([1.0, 1.1, 1.0]) == pytest.approx(0.1)  # 1.1/1.0; 1.0/1.1 is 9% off

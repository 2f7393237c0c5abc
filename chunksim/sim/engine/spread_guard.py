"""A run-level check on jittered step times: no sampled step may stray from its median by
more than the widest spread the profile measured allows at that draw.

`--jitter` multiplies a step's median time by exp(sigma * z), with sigma from the
profile's p10/p90 spread and z a seeded standard normal. Inside the grid sigma is an
interpolation of measured spreads, so |ln(jittered / median)| <= sigma_max * |z| where
sigma_max is the widest measured spread. A spread carried beyond the grid without bound
breaks this and prices one decode step anywhere from nanoseconds to hours; the guard
refuses such a run instead of reporting it. The bound allows twice the widest measured
spread (cells the profiler pruned are filled by extrapolation and may exceed it a little).
"""

from __future__ import annotations

import math

import numpy as np

_Z90 = 1.2815515655446004  # standard normal 90th percentile
SLACK = 2.0
"""How many times the widest measured spread (in log space) a sampled step may reach."""


def widest_sigma(table) -> float:
    """The largest log-normal sigma, ln(p90 / p10) / (2 z90), over the table's rows."""
    p10 = np.asarray(table["p10_s"], dtype=float)
    p90 = np.asarray(table["p90_s"], dtype=float)
    ok = np.isfinite(p10) & np.isfinite(p90) & (p10 > 0) & (p90 >= p10)
    if not ok.any():
        return 0.0
    return float(np.max(np.log(p90[ok] / p10[ok]))) / (2 * _Z90)


class SpreadGuard:
    """Raises ValueError when a jittered step time is beyond its bound."""

    def __init__(self, sigma_max: float, covers: str) -> None:
        self.sigma_max = max(float(sigma_max), 0.0)
        self.covers = covers
        """What the profile's grid covers, for the message (`coverage.describe_ranges`)."""

    def _bound(self, z):
        return np.exp(SLACK * self.sigma_max * np.abs(z)) * (1 + 1e-9)

    def check(self, step: int, jittered_s: float, median_s: float, z: float) -> None:
        """One step: its jittered and median forward time and its draw."""
        bound = math.exp(SLACK * self.sigma_max * abs(z)) * (1 + 1e-9)
        if median_s > 0 and 1 / bound <= jittered_s / median_s <= bound:
            return
        self._fail(step, jittered_s, median_s, bound)

    def check_run(self, step0: int, jittered_s: np.ndarray, median_s: np.ndarray,
                  z: np.ndarray) -> None:
        """Consecutive steps `step0`, `step0 + 1`, ...: as `check`, vectorized."""
        bound = self._bound(z)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = jittered_s / median_s
        bad = ~((median_s > 0) & (ratio >= 1 / bound) & (ratio <= bound))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self._fail(step0 + i, float(jittered_s[i]), float(median_s[i]), float(bound[i]))

    def _fail(self, step: int, jittered_s: float, median_s: float, bound: float) -> None:
        factor = jittered_s / median_s if median_s > 0 else math.inf
        raise ValueError(
            f"--jitter: step {step} would take {jittered_s * 1e3:.4g} ms, {factor:.3g}x its "
            f"median {median_s * 1e3:.4g} ms, beyond the {bound:.3g}x that the widest "
            "spread the profile measured allows at this draw: the spread was carried past "
            f"the profile's grid ({self.covers}). Run without --jitter, or profile a grid "
            "that covers these steps (sim profile).")

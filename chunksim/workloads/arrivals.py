"""Arrival processes, as `vllm bench serve` generates them: Poisson, Gamma, fixed rate, burst.

Arrival 0 is at t=0 and each later arrival adds one sampled gap, the way vLLM's
`get_request` sends a request and then sleeps for the next interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np


class ArrivalKind(str, Enum):
    """How inter-arrival gaps are drawn (the value doubles as the CLI choice)."""

    POISSON = "poisson"
    GAMMA = "gamma"
    FIXED_RATE = "fixed-rate"
    BURST = "burst"


@dataclass(frozen=True)
class ArrivalProcess:
    """A stationary arrival process; `sample_arrivals` draws times from it."""

    kind: ArrivalKind = ArrivalKind.POISSON
    """Gap distribution: exponential, Gamma, constant 1/rate, or everything at t=0."""
    rate_per_s: float = 4.0
    """Mean arrival rate, requests per second (ignored by `burst`)."""
    burstiness: float = 1.0
    """Gamma shape, as in `vllm bench serve --burstiness`: gaps ~ Gamma(shape=b,
    scale=1/(rate*b)), so the mean gap stays 1/rate and the gap CV is 1/sqrt(b).
    1 = Poisson; < 1 burstier; > 1 more regular. Only `gamma` may set it != 1."""

    def __post_init__(self) -> None:
        if self.kind is not ArrivalKind.BURST and not (
            math.isfinite(self.rate_per_s) and self.rate_per_s > 0
        ):
            raise ValueError(
                f"arrival rate_per_s={self.rate_per_s} must be a finite number > 0 "
                "(use kind 'burst' to send every request at t=0)"
            )
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise ValueError(f"burstiness={self.burstiness} must be > 0 (1 = Poisson)")
        if self.burstiness != 1.0 and self.kind is not ArrivalKind.GAMMA:
            raise ValueError(
                f"burstiness={self.burstiness} only applies to Gamma arrivals, not "
                f"{self.kind.value!r}; use kind 'gamma' (or burstiness 1)"
            )

    def gaps_s(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` inter-arrival gaps, seconds."""
        match self.kind:
            case ArrivalKind.POISSON:
                return rng.exponential(1.0 / self.rate_per_s, size=n)
            case ArrivalKind.GAMMA:
                shape = self.burstiness
                return rng.gamma(shape, 1.0 / (self.rate_per_s * shape), size=n)
            case ArrivalKind.FIXED_RATE:
                return np.full(n, 1.0 / self.rate_per_s)
            case ArrivalKind.BURST:
                return np.zeros(n)
        raise AssertionError(self.kind)  # unreachable: the match covers every kind


def sample_arrivals(
    process: ArrivalProcess,
    rng: np.random.Generator,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> np.ndarray:
    """Arrival times (s, ascending, first at 0) for a count or for a time span.

    With `num_requests` exactly that many arrive; with `duration_s` every arrival in
    [0, duration_s) is kept (a random count for Poisson/Gamma). Give one of the two.
    """
    if (num_requests is None) == (duration_s is None):
        raise ValueError(
            f"give exactly one of num_requests={num_requests} and duration_s={duration_s}"
        )
    if num_requests is not None:
        if num_requests < 1:
            raise ValueError(f"num_requests={num_requests} must be >= 1")
        gaps = process.gaps_s(num_requests - 1, rng)
        return np.concatenate(([0.0], np.cumsum(gaps)))
    assert duration_s is not None
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s={duration_s} must be a finite number > 0")
    if process.kind is ArrivalKind.BURST:
        raise ValueError(
            "burst arrivals all land at t=0, so a duration says nothing about how many; "
            "give num_requests instead"
        )
    # Draw in chunks (mean count + 6 sigma covers it almost always) until past the span.
    expected = duration_s * process.rate_per_s
    chunk = int(expected + 6 * math.sqrt(expected / min(process.burstiness, 1.0)) + 16)
    times = [np.zeros(1)]
    last = 0.0
    while last < duration_s:
        t = last + np.cumsum(process.gaps_s(chunk, rng))
        times.append(t)
        last = float(t[-1])
    all_t = np.concatenate(times)
    return all_t[all_t < duration_s]

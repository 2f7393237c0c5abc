"""Maximum sustainable rate by bracketing and geometric bisection (Sarathi-Serve's
capacity search), as a small state machine so many searches can advance in lock-step
(one batch of parallel probes per round) or one at a time (`find_max_rate`).

Assumes feasibility is monotone in the rate (met below the capacity, missed above).
The bracket is found by doubling up from `start` (or halving down); bisection then probes
the geometric midpoint until hi / lo <= 1 + tol. Every search walks the same lattice of
rates (start * 2^(k/2^j)), so searches over different configurations end on comparable,
often equal, rates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RateSearch:
    """Search state; call `next_rate()` then `report(rate, ok)` until `done`."""

    start: float = 1.0
    """First rate probed, requests/s."""
    tol: float = 0.03
    """Stop when the bracket's ratio hi / lo is at most 1 + tol."""
    min_rate: float = 1e-3
    """Give up (capacity 0) if even this rate misses the SLOs."""
    max_rate: float = 1e4
    """Stop doubling here (capacity reported as >= max_rate)."""
    lo: float | None = None
    """Highest rate that met the SLOs so far."""
    hi: float | None = None
    """Lowest rate that missed them so far."""
    probes: list[tuple[float, bool]] = field(default_factory=list)
    """(rate, met) in probe order."""

    def __post_init__(self) -> None:
        if not 0 < self.tol < 1:
            raise ValueError(f"--tol {self.tol}: must be in (0, 1), e.g. 0.03 for 3 %")
        if not 0 < self.min_rate <= self.start <= self.max_rate:
            raise ValueError(
                f"rates must satisfy 0 < min ({self.min_rate}) <= start ({self.start}) <= max "
                f"({self.max_rate}); adjust --rate / --max-rate")

    def next_rate(self) -> float | None:
        """The next rate to probe, or None when the search is over."""
        lo, hi = self.lo, self.hi
        if lo is None and hi is None:
            return self.start
        if lo is None:
            r = hi / 2
            return r if r >= self.min_rate else None
        if hi is None:
            return min(lo * 2, self.max_rate) if lo < self.max_rate else None
        if hi / lo <= 1 + self.tol:
            return None
        return math.sqrt(lo * hi)

    @property
    def done(self) -> bool:
        return self.next_rate() is None

    def report(self, rate: float, ok: bool) -> None:
        self.probes.append((rate, ok))
        if ok:
            self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)

    @property
    def capacity(self) -> float:
        """Highest rate found to meet the SLOs (0 if none did)."""
        return self.lo or 0.0

    @property
    def capped(self) -> bool:
        """True if the SLOs still held at `max_rate` (the capacity is at least that)."""
        return self.hi is None and self.lo is not None and self.lo >= self.max_rate


def find_max_rate(feasible: Callable[[float], bool], start: float = 1.0, tol: float = 0.03,
                  min_rate: float = 1e-3, max_rate: float = 1e4) -> RateSearch:
    """Run one search to the end with `feasible(rate) -> bool`; returns the final state."""
    s = RateSearch(start, tol, min_rate, max_rate)
    while (r := s.next_rate()) is not None:
        s.report(r, bool(feasible(r)))
    return s

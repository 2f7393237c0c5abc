"""Maximum sustainable rate by bracketing and geometric bisection (Sarathi-Serve's
capacity search), as a small state machine so many searches can advance in lock-step
(one batch of parallel probes per round) or one at a time (`find_max_rate`).

The bracket is found by doubling up from `start` (or halving down); bisection then probes
the geometric midpoint until hi / lo <= 1 + tol. Every search walks the same lattice of
rates (start * 2^(k/2^j)), so searches over different configurations end on comparable,
often equal, rates.

Bisection assumes feasibility is monotone in the rate; a tail percentile of a finite run
is not quite (one unlucky burst fails a rate that a higher one passes). So the bracket is
always defined from every probe so far (lo = the highest rate that met the SLOs, hi = the
lowest rate above lo that missed), and before the answer is accepted the search probes a
few rates above hi (`verify`): if one of them passes, lo moves up and the search goes on.
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
    verify: tuple[float, ...] = (1.15, 1.4)
    """Once converged, also probe hi times each of these; a pass there resumes the search."""
    max_probes: int = 64
    """A hard stop, whatever the probes say."""
    probes: list[tuple[float, bool]] = field(default_factory=list)
    """(rate, met) in probe order."""
    floor_fails: bool = False
    """Every rate the halving has left (below `hi`, down to `min_rate`) is known to miss
    without probing it (`capacity.static_floor`): with nothing met, the search is over."""

    @property
    def lo(self) -> float | None:
        """Highest rate that met the SLOs so far."""
        return max((r for r, ok in self.probes if ok), default=None)

    @property
    def hi(self) -> float | None:
        """Lowest rate above `lo` that missed them so far (any missed rate if none met)."""
        lo = self.lo
        return min((r for r, ok in self.probes if not ok and (lo is None or r > lo)),
                   default=None)

    @property
    def non_monotone(self) -> list[float]:
        """Rates below the capacity that missed the SLOs (sorted): the evidence that a
        plain bisection would have stopped too low."""
        lo = self.lo
        return sorted(r for r, ok in self.probes if not ok and lo is not None and r < lo)

    def __post_init__(self) -> None:
        if not 0 < self.tol < 1:
            raise ValueError(f"--tol {self.tol}: must be in (0, 1), e.g. 0.03 for 3 %")
        if not 0 < self.min_rate <= self.start <= self.max_rate:
            raise ValueError(
                f"rates must satisfy 0 < min ({self.min_rate}) <= start ({self.start}) <= max "
                f"({self.max_rate}); adjust --rate / --max-rate")
        if any(not m > 1 for m in self.verify):
            raise ValueError(f"verify multipliers {self.verify} must all be > 1")

    def next_rate(self) -> float | None:
        """The next rate to probe, or None when the search is over."""
        if len(self.probes) >= self.max_probes:
            return None
        lo, hi = self.lo, self.hi
        if lo is None and hi is None:
            return self.start
        if lo is None:
            r = hi / 2
            return r if r >= self.min_rate and not self.floor_fails else None
        if hi is None:
            return min(lo * 2, self.max_rate) if lo < self.max_rate else None
        if hi / lo > 1 + self.tol:
            return math.sqrt(lo * hi)
        probed = {r for r, _ in self.probes}
        for m in self.verify:
            r = min(hi * m, self.max_rate)
            if r > hi and r not in probed:
                return r
        return None

    def halvings(self) -> list[float]:
        """The rates a search that has met nothing probes next, in order, while each
        misses: hi / 2, hi / 4, ... down to `min_rate` (none once a rate met)."""
        if self.lo is not None or self.hi is None:
            return []
        out, r = [], self.hi / 2
        while r >= self.min_rate:
            out.append(r)
            r /= 2
        return out

    @property
    def done(self) -> bool:
        return self.next_rate() is None

    def report(self, rate: float, ok: bool) -> None:
        self.probes.append((rate, ok))

    @property
    def capacity(self) -> float:
        """Highest rate found to meet the SLOs (0 if none did)."""
        return self.lo or 0.0

    @property
    def capped(self) -> bool:
        """True if the SLOs still held at `max_rate` (the capacity is at least that)."""
        return self.hi is None and self.lo is not None and self.lo >= self.max_rate


def find_max_rate(feasible: Callable[[float], bool], start: float = 1.0, tol: float = 0.03,
                  min_rate: float = 1e-3, max_rate: float = 1e4,
                  verify: tuple[float, ...] = (1.15, 1.4)) -> RateSearch:
    """Run one search to the end with `feasible(rate) -> bool`; returns the final state."""
    s = RateSearch(start, tol, min_rate, max_rate, verify)
    while (r := s.next_rate()) is not None:
        s.report(r, bool(feasible(r)))
    return s

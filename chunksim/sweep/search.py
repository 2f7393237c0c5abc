"""Maximum sustainable rate by bracketing and geometric bisection (Sarathi-Serve's
capacity search), as a small state machine so many searches can advance in lock-step
(one batch of parallel probes per round) or one at a time (`find_max_rate`).

The bracket is found by doubling up from `start` (or halving down, the first octave's
midpoint first: `RateSearch._below`); bisection then probes the geometric midpoint until
hi / lo <= 1 + tol. Every search walks the same lattice of rates (start * 2^(k/2^j)), so
searches over different configurations end on comparable, often equal, rates.

Bisection assumes feasibility is monotone in the rate; a tail percentile of a finite run
is not quite (one unlucky burst fails a rate that a higher one passes). So the bracket is
always defined from every probe so far (lo = the highest rate that met the SLOs, hi = the
lowest rate above lo that missed), and before the answer is accepted the search probes a
few rates above hi (`verify`): if one of them passes, lo moves up and the search goes on.

A search may instead start from a *hint*, a rate near where it expects to end (another
configuration's capacity, `capacity.capacity_search`): it probes the hint, then walks away
from it 1, 2, 4, ... lattice steps until a probe flips, and bisects that bracket. Where
feasibility is monotone it ends on the bracket the cold search ends on, so with the same
checks above and the same capacity, in a few probes when the hint is close.
"""

from __future__ import annotations

import dataclasses
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
    hint: float | None = None
    """Where the search starts instead of `start` (set by `aim`, on the lattice of
    `start`); it then walks away from it to a bracket. None: doubling or halving from
    `start`."""

    @property
    def steps_per_octave(self) -> int:
        """The finest lattice the bisection reaches: 2^j rates an octave, for the least j
        whose step 2^(1/2^j) is within 1 + tol (the bracket it stops on)."""
        n = 1
        while 2.0 ** (1.0 / n) > 1 + self.tol:
            n *= 2
        return n

    def aim(self, rate: float) -> None:
        """Start from `rate` (rounded down to the lattice of `start`, within the search's
        rates) instead of `start`; only before the first probe."""
        if self.probes:
            raise ValueError("aim: the search has already probed; a hint only starts one")
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"aim: a hint must be a rate > 0, not {rate}")
        n = self.steps_per_octave
        k = math.floor(math.log2(rate / self.start) * n + 1e-9)
        self.hint = min(max(self.start * 2.0 ** (k / n), self.min_rate), self.max_rate)

    def _walk(self, lo: float | None, hi: float | None) -> float | None:
        """A hinted search's next rate while the hint's side is unbracketed: 1, 2, 4, ...
        lattice steps from the hint, past the farthest probe, within an octave of it
        (None beyond that, where doubling or halving goes on)."""
        n = self.steps_per_octave
        edge = hi if lo is None else lo
        off = round(abs(math.log2(edge / self.hint)) * n)
        nxt = max(1, 2 * off)
        if nxt > n:
            return None
        r = self.hint * 2.0 ** ((nxt if lo is not None else -nxt) / n)
        return r if self.min_rate <= r <= self.max_rate else None

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
            return self.start if self.hint is None else self.hint
        if self.hint is not None and (lo is None or hi is None) and not (
                lo is None and self.floor_fails):
            r = self._walk(lo, hi)
            if r is not None:
                return r
        if lo is None:
            r = self._below(hi)
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

    def _below(self, hi: float) -> float:
        """Where a search that has met nothing goes next below `hi`, its lowest miss:
        down an octave at a time (hi / 2). In the octave below a cold start, the midpoint
        of that octave comes first, then its lower end if the midpoint misses too: the
        rates the halving and the bisection after it probe (the same floats), but a
        capacity in the upper half of the octave (where a start from the service rate
        puts it, `bracket`) costs no probe at the octave's lower end, which would pass
        and so run in full."""
        if self.hint is None:
            mid = math.sqrt(self.start * (self.start / 2))
            if hi == self.start:
                return mid
            if hi == mid:
                return self.start / 2
        return hi / 2

    def halvings(self) -> list[float]:
        """The rates a search that has met nothing probes next, in order, while each
        misses: hi / 2, hi / 4, ... down to `min_rate` (a hinted search first walks down
        from its hint); none once a rate met."""
        if self.lo is not None or self.hi is None:
            return []
        ahead = dataclasses.replace(self, probes=list(self.probes), floor_fails=False,
                                    max_probes=len(self.probes) + 10_000)
        out = []
        while (r := ahead.next_rate()) is not None:
            out.append(r)
            ahead.report(r, False)
        return out

    @property
    def converged(self) -> bool:
        """The bisection has narrowed the bracket to the tolerance (what is left is the
        checks above it, which may resume the search)."""
        lo, hi = self.lo, self.hi
        return lo is not None and hi is not None and hi / lo <= 1 + self.tol

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
                  verify: tuple[float, ...] = (1.15, 1.4),
                  hint: float | None = None) -> RateSearch:
    """Run one search to the end with `feasible(rate) -> bool` (from `hint` if given,
    `RateSearch.aim`); returns the final state."""
    s = RateSearch(start, tol, min_rate, max_rate, verify)
    if hint is not None:
        s.aim(hint)
    while (r := s.next_rate()) is not None:
        s.report(r, bool(feasible(r)))
    return s

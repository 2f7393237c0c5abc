"""Early stop of a run whose SLO verdict is already known: a percentile bound that can no
longer hold.

A bound `pP_X_ms <= B` (or `median_X_ms <= B`, P = 50) is judged on numpy's linear
percentile of the run's n samples of X: with the samples sorted, h = (n - 1) P / 100 and
the percentile lies between x[floor(h)] and x[floor(h) + 1]. So once at least
n - floor(h) samples are certainly above B, x[floor(h)] > B and the percentile is too:
the bound fails, whatever the rest of the run does. A sample is *certainly* above B when
it is measured above B, or when it is still open and already longer than B: a request
waiting since `arrival` with no first token by `now` has TTFT >= now - arrival; the next
gap of a request whose last token came at `last` is >= now - last. That second kind is
how a growing queue settles a run: every request in it that has waited longer than the
bound is a miss already counted.

n is the number of samples the finished run will have. Requests are rejected only on
arrival (by their lengths), so n is at most the requests not rejected so far (for ITL:
their output tokens - 1 each), and n - floor(h) never falls as n grows: counting against
that upper bound is exact, never early. Every latency is compared in ms as the summary
computes it, with a relative margin of 1e-9 against rounding in the interpolation.

The share of rejected requests settles too (`REJECTED_KEY`, a cap in %): requests are
rejected on arrival and never un-rejected, and at the end the share is over at most every
request of the workload, so once `rejected / all requests` is above the cap, so is the
finished run's share.

Checked for TTFT, scheduling delay, E2EL (finish) and ITL; E2EL and ITL not on P/D
fleets (a request's later tokens come from another pool), ITL only while the run pools
its gaps exactly (`records.EXACT_GAP_SAMPLES`), and an open gap only on a lone engine
(a fleet replica's bulk segment in flight has not stamped its tokens yet).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from chunksim.sim.records.records import EXACT_GAP_SAMPLES

REJECTED_KEY = "rejected_pct"
"""The bound of a watched run on the share of its requests rejected, in % (the probe's
--max-reject-pct), beside the latency bounds (`watchable` keys, in ms)."""
SETTLE_EVERY_STEPS = 256
"""How often (in an engine's steps) a watched run checks its bounds, at most. Each check
costs a pass over the bounds and ends a bulk decode segment; checking seldomer lets a
run that fails go on longer before it stops (benchmarks/time_to_answer.py weighs the
two)."""
MIN_SETTLE_STEPS = 8
"""How often at least: a bound whose misses grow fast is checked again about when they
could reach what settles it (`SloWatch.check`), but no sooner than this."""
_MARGIN = 1e-9
_KEY = re.compile(r"^(p(\d+)|median)_(ttft|sched_delay|e2el|itl)_ms$")


class Settled(Exception):  # noqa: N818 - an outcome, not an error
    """Raised out of the simulation when a bound has certainly failed."""

    def __init__(self, key: str, bound_ms: float, missed: int, needed: int,
                 sim_s: float) -> None:
        # the fields are the args: SimPy re-raises a process's exception as
        # type(e)(*e.args)
        super().__init__(key, bound_ms, missed, needed, sim_s)
        self.key, self.bound_ms, self.missed, self.needed, self.sim_s = (
            key, bound_ms, missed, needed, sim_s)

    def __str__(self) -> str:
        return (f"{self.key} > {self.bound_ms:g} ms settled at {self.sim_s:.1f} s "
                f"({self.missed} samples above it, {self.needed} settle it)")

    def summary(self, workload) -> dict:
        """What a settled run reports: its decision, not figures."""
        unit = "pct" if self.key == REJECTED_KEY else "ms"
        return {"stopped": True, "completed": None, "workload": workload.name,
                "requests": len(workload.requests),
                "stopped_key": self.key, f"stopped_bound_{unit}": self.bound_ms,
                "stopped_missed": self.missed, "stopped_needed": self.needed,
                "stopped_at_s": self.sim_s}


def watchable(key: str) -> bool:
    """Whether `key` is a bound this module can settle."""
    m = _KEY.match(key)
    return m is not None and (m.group(2) is None or 0 < int(m.group(2)) < 100)


def needed_above(n: int, pct: float) -> int:
    """Samples above B (of n) that put numpy's linear `pct`-th percentile above B."""
    h = (n - 1) * (np.float64(pct) / 100.0)  # numpy's own virtual index
    return n - int(math.floor(h))


class SloWatch:
    """Watches the engines of one run (`attach`) and raises `Settled` from `check` once a
    bound has failed for good. `first_engines` are where requests are first scheduled (a
    P/D fleet's prefill pool); with `whole` False (P/D) only TTFT and scheduling delay are
    watched."""

    def __init__(self, slos_ms: Mapping[str, float], workload) -> None:
        specs = workload.requests
        self.arrival = specs.arrival_s
        self.gaps_of = np.maximum(specs.output_tokens - 1, 0)
        self.total_gaps = int(self.gaps_of.sum())
        self.bounds: list[tuple[str, str, float, float]] = []  # key, series, pct, bound
        self.max_reject_pct: float | None = None
        for key, bound in slos_ms.items():
            if key == REJECTED_KEY:
                self.max_reject_pct = float(bound)
                continue
            m = _KEY.match(key)
            if m is None or not watchable(key):
                continue
            pct = 50.0 if m.group(1) == "median" else float(m.group(2))
            self.bounds.append((key, m.group(3), pct, float(bound)))
        self.engines: list = []
        self.first_engines: list = []
        self.whole = True
        self.lone = True
        self._gap_counters: dict[tuple[int, float], _GapCounter] = {}
        self._seen: dict[str, int] = {}  # bound -> misses at the last check

    @property
    def active(self) -> bool:
        return bool(self.bounds) or self.max_reject_pct is not None

    def attach(self, engines: Sequence, first_engines: Sequence | None = None,
               lone: bool = False) -> None:
        """Watch these engines (each checks every SETTLE_EVERY_STEPS of its steps);
        `first_engines`: where requests are first scheduled, when not the same (P/D)."""
        self.engines = list(engines)
        self.first_engines = list(first_engines) if first_engines is not None else []
        self.whole = first_engines is None
        self.lone = lone and len(self.engines) == 1
        for e in self.engines + self.first_engines:
            e.watch = self

    # ------------------------------------------------------------------ the check
    def check(self, now: float, steps: int = SETTLE_EVERY_STEPS) -> int:
        """Raise `Settled` if a bound has certainly failed by `now`. Else return in how
        many steps to check again: when the misses of each bound, growing at their pace
        over the last `steps` steps, could settle it (MIN_SETTLE_STEPS at least,
        SETTLE_EVERY_STEPS where none grows). When it checks never changes the verdict,
        only how soon a run that fails stops."""
        first = self.first_engines or self.engines
        rejected: set[int] = set()
        for e in self.engines + self.first_engines:
            rejected.update(e.core.rejected)
        cap = self.max_reject_pct
        if cap is not None and len(rejected) * 100.0 > cap * len(self.arrival):
            raise Settled(REJECTED_KEY, cap, len(rejected),
                          math.floor(cap * len(self.arrival) / 100.0) + 1, now)
        n_req = len(self.arrival) - len(rejected)
        every = SETTLE_EVERY_STEPS
        for key, series, pct, bound in self.bounds:
            if series in ("e2el", "itl") and not self.whole:
                continue
            if series == "itl":
                if self.total_gaps > EXACT_GAP_SAMPLES:
                    continue
                n = self.total_gaps - int(self.gaps_of[list(rejected)].sum()) if rejected \
                    else self.total_gaps
                missed = self._itl_missed(bound, now)
            elif series == "ttft" and not self.whole:
                n = n_req
                missed = self._pd_ttft_missed(bound, now, rejected)
            else:
                n = n_req
                missed = self._missed(first if series != "e2el" else self.engines, series,
                                      bound, now)
            if missed is None or n <= 0:
                continue
            need = needed_above(n, pct)
            if missed >= need:
                raise Settled(key, bound, missed, need, now)
            grew, self._seen[key] = missed - self._seen.get(key, 0), missed
            if grew > 0:
                every = min(every, max(MIN_SETTLE_STEPS, (need - missed) * steps // grew))
        return every

    def _missed(self, engines, series: str, bound_ms: float, now: float) -> int:
        """Requests whose `series` latency is certainly above the bound by `now`."""
        limit = bound_ms * (1.0 + _MARGIN)
        arrival = self.arrival
        missed = 0
        for e in engines:
            c = e.core
            done = {"ttft": c.first_token_s, "sched_delay": c.first_sched_s,
                    "e2el": c.finish_s}[series]
            # (a request not done yet is NaN there: NaN arithmetic and comparisons raise
            # no floating-point flag, and NaN is never above the limit)
            missed += int(np.count_nonzero((done - arrival) * 1000.0 > limit))
            for req in _in_flight(c):
                t = (req.first_token_s if series == "ttft" else
                     req.first_scheduled_s if series == "sched_delay" else -1.0)
                if t < 0:
                    t = now
                if (t - req.spec.arrival_s) * 1000.0 > limit:
                    missed += 1
        return missed

    def _pd_ttft_missed(self, bound_ms: float, now: float, rejected: set[int]) -> int:
        """P/D: requests whose TTFT is certainly above the bound by `now`. A request's first
        token comes from its decode instance (from its prefill instance if it wants one
        token); until it is out, its TTFT is at least `now` less its arrival."""
        limit = bound_ms * (1.0 + _MARGIN)
        first = np.full(len(self.arrival), np.nan)
        for e in self.engines:  # each holds NaN for the requests it never finished
            np.fmin(first, e.core.first_token_s, out=first)
            for req in _in_flight(e.core):  # (a preempted one waits with its tokens)
                if req.first_token_s >= 0:
                    first[req.spec.request_id] = req.first_token_s
        one = self.gaps_of == 0
        for e in self.first_engines:
            first[one] = np.fmin(first[one], e.core.first_token_s[one])
        if rejected:
            first[list(rejected)] = -np.inf  # not counted: neither made nor waiting
        ttft_ms = (np.where(np.isnan(first), now, first) - self.arrival) * 1000.0
        return int(np.count_nonzero(ttft_ms > limit))

    def _itl_missed(self, bound_ms: float, now: float) -> int | None:
        """Token gaps certainly above the bound: the recorded ones, and (a lone engine)
        each open request's gap since its last token."""
        limit_s = bound_ms * (1.0 + _MARGIN)
        missed = 0
        for e in self.engines:
            g = e.core.gaps
            if g.streaming:
                return None
            counter = self._gap_counters.get((id(g), bound_ms))
            if counter is None:
                counter = self._gap_counters[id(g), bound_ms] = _GapCounter(limit_s)
            missed += counter.count(g)
            if self.lone:
                for req in _in_flight(e.core):
                    last = req.last_token_s
                    if last >= 0 and req.num_output_tokens < req.spec.output_tokens and (
                            now - last) * 1000.0 > limit_s:
                        missed += 1
        return missed


class _GapCounter:
    """Gaps of a `records.GapLog` above a limit (ms), counted as they are logged: each
    packed array and each run once, the loose gaps from where the last count stopped
    (packing moves them, counted, into the next packed array)."""

    __slots__ = ("limit_ms", "packed", "runs", "single", "fixed", "loose")

    def __init__(self, limit_ms: float) -> None:
        self.limit_ms = limit_ms
        self.packed = self.runs = self.single = 0  # entries counted so far
        self.fixed = 0  # above the limit among the packed arrays and runs counted
        self.loose = 0  # above the limit among g.single[:self.single]

    def count(self, g) -> int:
        lim = self.limit_ms
        if len(g.packed) > self.packed:
            for v, _ in g.packed[self.packed:]:
                self.fixed += int(np.count_nonzero(v * 1000.0 > lim))
            self.packed = len(g.packed)
            self.single = self.loose = 0  # the loose gaps now sit in a packed array
        if len(g.runs) > self.runs:
            # the runs logged since the last count in one pass: each gap above the limit
            # counts once per request that had it (integers: the order does not matter)
            new = g.runs[self.runs:]
            vals = np.concatenate([v for v, _ in new]) if len(new) > 1 else new[0][0]
            above = vals * 1000.0 > lim
            if above.any():
                per = np.repeat([sum(cnt) for _, cnt in new], [len(v) for v, _ in new])
                self.fixed += int(per[above].sum())
            self.runs = len(g.runs)
        if len(g.single) > self.single:
            new = np.asarray(g.single[self.single:], dtype=float)
            self.loose += int(np.count_nonzero(new * 1000.0 > lim))
            self.single = len(g.single)
        return self.fixed + self.loose


def _in_flight(core):
    """The requests an engine holds and has not finished: running, then waiting."""
    yield from core.running
    yield from core.waiting

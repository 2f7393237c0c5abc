"""The median-seed rule when some seeds stopped early (`sim.engine.settle`): decided exactly, or
not at all.

A stopped seed is known only to exceed the bounds it settled (`failed_keys`); its other
metrics are unknown (>= 0). Per bound, the median over seeds is monotone in every seed's
value, so taking each unknown at its least and at its greatest bounds the median: if
even the least median misses, the bound fails; if even the greatest meets it, it holds;
else the bound is open (`open_bounds`) and so is the probe, until its stopped seeds run
again, each settling only on the open bounds it is not known to miss: it stops once it
misses one of them (one more bound known, `merge_runs`) or runs to its end (all known).
Each such run closes a bound or learns one more, so the probe is decided in at most as
many rounds as it has bounds. With an odd number of seeds a settled miss decides its
bound as the full value would; with an even number the median averages two seeds, and a
settled seed may leave it open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from chunksim.sim.engine.settle import REJECTED_KEY, watchable
from chunksim.sweep.seeds import median_value


def settle_bounds(slos: Mapping[str, float], max_reject_pct: float | None = None
                  ) -> tuple[tuple[str, float], ...]:
    """The bounds a probe run may stop on (`SimJob.settle_slos_ms`): its watchable SLOs,
    and the cap on the share of requests it may reject (`settle.REJECTED_KEY`)."""
    cap = () if max_reject_pct is None else ((REJECTED_KEY, float(max_reject_pct)),)
    return tuple((k, float(b)) for k, b in slos.items() if watchable(k)) + cap


def rejected_too_many(runs: Sequence[Mapping]) -> bool:
    """Some seed stopped on the rejection cap: the probe fails, whatever the latencies
    (`capacity.judge`: any seed rejecting beyond the cap fails it)."""
    return any(REJECTED_KEY in failed_keys(s) for s in runs)


def stopped(summary: Mapping) -> bool:
    return bool(summary.get("stopped"))


def failed_keys(summary: Mapping) -> frozenset[str]:
    """The bounds a seed is known to miss from its stopped runs: the one its last run
    settled, and those its earlier runs did (`stopped_keys`, `merge_runs`); none for a
    run in full."""
    if not stopped(summary):
        return frozenset()
    keys = summary.get("stopped_keys")
    if keys is not None:
        return frozenset(keys)
    key = summary.get("stopped_key")
    return frozenset() if key is None else frozenset((key,))


def merge_runs(before: Mapping, after: dict) -> dict:
    """What a seed is known to give after it ran again (`open_bounds`): a run in full
    tells everything; one that stopped again adds the bound it settled to those its
    earlier runs settled."""
    if not stopped(after):
        return after
    return {**after, "stopped_keys": sorted(failed_keys(before) | failed_keys(after))}


def _bound_verdict(runs: Sequence[Mapping], key: str, bound: float) -> bool | None:
    """The median seed's verdict on one bound, None while the stopped seeds leave it open:
    each seed's unknown value taken at its least and at its greatest bounds the median."""
    lo, hi = [], []
    for s in runs:
        if not stopped(s):
            v = median_value([s], key)
            lo.append(v)
            hi.append(v)
        elif key in failed_keys(s):
            lo.append(math.nextafter(float(bound), math.inf))
            hi.append(math.inf)
        else:
            lo.append(0.0)
            hi.append(math.inf)
    if float(np.median(lo)) > bound:
        return False
    return True if float(np.median(hi)) <= bound else None


def decide(runs: Sequence[Mapping], slos: Mapping[str, float]) -> bool | None:
    """The median-seed verdict (`capacity.judge`) of runs some of which stopped early:
    True / False when exact, None when the stopped seeds leave it open."""
    if not any(stopped(s) for s in runs):
        return all(median_value(runs, k) <= b for k, b in slos.items())
    verdict: bool | None = True
    for key, bound in slos.items():
        v = _bound_verdict(runs, key, bound)
        if v is False:
            return False
        if v is None:
            verdict = None
    return verdict


def open_bounds(runs: Sequence[Mapping], slos: Mapping[str, float]) -> list[str]:
    """The bounds whose median-seed verdict the stopped seeds leave open (`decide` is
    None when there is one and none is missed): a stopped seed run again to settle one of
    these, or to its end, is all that can close them."""
    return [k for k, b in slos.items() if _bound_verdict(runs, k, b) is None]

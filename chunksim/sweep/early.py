"""The median-seed rule when some seeds stopped early (`sim.settle`): decided exactly, or
not at all.

A stopped seed is known only to exceed the bound it settled (`stopped_key`); its other
metrics are unknown (>= 0). Per bound, the median over seeds is monotone in every seed's
value, so taking each unknown at its least and at its greatest bounds the median: if
even the least median misses, the bound fails; if even the greatest meets it, it holds;
else the probe is undecided and its stopped seeds must run in full. With an odd number
of seeds a settled miss decides its bound as the full value would; with an even number
the median averages two seeds, and a settled seed may leave it open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from chunksim.sim.settle import REJECTED_KEY, watchable
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
    return any(stopped(s) and s.get("stopped_key") == REJECTED_KEY for s in runs)


def stopped(summary: Mapping) -> bool:
    return bool(summary.get("stopped"))


def decide(runs: Sequence[Mapping], slos: Mapping[str, float]) -> bool | None:
    """The median-seed verdict (`capacity.judge`) of runs some of which stopped early:
    True / False when exact, None when the stopped seeds leave it open."""
    if not any(stopped(s) for s in runs):
        return all(median_value(runs, k) <= b for k, b in slos.items())
    verdict: bool | None = True
    for key, bound in slos.items():
        lo, hi = [], []
        for s in runs:
            if not stopped(s):
                v = median_value([s], key)
                lo.append(v)
                hi.append(v)
            elif s.get("stopped_key") == key:
                lo.append(math.nextafter(float(s["stopped_bound_ms"]), math.inf))
                hi.append(math.inf)
            else:
                lo.append(0.0)
                hi.append(math.inf)
        if float(np.median(lo)) > bound:
            return False
        if not float(np.median(hi)) <= bound:
            verdict = None
    return verdict

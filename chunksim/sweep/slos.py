"""Capacity SLOs: bounds on summary keys (`p99_itl_ms=100`), each met when value <= bound.

Sarathi-Serve's capacity also bounds the median scheduling delay (arrival -> first
scheduled) at 2 s; that bound is on by default and can be changed or switched off
(`--slo median_sched_delay_ms=off`). With no --slo at all, the verdicts and capacity
searches use `DEFAULT_SLOS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from chunksim.sim.metrics import PERCENTILES
from chunksim.sim.rejections import reject_pct
from chunksim.sim.settle import REJECTED_KEY

SCHED_DELAY_KEY = "median_sched_delay_ms"
DEFAULT_SCHED_DELAY_MS = 2000.0
"""Sarathi-Serve's bound on the median scheduling delay, ms."""
DEFAULT_SLOS: dict[str, float] = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0,
                                  SCHED_DELAY_KEY: DEFAULT_SCHED_DELAY_MS}
"""Bounds used when none are given: P99 ITL <= 100 ms (a stall a reader notices),
P99 TTFT <= 2 s, and Sarathi-Serve's median scheduling delay <= 2 s."""
_SERIES = ("ttft", "tpot", "itl", "e2el", "sched_delay")
_STATS = ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))


def slo_keys() -> list[str]:
    """Every numeric summary key in ms (the names `summarize` writes)."""
    keys = [f"{s}_{m}_ms" for m in _SERIES for s in _STATS]
    return keys + ["max_decode_stall_ms", "mean_step_ms"]


def parse_capacity_slos(items: list[str] | None,
                        sched_delay_ms: float | None = DEFAULT_SCHED_DELAY_MS) -> dict[str, float]:
    """`["p99_itl_ms=100", "p99_ttft_ms:2000"]` -> {key: bound_ms}; adds the median
    scheduling-delay bound unless given (a value of `off` drops it). No items at all ->
    `DEFAULT_SLOS`."""
    if not items:
        return dict(DEFAULT_SLOS)
    valid = slo_keys()
    slos: dict[str, float] = {}
    off: set[str] = set()
    for item in items or []:
        for part in item.replace(",", " ").split():
            key, sep, val = part.replace(":", "=").partition("=")
            key = key.strip().lower()
            if not sep or key not in valid:
                raise ValueError(
                    f"--slo {part!r}: use KEY=MS with KEY a summary key in ms, one of: "
                    f"{', '.join(valid)} (e.g. --slo p99_itl_ms=100 --slo p99_ttft_ms=2000)")
            if val.strip().lower() in ("off", "none", "inf"):
                off.add(key)
                continue
            try:
                ms = float(val)
            except ValueError:
                raise ValueError(f"--slo {part!r}: {val!r} is not a number of ms") from None
            if not (ms > 0 and math.isfinite(ms)):
                raise ValueError(f"--slo {part!r}: the bound must be a finite number > 0 ms")
            slos[key] = ms
    if sched_delay_ms is not None and SCHED_DELAY_KEY not in slos and SCHED_DELAY_KEY not in off:
        slos[SCHED_DELAY_KEY] = sched_delay_ms
    for key in off:
        slos.pop(key, None)
    if not slos:
        raise ValueError("--slo: every bound is off; give at least one (e.g. --slo "
                         "p99_itl_ms=100)")
    return slos


def meets(summary: Mapping[str, object], slos: Mapping[str, float]) -> bool:
    """Whether every bound holds (a run that completed nothing meets none)."""
    if not summary.get("completed"):
        return False
    return all(float(summary[k]) <= bound for k, bound in slos.items())


def violations(summary: Mapping[str, object], slos: Mapping[str, float],
               max_reject_pct: float | None = None) -> list[str]:
    """The bounds that fail, as 'key value > bound' strings (a run that completed
    nothing has no latency to bound: it fails every bound; a run stopped early, `stopped`,
    names the bound that settled it, with no value); with `max_reject_pct`, also a share
    of rejected requests above it."""
    if summary.get("stopped"):
        keys = summary.get("stopped_keys") or [summary.get("stopped_key")]
        return [f"{k} > {slos[k]:g} (settled early)" if k in slos else
                f"rejected > {max_reject_pct:g} % (settled early)"
                if k == REJECTED_KEY and max_reject_pct is not None else
                f"{k} (settled early)" for k in keys]
    if not summary.get("completed"):
        return [f"completed nothing ({summary.get('rejected', 0)} rejected)"]
    out = [f"{k} {float(summary[k]):.1f} > {b:g}" for k, b in slos.items()
           if float(summary[k]) > b]
    if max_reject_pct is not None and reject_pct(summary) > max_reject_pct:
        out.append(f"rejected {reject_pct(summary):.3g} % > {max_reject_pct:g} %")
    return out

"""Capacity SLOs: bounds on summary keys (`p99_itl_ms=100`), each met when value <= bound.

Sarathi-Serve's capacity also bounds the median scheduling delay (arrival -> first
scheduled) at 2 s; that bound is on by default and can be changed or switched off
(`--slo median_sched_delay_ms=off`). With no --slo at all, the verdicts and capacity
searches use `DEFAULT_SLOS`.
"""

from __future__ import annotations

from collections.abc import Mapping

from chunksim.sim.engine.settle import REJECTED_KEY
from chunksim.sim.metrics.metric_registry import ms_keys, parse_bounds
from chunksim.sim.records.rejections import reject_pct

SCHED_DELAY_KEY = "median_sched_delay_ms"
DEFAULT_SCHED_DELAY_MS = 2000.0
"""Sarathi-Serve's bound on the median scheduling delay, ms."""
DEFAULT_SLOS: dict[str, float] = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0,
                                  SCHED_DELAY_KEY: DEFAULT_SCHED_DELAY_MS}
"""Bounds used when none are given: P99 ITL <= 100 ms (a stall a reader notices),
P99 TTFT <= 2 s, and Sarathi-Serve's median scheduling delay <= 2 s."""


def slo_keys() -> list[str]:
    """Every numeric summary key in ms (`metric_registry.ms_keys`)."""
    return list(ms_keys())


def parse_capacity_slos(items: list[str] | None,
                        sched_delay_ms: float | None = DEFAULT_SCHED_DELAY_MS) -> dict[str, float]:
    """`["p99_itl_ms=100", "p99_ttft_ms:2000"]` -> {key: bound_ms}; adds the median
    scheduling-delay bound unless given (a value of `off` drops it). No items at all ->
    `DEFAULT_SLOS`. The spelling is `--goodput`'s (`metric_registry.parse_bounds`), over
    every summary key in ms."""
    if not items:
        return dict(DEFAULT_SLOS)
    valid = slo_keys()
    slos, off = parse_bounds(
        items, "--slo", tuple(valid),
        f"KEY=MS with KEY a summary key in ms, one of: {', '.join(valid)} (e.g. --slo "
        "p99_itl_ms=100 --slo p99_ttft_ms=2000)", off=True)
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

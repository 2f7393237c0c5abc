"""Honest wall-clock timing of one step: warm up, synchronize, repeat, keep the spread.

Warm-up runs absorb one-off costs (allocator growth, kernel selection, cold caches) that a
serving loop pays once, not per step. On CUDA every run is bracketed by synchronize so the
clock measures the kernels, not the launch queue. Repeats stop early (never below
`min_repeats`) once `budget_s` of timed work is spent: a 10-second point needs no 10
repeats to have a stable median. Fast points repeat more, until `min_timed_s`. The
`repeats` column records what was actually run.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Summary of the timed repeats of one step, seconds."""

    median_s: float
    """Median wall time."""
    p10_s: float
    """10th percentile (linear interpolation between repeats)."""
    p90_s: float
    """90th percentile."""
    mean_s: float
    """Mean wall time."""
    repeats: int
    """Timed repeats behind the figures (warm-up excluded)."""

    @classmethod
    def of(cls, samples_s: list[float]) -> Timing:
        """Summarise raw samples (at least one)."""
        if not samples_s:
            raise ValueError("Timing.of needs at least one sample")
        arr = np.asarray(samples_s, dtype=np.float64)
        p10, p50, p90 = np.percentile(arr, [10, 50, 90])
        return cls(median_s=float(p50), p10_s=float(p10), p90_s=float(p90),
                   mean_s=float(arr.mean()), repeats=len(samples_s))


def measure(fn: Callable[[], object], warmup: int, repeats: int,
            sync: Callable[[], None] = lambda: None, min_repeats: int = 3,
            budget_s: float | None = None, min_timed_s: float = 0.0,
            max_repeats: int | None = None,
            clock: Callable[[], float] = time.perf_counter,
            between: Callable[[], object] | None = None) -> Timing:
    """Time `fn()`: `warmup` untimed runs, then `repeats` timed ones, except that a slow
    step stops once the timed runs exceed `budget_s` (never below `min(min_repeats,
    repeats)`), and a fast one keeps going until `min_timed_s` of timed work (up to
    `max_repeats`, default 10 x `repeats`): a 1-ms step timed 5 times has a median that one
    burst of interference can move; timed 100 times it does not. `clock` reads seconds
    (default wall time; `time.thread_time` times a one-thread CPU run by the work it did,
    whatever else the machine runs). `between`, when given, runs before every run (warm-up
    and timed), outside the clock and synchronized: what else a step would have done since
    the timed work last ran (`profiler.components` reads the rest of the model's bytes
    there, so a layer's weights come cold as in a whole forward pass)."""
    if warmup < 0 or repeats < 1:
        raise ValueError(f"warmup={warmup}, repeats={repeats}; need warmup >= 0 and "
                         f"repeats >= 1 (--warmup / --repeats)")
    cap = max(repeats, max_repeats if max_repeats is not None else 10 * repeats)
    for _ in range(warmup):
        if between is not None:
            between()
        fn()
    sync()
    floor = min(min_repeats, repeats)
    samples: list[float] = []
    total_s = 0.0
    # a collector pause inside a 1-ms sample is noise, not step time: none during (disabled),
    # and the young generations collected before; a full collection scans every object of
    # torch's heap, which would cost more than the point itself (the collector runs the old
    # generation on its own between points)
    gc_was_enabled = gc.isenabled()
    gc.collect(1)
    gc.disable()
    try:
        while len(samples) < cap:
            if between is not None:
                between()
                sync()
            start = clock()
            fn()
            sync()
            samples.append(clock() - start)
            total_s += samples[-1]
            if len(samples) >= repeats and total_s >= min_timed_s:
                break
            if budget_s is not None and len(samples) >= floor and total_s >= budget_s:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return Timing.of(samples)

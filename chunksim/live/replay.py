"""Re-time steps in isolation, to split the step-level error into its sources.

After a live run, a sample of its steps is replayed profiler-style (the same batch on the
same pools, warm-up, repeats, median), and a sample of the profile's own grid points is
measured again. Then, per step:

    table vs live    = (table vs replay) + (replay vs live)
    table vs replay  = interpolation + how the machine's speed moved since profiling
                       (the latter seen directly as `profile_drift`: grid points re-timed)
    replay vs live   = what running in sequence costs over running the same step alone
                       (cold caches after different steps, allocator) + step variance
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from chunksim.decoder.kv import KVPool
from chunksim.decoder.step import StepBatch, prepare_step


def _median_s(fn: Callable[[], None], sync: Callable[[], None], repeats: int = 5) -> float:
    """One warm-up run, then the median of `repeats` synchronized runs. (Not
    profiler.timing.measure: that collects garbage before each point, which after a live
    run's millions of objects costs more than the step itself.)"""
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


class StepReplayer:
    """Holds what a finished live run needs to re-time its steps."""

    def __init__(self, runtime, pools: list[KVPool], batches: list[tuple[StepBatch, ...]]):
        self.runtime = runtime
        self.pools = pools
        self.batches = batches

    def _fn(self, step: int) -> Callable[[], None]:
        rt, pools = self.runtime, self.pools
        prepared = []
        for b in self.batches[step]:
            ids = torch.zeros(b.total_tokens, dtype=torch.long, device=rt.device)
            prepared.append((prepare_step(b, pools, rt.device), ids))

        def run() -> None:
            for p, ids in prepared:
                rt.model.forward_step(ids, p, pools)
        return run

    def replay(self, steps: list[int], repeats: int = 5) -> np.ndarray:
        """Median isolated forward time (s) of each listed step (KV contents are stale;
        timing does not depend on them)."""
        rt = self.runtime
        out = np.empty(len(steps))
        with torch.inference_mode():
            for i, step in enumerate(steps):
                out[i] = _median_s(self._fn(step), rt.sync, repeats)
        return out

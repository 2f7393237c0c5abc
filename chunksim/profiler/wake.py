"""What waking an idle engine costs: the first steps after the serving loop slept run
slower than the same steps back to back, and the simulator prices that in.

After a sleep of tens of ms a CPU step can take up to ~2x its back-to-back time (cores
and caches go cold; on a GPU the clocks drop; figures: docs/results/cpu.md). At light
load nearly every arrival wakes an idle engine, so TTFT and the ITL tail carry it.

The measurement: a short sequence as serving runs it after an arrival (a prefill chunk,
then four decodes) runs back to back for 0.1 s, the loop sleeps each idle time as the
live loop sleeps (`live.loop.wait_until`: sleep, then spin through the last
millisecond), and the sequence runs once more. The profile stores, per idle time, each
step's time after the sleep over its time in the round just before it (medians over
repeats; pairing each look with its own warm round cancels the machine's slow drift):
`wake_up` in the profile JSON. The ratios grow with the idle time and fall along the
sequence, towards 1 by the fourth decode.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

IDLE_S = (0.002, 0.01, 0.05, 0.2)
"""Idle times measured, seconds."""
STEPS = ((256, 0, 0, 0),) + ((0, 0, 1, 256),) * 4
"""The sequence timed after each sleep, as (chunk_len, prior_len, decode_count, kv_len)."""


def measure_wake_up(step_fns: list[Callable[[], object]], sync: Callable[[], None],
                    idle_s: tuple[float, ...] = IDLE_S, repeats: int = 9,
                    busy_s: float = 0.1) -> dict:
    """Run `step_fns` in sequence for `busy_s`, sleep each of `idle_s`, run them once
    more, and divide each step's time after the sleep by its time in the last round
    before it; `repeats` times per idle time, medians. Returns the profile's `wake_up`
    entry: `idle_s`, `ratios` (one list per idle time, one ratio per step), `warm_s` (the
    median warm times) and `repeats`."""
    from chunksim.live.loop import wait_until

    if not step_fns or repeats < 1:
        raise ValueError("measure_wake_up needs steps and repeats >= 1")

    def run_sequence() -> list[float]:
        out = []
        for fn in step_fns:
            t0 = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t0)
        return out

    run_sequence()  # warm-up: first-run costs are not what is measured here
    ratios, warm = [], []
    for idle in idle_s:
        looks = []
        for _ in range(repeats):
            # busy for a while before going idle, as a serving loop that ran out of work
            # (one short burst between sleeps would leave the machine mostly idle, and
            # its cores slower to wake than a loop's)
            end = time.perf_counter() + busy_s
            while True:
                before = run_sequence()
                if time.perf_counter() >= end:
                    break
            wait_until(time.perf_counter() + idle, time.perf_counter)
            after = run_sequence()
            # against the warm run just before the sleep, not a baseline taken minutes
            # apart: a shared machine's own speed can drift by tens of % over seconds
            looks.append(np.asarray(after) / np.asarray(before))
            warm.append(before)
        ratios.append([float(r) for r in np.median(looks, axis=0)])
    warm_s = np.median(warm, axis=0)
    return {"idle_s": list(idle_s), "ratios": ratios, "warm_s": [float(w) for w in warm_s],
            "steps": [list(s) for s in STEPS[: len(step_fns)]], "repeats": repeats}

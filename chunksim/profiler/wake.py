"""What waking an idle engine costs: the first steps after the serving loop slept run
slower than the same steps back to back, and the simulator prices that in.

Seen on this project's CPU VM: a 256-token prefill takes 3.7 ms back to back, 6.2 ms
after 20 ms asleep and 7.2 ms after 100 ms, and the decode after it ~2x its warm time
(cores and caches go cold; on a GPU the clocks drop). At light load nearly every arrival
wakes an idle engine, so TTFT and the ITL tail carry it.

The measurement: a short sequence as serving runs it after an arrival (a prefill chunk,
then decodes of that request) is timed warm, then after sleeping each idle time, as the
live loop sleeps (`live.loop.wait_until`: sleep, then spin through the last
millisecond). The profile stores, per idle time, the ratio of each step of the sequence
to its warm time (medians over repeats): `wake_up` in the profile JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

IDLE_S = (0.002, 0.01, 0.05, 0.2)
"""Idle times measured, seconds."""
STEPS = ((256, 0, 0, 0), (0, 0, 1, 256), (0, 0, 1, 256))
"""The sequence timed after each sleep, as (chunk_len, prior_len, decode_count, kv_len)."""


def measure_wake_up(step_fns: list[Callable[[], object]], sync: Callable[[], None],
                    idle_s: tuple[float, ...] = IDLE_S, repeats: int = 9,
                    warm_repeats: int = 9) -> dict:
    """Time `step_fns` in sequence warm (median of `warm_repeats` back-to-back rounds)
    and after sleeping each of `idle_s` (median of `repeats`); returns the profile's
    `wake_up` entry: `idle_s`, `ratios` (one list per idle time, one ratio per step),
    `warm_s` and `repeats`."""
    from chunksim.live.loop import wait_until

    if not step_fns or repeats < 1 or warm_repeats < 1:
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
    warm = np.median([run_sequence() for _ in range(warm_repeats)], axis=0)
    ratios = []
    for idle in idle_s:
        looks = []
        for _ in range(repeats):
            run_sequence()  # busy just before going idle, as a loop that ran out of work
            wait_until(time.perf_counter() + idle, time.perf_counter)
            looks.append(run_sequence())
        ratios.append([float(r) for r in np.median(looks, axis=0) / warm])
    return {"idle_s": list(idle_s), "ratios": ratios, "warm_s": [float(w) for w in warm],
            "steps": [list(s) for s in STEPS[: len(step_fns)]], "repeats": repeats}

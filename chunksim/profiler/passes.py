"""Extra passes over the fast points (`sim profile --passes N`): drift-robust tables.

A fast point is timed within a fraction of a second, so one burst of activity elsewhere
on the machine can move its median by tens of % (on a shared cloud core one decode step
can be bimodal for seconds at a time). Several short looks spread over minutes are
robust to that; one long look is not. Passes 2..N look at every point whose pass-1
median is under `repass_below_s` once more, each pass in its own seeded random order, and
the table keeps the median of the looks (p10/p90 likewise; means averaged; repeats summed).

With cold looks (the default) a point with a prefill is run once, timed as it comes: right
after a different point, as a serving loop runs a new prompt's chunk once after other
work (re-run at once it is faster: its caches are warm). Decode-only points get the
profiler's warm-up and repeats in every pass, as serving runs decode steps back to back
(timed cold, after an unrelated point, they read well above the same steps re-timed
alone). Measured effects: docs/results/cpu.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable

import numpy as np

from chunksim.profiler.grid import GridPoint
from chunksim.profiler.timing import Timing

Row = tuple
"""A profile row: (chunk_len, prior_len, decode_count, kv_len, median_s, p10_s, p90_s,
mean_s, repeats); floats as repr strings, as `store.row_of` writes them."""


def fast_points(first: dict[tuple, Row], points: Iterable[GridPoint],
                below_s: float) -> list[GridPoint]:
    """The points whose pass-1 median is under `below_s`, in table order (the CSV's sort:
    prior, chunk, decodes, kv), so a pass's order depends only on the seed."""
    fast = [p for p in points if float(first[p.key()][4]) < below_s]
    return sorted(fast, key=lambda p: (p.prior_len, p.chunk_len, p.decode_count, p.kv_len))


def pass_order(fast: list[GridPoint], seed: int, pass_no: int) -> list[GridPoint]:
    """Pass `pass_no`'s (2..N) order: `fast` shuffled by its own seed."""
    order = list(fast)
    random.Random(seed + pass_no - 1).shuffle(order)
    return order


def cold_look(fn: Callable[[], object], sync: Callable[[], None]) -> Timing:
    """One synchronized run timed as it comes (no warm-up): a look of one sample."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return Timing.of([time.perf_counter() - t0])


def combine(first: Row, looks: list[Row]) -> Row:
    """Pass 1's row and the later looks at the same point -> the table's row."""
    if not looks:
        return first
    a = np.asarray([[float(v) for v in r[4:9]] for r in (first, *looks)])
    med, p10, p90 = np.median(a[:, :3], axis=0)
    return (*first[:4], repr(float(med)), repr(float(p10)), repr(float(p90)),
            repr(float(a[:, 3].mean())), int(a[:, 4].sum()))

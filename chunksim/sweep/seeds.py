"""Several seeds per configuration: which seeds, and their summaries folded into
median / min / max.

One seed of a short run is an anecdote: a P99 over a few hundred requests is set by two or
three of them, and another seed can reorder the configurations. `sim compare` and
`sim capacity` therefore run every configuration (every probe rate) under several workload
seeds and report the median with the range [min–max]; rankings and verdicts use what holds
across the seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from chunksim.sweep.configs import parse_ints

DEFAULT_SEEDS = 3
"""Seeds per configuration in `sim compare` / `sim capacity` when --seeds is not given."""


def seed_list(text: str | None, base: int, default_n: int = DEFAULT_SEEDS) -> list[int]:
    """`--seeds 0,1,2` -> [0, 1, 2] (as given, deduplicated, sorted); unset -> `default_n`
    consecutive seeds from `base` (the --seed flag)."""
    if text is None:
        return list(range(base, base + default_n))
    return parse_ints(text, "--seeds", minimum=0)


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class SeedStats:
    """The same summary shape three times: per numeric key the median over the seeds, the
    minimum and the maximum (non-numeric values are the first seed's). Nested dicts (per
    request class) are folded key by key."""

    median: dict
    lo: dict
    hi: dict
    n: int
    """How many seeds were folded."""


def fold(summaries: Sequence[Mapping]) -> SeedStats:
    """Fold one configuration's per-seed summaries. NaN values are ignored (a seed that
    completed nothing of a class); a key with no finite value keeps the first seed's."""
    if not summaries:
        raise ValueError("fold: no summaries")
    med, lo, hi = _fold(summaries)
    return SeedStats(med, lo, hi, len(summaries))


def _fold(summaries: Sequence[Mapping]) -> tuple[dict, dict, dict]:
    import numpy as np

    first = summaries[0]
    med: dict = {}
    lo: dict = {}
    hi: dict = {}
    for key, v0 in first.items():
        vals = [s.get(key) for s in summaries]
        if isinstance(v0, Mapping) and all(isinstance(v, Mapping) for v in vals):
            if all(isinstance(x, Mapping) for x in v0.values()):  # by_class: {cls: summary}
                names = [c for c in v0 if all(c in v for v in vals)]
                parts = {c: _fold([v[c] for v in vals]) for c in names}
                med[key] = {c: p[0] for c, p in parts.items()}
                lo[key] = {c: p[1] for c, p in parts.items()}
                hi[key] = {c: p[2] for c, p in parts.items()}
                continue
            med[key] = lo[key] = hi[key] = v0
            continue
        nums = [float(v) for v in vals if _number(v) and math.isfinite(float(v))]
        if _number(v0) and nums:
            m = float(np.median(nums))
            # an integer count stays an integer when every seed agrees on its type
            as_int = all(isinstance(v, int) for v in vals) and m.is_integer()
            med[key] = int(m) if as_int else m
            lo[key] = int(min(nums)) if as_int else min(nums)
            hi[key] = int(max(nums)) if as_int else max(nums)
        else:
            med[key] = lo[key] = hi[key] = v0
    return med, lo, hi


def median_value(summaries: Sequence[Mapping], key: str) -> float:
    """The median over seeds of `key`, with a seed that completed nothing (or has no finite
    value) counted as +inf: it met no bound."""
    import numpy as np

    vals = []
    for s in summaries:
        v = s.get(key)
        ok = s.get("completed") and _number(v) and math.isfinite(float(v))
        vals.append(float(v) if ok else math.inf)
    return float(np.median(vals))


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two closed ranges [lo, hi] share a point."""
    return a[0] <= b[1] and b[0] <= a[1]

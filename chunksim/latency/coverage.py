"""What a profile's table covers, and how much of a run's steps left it.

A step outside the measured grid is priced by linear extrapolation from the grid's edge
(`latency.model`) and flagged in the step records. A few such steps are harmless; a run
made mostly of them answers from a straight line, not from measurements, so the run says
so, naming the axis, how far the steps went and the range the profile covers.
"""

from __future__ import annotations

import numpy as np

AXES = ("chunk_len", "prior_len", "decode_count", "kv_len")
"""The table's keys (docs/profile-format.md), in the order messages name them."""
EXTRAPOLATION_WARN_SHARE = 0.05
"""A run warns when more than this share of its steps were priced outside the grid."""


def grid_ranges(table) -> dict[str, tuple[float, float]]:
    """Each axis's measured range, (lowest, highest), as the latency model reads the
    table (its columns by name, or a DataFrame): chunk_len and decode_count over the main
    grid (prior_len 0), kv_len over its rows with decodes, prior_len from 0 to the largest
    prior measured."""
    prior = np.asarray(table["prior_len"])
    main = prior == 0
    chunk = np.asarray(table["chunk_len"])[main]
    decodes = np.asarray(table["decode_count"])[main]
    kv = np.asarray(table["kv_len"])[main][decodes > 0]
    prior = prior[prior > 0]

    def span(x) -> tuple[float, float]:
        return (float(x.min()), float(x.max())) if len(x) else (0.0, 0.0)

    return {"chunk_len": span(chunk),
            "prior_len": (0.0, float(prior.max()) if len(prior) else 0.0),
            "decode_count": span(decodes), "kv_len": span(kv)}


def profile_ranges(profile) -> dict[str, tuple[float, float]]:
    """`grid_ranges` of a profile's table, worked out once per profile object (kept in
    `Profile.derived`): every run of a grid or a capacity search reads the same ranges."""
    got = profile.derived.get("grid_ranges")
    if got is None:
        got = profile.derived["grid_ranges"] = grid_ranges(profile.columns)
    return dict(got)


def describe_ranges(ranges: dict[str, tuple[float, float]]) -> str:
    """`chunk_len 0–1,024, prior_len 0–4,096, decode_count 0–256, kv_len 1–16,384`."""
    return ", ".join(f"{axis} {lo:,.0f}–{hi:,.0f}" for axis, (lo, hi) in ranges.items())


_READS = {"chunk_len": ("prefill_tokens", "prefill_tokens"),
          "prior_len": ("prefill_tokens", "prior_tokens"),
          "decode_count": ("decodes", "decodes"),
          "kv_len": ("decodes", "decode_kv_tokens")}
"""Per axis: the step column that says whether the axis applies to a step (it does where
that column is > 0: a step with a prefill part, or with decodes) and the column of its
value."""


def beyond_grid(steps, ranges: dict[str, tuple[float, float]]) -> dict[str, tuple]:
    """Per axis: (steps above the grid, their highest value, steps below, their lowest),
    over `steps` (a frame or a dict of columns) where the axis applies to a step
    (`_READS`); foldable over parts of a run. Values compare as read (integer counts
    against the float bounds exactly), without a float copy of a column."""
    out = {}
    applies: dict[str, np.ndarray] = {}
    for axis in AXES:
        lo, hi = ranges[axis]
        gate, col = _READS[axis]
        on = applies.get(gate)
        if on is None:
            on = applies[gate] = np.asarray(steps[gate]) > 0
        x = np.asarray(steps[col])
        above, below = (x > hi) & on, (x < lo) & on
        na, nb = int(np.count_nonzero(above)), int(np.count_nonzero(below))
        out[axis] = (na, float(x[above].max()) if na else -np.inf,
                     nb, float(x[below].min()) if nb else np.inf)
    return out


def extrapolation_warnings(steps, ranges: dict[str, tuple[float, float]],
                           threshold: float = EXTRAPOLATION_WARN_SHARE) -> list[str]:
    """One warning when more than `threshold` of the steps were priced outside the grid
    (the records' `extrapolated` flag), naming each axis the steps left, how far and in
    how many steps, and the ranges the profile covers; else none. `steps` is the run's
    `records.StepTotals`, folded with these `ranges`."""
    n = len(steps)
    if n == 0:
        return []
    ext = steps.extrapolated
    share = ext / n
    if share <= threshold:
        return []
    beyond = {a: tuple(steps.beyond.get(a, (0, -np.inf, 0, np.inf))) for a in AXES}
    parts = []
    for axis in AXES:
        above, hi, below, lo = beyond[axis]
        for k, word, v in ((above, "up to", hi), (below, "down to", lo)):
            if k:
                parts.append(f"{axis} {word} {v:,.0f} in {k} "
                             f"step{'s' if k != 1 else ''}")
    where = ("; ".join(parts) if parts
             else "in grid cells the profiler pruned (filled by extrapolation)")
    return [f"{share:.0%} of steps ({ext} of {n}) were priced outside the profile's measured "
            f"grid: {where}. The profile covers {describe_ranges(ranges)}; times beyond it "
            "are linear extrapolations from its edge. Profile a grid that covers these "
            "steps (sim profile) before trusting them."]

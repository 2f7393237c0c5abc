"""A fleet's step totals are folded from its replicas' step frames (`StepTotals.merged`)
without building the merged frame: they must equal the totals of that frame
(`StepTotals.of(merge_steps(parts))`) field for field, the busy time to rounding (it is
each replica's own sum, added in replica order)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.sim.fleet.records import merge_steps
from chunksim.sim.records.records import STEP_COLUMNS, StepTotals, frame_of

RANGES = {"chunk_len": (16.0, 1024.0), "prior_len": (0.0, 2048.0),
          "decode_count": (1.0, 64.0), "kv_len": (32.0, 4096.0)}


def _part(seed: int, n: int):
    """A replica's steps: random starts (ties likely), durations and shapes."""
    rng = np.random.default_rng(seed)
    cols = {k: np.zeros(n, dtype=t) for k, t in STEP_COLUMNS.items()}
    cols["start_s"] = np.sort(rng.integers(0, 40, n) * 0.25)
    cols["duration_s"] = rng.lognormal(-3.0, 1.0, n)
    cols["prefill_tokens"] = rng.integers(0, 3000, n) * rng.integers(0, 2, n)
    cols["prior_tokens"] = rng.uniform(0, 4000, n)
    cols["decodes"] = rng.integers(0, 100, n)
    cols["decode_kv_tokens"] = rng.uniform(0, 6000, n)
    cols["kv_blocks_used"] = rng.integers(0, 5000, n)
    cols["extrapolated"] = rng.integers(0, 2, n).astype(bool)
    return frame_of(cols)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6),
       seed=st.integers(0, 10_000), ranged=st.booleans())
def test_merged_totals_are_the_merged_frames(sizes, seed, ranged):
    parts = [_part(seed + k, n) for k, n in enumerate(sizes)]
    ranges = RANGES if ranged else None
    got = StepTotals.merged(parts, ranges)
    want = StepTotals.of(merge_steps(parts), ranges)
    assert got.n == want.n == sum(sizes)
    # each part's sum in its own order, added in part order: that float exactly; the
    # merged frame's sum (in start order) to rounding
    own = 0.0
    for p in parts:
        own += StepTotals.of(p, ranges).busy_s
    assert got.busy_s == own
    assert got.busy_s == pytest.approx(want.busy_s, rel=1e-12, abs=1e-300)
    assert got.extrapolated == want.extrapolated
    assert got.peak_kv_blocks == want.peak_kv_blocks
    assert got.beyond == want.beyond


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5),
       seed=st.integers(0, 10_000), capacity=st.integers(1, 200))
def test_folded_part_totals_give_the_same_totals(sizes, seed, capacity):
    """Each part's totals folded as its StepLog recorded them (in buffers of any size)
    stand for reading its rows again: the merge gives the same totals to the bit."""
    from chunksim.sim.records.records import StepColumns, StepLog, StepRow

    parts, folded = [], []
    for k, n in enumerate(sizes):
        frame = _part(seed + k, n)
        log = StepLog(capacity=capacity, ranges=RANGES)
        for row in frame.itertuples(index=False):
            log.append(StepRow(*row))
        folded.append(log.close())
        parts.append(StepColumns(log))
    want = StepTotals.merged(parts, RANGES)
    got = StepTotals.merged(parts, RANGES, folded)
    assert (got.n, got.busy_s, got.extrapolated, got.peak_kv_blocks, got.beyond) == (
        want.n, want.busy_s, want.extrapolated, want.peak_kv_blocks, want.beyond)


def test_folded_totals_that_do_not_match_are_not_used():
    """Totals over other ranges, or of other rows, are ignored: the rows are read."""
    parts = [_part(1, 50), _part(2, 80)]
    want = StepTotals.merged(parts, RANGES)
    wrong_rows = [StepTotals.of(_part(3, 51), RANGES), StepTotals.of(parts[1], RANGES)]
    other_ranges = [StepTotals.of(p, None) for p in parts]
    for folded in (wrong_rows, other_ranges, wrong_rows[:1]):
        got = StepTotals.merged(parts, RANGES, folded)
        assert (got.extrapolated, got.peak_kv_blocks, got.beyond) == (
            want.extrapolated, want.peak_kv_blocks, want.beyond)


def _beyond_by_definition(frame, ranges):
    """`coverage.beyond_grid` spelled out: each axis's values as floats, NaN where the
    axis does not apply (no prefill part / no decodes), compared with the bounds."""
    prefill = frame["prefill_tokens"].to_numpy(dtype=float)
    decodes = frame["decodes"].to_numpy(dtype=float)
    values = {
        "chunk_len": np.where(prefill > 0, prefill, np.nan),
        "prior_len": np.where(prefill > 0, frame["prior_tokens"].to_numpy(float), np.nan),
        "decode_count": np.where(decodes > 0, decodes, np.nan),
        "kv_len": np.where(decodes > 0, frame["decode_kv_tokens"].to_numpy(float), np.nan),
    }
    out = {}
    for axis, x in values.items():
        lo, hi = ranges[axis]
        with np.errstate(invalid="ignore"):
            above, below = x > hi, x < lo
        out[axis] = (int(above.sum()), float(np.nanmax(x[above])) if above.any() else -np.inf,
                     int(below.sum()), float(np.nanmin(x[below])) if below.any() else np.inf)
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 400), seed=st.integers(0, 10_000),
       lo=st.sampled_from([0.0, 1.0, 16.0, 40.5]), span=st.floats(0.0, 5000.0))
def test_beyond_grid_counts_each_axis_where_it_applies(n, seed, lo, span):
    """Above / below counts and extremes per axis, read straight from the columns, are
    those of the definition (float values, NaN where an axis does not apply)."""
    from chunksim.latency.coverage import beyond_grid

    frame = _part(seed, n)
    ranges = {axis: (lo, lo + span) for axis in RANGES}
    assert beyond_grid(frame, ranges) == _beyond_by_definition(frame, ranges)
    cols = {k: frame[k].to_numpy() for k in frame.columns}
    assert beyond_grid(cols, ranges) == _beyond_by_definition(frame, ranges)

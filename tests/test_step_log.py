"""The step log: single rows and bulk decode runs, whatever the buffer size, the thinning
and the interleaving, give the rows a plain row-by-row log holds."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.sim.records.records import STEP_COLUMNS, StepLog, StepRow

_ROW = st.tuples(st.floats(0, 1e4), st.floats(1e-6, 1.0), st.integers(0, 9000),
                 st.integers(0, 8), st.floats(0, 1e4), st.integers(0, 64),
                 st.floats(0, 1e4), st.integers(0, 64), st.integers(0, 10**5),
                 st.integers(0, 64), st.integers(0, 64), st.integers(0, 4), st.booleans())
_RUN = st.tuples(st.integers(1, 40), st.integers(1, 64), st.booleans(), st.integers(0, 2**31))


@settings(max_examples=60, deadline=None)
@given(capacity=st.sampled_from([1, 7, 64, 1000]), keep=st.integers(0, 3),
       events=st.lists(st.one_of(_ROW, _RUN), max_size=40))
def test_runs_and_rows_land_as_a_row_by_row_log(capacity, keep, events):
    log = StepLog(capacity=capacity, keep=keep)
    want: list[tuple] = []
    for ev in events:
        if len(ev) == len(STEP_COLUMNS):
            log.append(StepRow(*ev))
            want.append(tuple(ev))
            continue
        k, n, scalar_flag, seed = ev
        rng = np.random.default_rng(seed)
        start = np.cumsum(rng.uniform(1e-3, 1.0, k))
        dur = rng.uniform(1e-3, 1.0, k)
        kv = rng.uniform(1, 5000, k)
        blocks = rng.integers(0, 10**5, k)
        flags = rng.random(k) < 0.5
        ext = bool(flags[0]) if scalar_flag else flags
        log.extend_decodes(start, dur, n, kv, blocks, ext)
        for j in range(k):
            want.append((start[j], dur[j], 0, 0, 0.0, n, kv[j], n, int(blocks[j]), n, 0, 0,
                         bool(flags[0]) if scalar_flag else bool(flags[j])))
    got = log.frame()
    ref = pd.DataFrame(want, columns=list(STEP_COLUMNS)) if want else None
    every = range(len(want))[::keep] if keep else []
    assert len(got) == len(every)
    if ref is not None and len(every):
        ref = ref.iloc[list(every)].reset_index(drop=True).astype(
            {c: got[c].dtype for c in got.columns})
        pd.testing.assert_frame_equal(got.reset_index(drop=True), ref, check_exact=True)
    assert log.totals.n == len(want)


@settings(max_examples=30, deadline=None)
@given(capacity=st.sampled_from([1, 7, 64, 1000]), keep=st.integers(1, 3),
       parts=st.lists(st.lists(st.one_of(_ROW, _RUN), max_size=12), min_size=1, max_size=4))
def test_columns_read_as_the_frame_and_merge_alike(capacity, keep, parts):
    """`StepColumns` gives each column of the kept rows as the frame holds it, and the
    totals merged from columns equal those merged from frames."""
    from chunksim.sim.records.records import StepColumns, StepTotals

    logs = []
    for events in parts:
        log = StepLog(capacity=capacity, keep=keep)
        for ev in events:
            if len(ev) == len(STEP_COLUMNS):
                log.append(StepRow(*ev))
            else:
                k, n, _, seed = ev
                rng = np.random.default_rng(seed)
                log.extend_decodes(np.cumsum(rng.uniform(1e-3, 1.0, k)),
                                   rng.uniform(1e-3, 1.0, k), n, rng.uniform(1, 5000, k),
                                   rng.integers(0, 10**5, k), rng.random(k) < 0.5)
        logs.append(log)
    frames = [log.frame() for log in logs]
    cols = [StepColumns(log) for log in logs]
    for f, c in zip(frames, cols, strict=True):
        assert len(c) == len(f)
        for name in STEP_COLUMNS:
            assert np.array_equal(c[name], f[name].to_numpy())
            assert c[name].dtype == f[name].to_numpy().dtype
    a, b = StepTotals.merged(frames), StepTotals.merged(cols)
    assert (a.n, a.busy_s, a.extrapolated, a.peak_kv_blocks) == (
        b.n, b.busy_s, b.extrapolated, b.peak_kv_blocks)

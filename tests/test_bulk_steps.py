"""The steps a bulk stretch is made of (`sim.engine.fast_forward`), each alone: how many of the
next steps' KV fits (`fit_kv`) and where an arrival or a reader cuts a segment
(`cut_at`)."""

from __future__ import annotations

import numpy as np
from factories import kv_cache, request_spec, running_request
from hypothesis import given
from hypothesis import strategies as st

from chunksim.sim.engine.fast_forward import DecodeStretch, cut_at, fit_kv


def _stretch(contexts: list[int], block_size: int = 4) -> DecodeStretch:
    kv = kv_cache(10_000, block_size)
    reqs = [running_request(kv, request_spec(i, c, 1000), computed=c, outputs=1)
            for i, c in enumerate(contexts)]
    return DecodeStretch(reqs, block_size, [0] * len(reqs))


@given(st.lists(st.integers(1, 60), min_size=1, max_size=6), st.integers(1, 30),
       st.integers(0, 40), st.booleans(), st.booleans())
def test_fit_kv_runs_the_steps_whose_blocks_fit(contexts, k, free, first, vetted):
    grown = _stretch(contexts).growth(k)
    assert len(grown) == k and np.all(np.diff(grown) >= 0)
    got = fit_kv(grown, free, first, vetted)
    fits = int(np.sum(grown <= free))  # (cumulative: a prefix of the steps)
    if fits:
        assert got == fits
    elif first and vetted:
        assert got == 1  # the policy planned that step: it runs (its blocks are its own)
    elif first:
        assert got is None  # the policy must plan it
    else:
        assert got == 0


def test_an_arrival_lets_the_steps_that_start_before_it_run():
    times = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert cut_at(times, 4, None, None) == 4
    assert cut_at(times, 4, 2.5, None) == 3  # steps starting at 0, 1, 2 see it not
    assert cut_at(times, 4, 2.0, None) == 2  # a step sees the arrivals up to its start
    assert cut_at(times, 4, 0.0, None) == 1  # at least one runs (it was planned)
    assert cut_at(times, 4, 9.0, None) == 4


def test_a_read_keeps_the_steps_that_end_before_it():
    times = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert cut_at(times, 4, None, 2.5) == 2
    assert cut_at(times, 4, None, 2.0) == 1  # one ending at the read: SimPy's order
    assert cut_at(times, 4, None, 0.5) == 0  # none: the stretch steps instead
    assert cut_at(times, 4, 1.5, 3.5) == 2  # the arrival cuts first


def test_a_live_reader_ends_the_segment_before_a_tie():
    times = np.array([0.0, 1.0, 2.0, 3.0])
    seen = []

    def tie(ends):
        seen.append(ends.tolist())
        return 1
    assert cut_at(times, 3, None, None, tie) == 1 and seen == [[1.0, 2.0, 3.0]]
    assert cut_at(times, 3, None, 5.0, tie) == 3 and len(seen) == 1  # a read: no tie asked

"""The jitter stream alone (`pricing.Noise`): a step's draw is addressed by its index, so
the bulk path's ranges must equal the draws the stepped path reads one at a time, across
block edges, and asking for a range must not depend on what was asked before."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from chunksim.sim.engine import pricing
from chunksim.sim.engine.pricing import Noise

BLOCK = pricing._NOISE_BLOCK


@given(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 3 * BLOCK), st.integers(0, BLOCK + 7)),
                                   min_size=1, max_size=8))
def test_ranges_equal_the_stepped_draws(seed, asks):
    noise, stepped = Noise(seed), Noise(seed)
    for i, k in asks:
        got = noise.range(i, k)
        assert got.shape == (k,)
        assert np.array_equal(got, np.array([stepped.at(j) for j in range(i, i + k)]))


def test_a_range_across_a_block_edge_joins_both_blocks():
    noise = Noise(7)
    got = noise.range(BLOCK - 3, 6)
    whole = np.random.default_rng(7).standard_normal(2 * BLOCK)
    assert np.array_equal(got, whole[BLOCK - 3 : BLOCK + 3])

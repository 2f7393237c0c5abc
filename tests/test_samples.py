"""`quantiles.Samples`: one type for a run's token gaps, exact or streamed, read alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.sim.records.quantiles import REL_ERROR, LogHistogram, Samples

gaps = st.lists(st.floats(1e-4, 10.0), min_size=1, max_size=200)


@settings(max_examples=50, deadline=None)
@given(gaps, gaps)
def test_exact_and_streamed_samples_read_alike(a, b):
    ex = Samples(np.array(a))
    h = LogHistogram()
    h.add(np.array(a))
    st_ = Samples(hist=h)
    assert ex.exact and not st_.exact and len(ex) == len(st_) == len(a)
    ps = [50, 90, 99]
    assert np.array_equal(ex.percentile(ps), np.percentile(a, ps))
    assert np.allclose(st_.percentile(ps), ex.percentile(ps), rtol=2 * REL_ERROR)
    assert ex.max == st_.max == max(a)
    # pooled: joined while exact, one histogram as soon as a part is streamed
    both = Samples.pool([ex, Samples(np.array(b))])
    assert both.exact and np.array_equal(np.asarray(both), np.concatenate([a, b]))
    mixed = Samples.pool([st_, Samples(np.array(b))])
    assert not mixed.exact and len(mixed) == len(a) + len(b)
    assert mixed.max == max(a + b)


def test_a_streamed_run_refuses_to_read_as_values_and_empty_is_zero():
    h = LogHistogram()
    h.add(np.array([0.01, 0.02]))
    with pytest.raises(ValueError, match="histogram"):
        np.asarray(Samples(hist=h))
    assert Samples(np.zeros(0)).max == 0.0 and len(Samples.pool([])) == 0
    with pytest.raises(ValueError, match="not both"):
        Samples(np.zeros(1), hist=h)
    with pytest.raises(ValueError, match="not both"):
        Samples()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(0.0, 5.0, allow_nan=False), min_size=0, max_size=300),
       repeat=st.integers(1, 4))
def test_a_runs_latency_figures_are_numpys_on_the_sorted_values(values, repeat):
    """The summary's figures of a latency (`metrics._stats`, which scales and partitions
    one sorted copy in place) are numpy's own on the sorted values in ms, bit for bit;
    the samples themselves are left as they were."""
    from chunksim.sim.metrics.metrics import PERCENTILES, _stats

    v = np.array(values * repeat)
    kept = v.copy()
    got = _stats("itl", Samples(v))
    ms = np.sort(v) * 1000.0 if len(v) else np.zeros(1)
    want = {"mean_itl_ms": float(np.mean(ms)), "median_itl_ms": float(np.median(ms)),
            "std_itl_ms": float(np.std(ms))}
    want.update({f"p{p}_itl_ms": float(x)
                 for p, x in zip(PERCENTILES, np.percentile(ms, PERCENTILES), strict=True)})
    assert got == want
    assert np.array_equal(v, kept)

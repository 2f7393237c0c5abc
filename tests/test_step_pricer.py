"""The one place a step's seconds are composed (`sim.engine.pricing.StepPricer`), alone: its
composition of the forward passes with the drafter, the host overhead, async overlap and
the wake-up ratio on a latency model whose figures are known, and its vector path for
decode-all runs, which must give each step exactly what pricing it alone gives."""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_component_profile, make_profile
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.core.shape import StepShape
from chunksim.latency.composed import ComponentModel
from chunksim.latency.model import LatencyModel
from chunksim.sim.engine.pricing import Noise, StepPricer


class _Fixed:
    """A latency model whose forward pass is 1 ms per prefill token plus 2 ms per decode,
    the overhead 0.5 ms + 0.1 ms per request, and waking multiplies by 1 + idle / (k + 1)
    on the first two steps."""

    prices_spread = False
    wake_steps = 2

    def step_s(self, bs, z=None):
        return 1e-3 * bs.prefill_tokens + 2e-3 * bs.decode_count, bs.decode_count > 100

    def overhead(self, requests: int) -> float:
        return 5e-4 + 1e-4 * requests

    def wake_ratio(self, idle_s: float, k: int) -> float:
        return 1.0 + idle_s / (k + 1) if k < self.wake_steps else 1.0


class _Drafter:
    def draft_s(self, shape, drafting: int) -> float:
        return 1e-5 * drafting


def _shape(prefill=0, decodes=0, two_pass=False, kv=100.0):
    return StepShape(prefill, 1 if prefill else 0, 0.0, decodes, kv, two_pass, (), int(kv))


def test_a_step_is_its_passes_plus_drafts_plus_overhead():
    p = StepPricer(_Fixed(), drafter=_Drafter())
    dur, out = p.step(_shape(prefill=10, decodes=3, two_pass=True), 0, requests=4,
                      drafting=3)
    # two passes (10 ms + 6 ms), drafts (0.03 ms), overhead (0.5 + 0.4 ms)
    assert dur == pytest.approx(0.010 + 0.006 + 3e-5 + 9e-4, rel=1e-12)
    assert out is False and p.last_s == dur
    dur1, _ = p.step(_shape(prefill=10, decodes=3), 1, requests=4)
    assert dur1 == pytest.approx(0.016 + 9e-4, rel=1e-12)  # one pass, same sum here


def test_async_scheduling_hides_the_overhead_behind_the_forward_pass():
    p = StepPricer(_Fixed(), async_scheduling=True)
    assert p.step(_shape(decodes=3), 0, requests=3)[0] == 0.006  # forward > overhead
    assert p.step(_shape(decodes=0, prefill=0), 1, requests=40)[0] == pytest.approx(4.5e-3)


def test_the_first_steps_after_an_idle_wait_wake_up():
    p = StepPricer(_Fixed(), wake_steps=2)
    assert not p.waking
    warm = p.step(_shape(decodes=1), 0, requests=1)[0]
    p.woke(0.5)
    assert p.waking
    first = p.step(_shape(decodes=1), 1, requests=1)[0]
    second = p.step(_shape(decodes=1), 2, requests=1)[0]
    third = p.step(_shape(decodes=1), 3, requests=1)[0]
    assert first == warm * 1.5 and second == warm * 1.25 and third == warm
    assert not p.waking


def test_a_decode_run_wakes_up_only_through_the_steps_that_ran():
    p = StepPricer(_Fixed(), wake_steps=2)

    class _Vector(_Fixed):
        def decode_steps_s(self, n, kv, z, *sp, stepwise=False):
            return np.full(len(kv), 2e-3 * n), np.zeros(len(kv), dtype=bool)

    p.latency = _Vector()
    p.woke(1.0)
    dur, _ = p.decodes(2, np.array([10.0, 11.0, 12.0]), 10, 0)
    warm = 4e-3 + 7e-4
    assert dur.tolist() == [warm * 2.0, warm * 1.5, warm]
    assert p.waking  # priced, not run
    p.ran(1)
    assert p.since_wake == 1
    p.ran(5)
    assert p.since_wake == 2 and not p.waking


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 64), ctx=st.integers(1, 3000), spread=st.integers(0, 2000),
       k=st.integers(1, 40), jitter=st.booleans(), woken=st.integers(0, 3),
       idle=st.floats(0.0, 0.2))
def test_a_decode_run_prices_each_step_as_stepping_it(tmp_path_factory, n, ctx, spread, k,
                                                      jitter, woken, idle):
    """`decodes` (the bulk path) and `step` (one at a time) agree bit for bit, on a
    component profile (which prices the longest context) and a whole-step one, with
    jitter and through a wake-up."""
    root = tmp_path_factory.getbasetemp()
    comp = root / "pricer_comp"
    if not comp.exists():
        comp.mkdir()
        make_component_profile(comp, spread=1.3)
    whole = root / "pricer_whole"
    if not whole.exists():
        whole.mkdir()
        make_profile(whole, spread=1.5, provenance={
            "wake_up": {"idle_s": [0.01, 0.1], "ratios": [[1.5, 1.2], [2.0, 1.4]]}})
    from chunksim.latency.profile import load_profile

    models = [ComponentModel(load_profile(str(comp / "comp.csv"))),
              LatencyModel(load_profile(str(whole / "test.csv")))]
    for lat in models:
        def pricer(lat=lat):
            p = StepPricer(lat, Noise(7) if jitter else None, wake_steps=lat.wake_steps)
            p.woke(idle)
            p.since_wake = min(woken, lat.wake_steps)
            return p

        bulk = pricer()
        total = n * ctx
        kv_mean = np.arange(total, total + k * n, n, dtype=np.int64) / n
        longest = ctx + spread
        dur, out = bulk.decodes(n, kv_mean, longest, 5)
        one = pricer()
        for j in range(k):
            shape = StepShape(0, 0, 0.0, n, float(kv_mean[j]), False, (),
                              longest + j if lat.prices_spread else 0)
            t, o = one.step(shape, 5 + j, n)
            assert t == dur[j] and o == out[j], (lat, j)

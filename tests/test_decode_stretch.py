"""The bulk decode stretch's bookkeeping alone (`fast_forward.DecodeStretch`) on
hand-built requests, the composed model's vector path against each step priced alone
(`step_s`) anywhere on and off the grid, and the engine starting a stretch without
asking the policy."""

from __future__ import annotations

import numpy as np
import pytest
from factories import (
    constant_time,
    decoding_request,
    kv_cache,
    make_component_profile,
    make_profile,
    request_spec,
    workload,
)
from hypothesis import given
from hypothesis import strategies as st

from chunksim.core.shape import BatchShape
from chunksim.latency.select import latency_model
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.engine.fast_forward import DecodeStretch
from chunksim.sim.run import RunConfig, simulate

BS = 16


def _batch(prompts_outputs_done, bs: int = BS):
    """Decoding requests (prompt, output tokens, outputs already sampled), batch order."""
    kv = kv_cache(4096 * 16 // bs + 64, bs)
    reqs = [decoding_request(kv, request_spec(i, p, o), outputs=d)
            for i, (p, o, d) in enumerate(prompts_outputs_done)]
    return kv, reqs


@given(st.lists(st.tuples(st.integers(1, 300), st.integers(2, 60), st.integers(1, 59)),
                min_size=1, max_size=12),
       st.lists(st.integers(1, 40), min_size=1, max_size=6),
       st.lists(st.lists(st.tuples(st.integers(1, 300), st.integers(2, 60)), max_size=3),
                max_size=6),
       st.sampled_from([1, 3, 16, 128]))
def test_a_stretch_tracks_what_stepping_each_request_would(rows, advances, joins, BS):
    """... and so after requests join it between advances (`DecodeStretch.insert`, each
    one decoding, with the blocks its context fills), at any block size (segments longer
    and shorter than a block)."""
    rows = [(p, o, min(d, o - 1)) for p, o, d in rows]
    kv, reqs = _batch(rows, BS)
    computed = [0] * (len(reqs) + 20)
    s = DecodeStretch(list(reqs), BS, computed)
    # by hand: each running request's context and tokens left, in batch order
    ctx = {r.request_id: r.num_computed_tokens for r in reqs}
    left = {r.request_id: r.spec.output_tokens - r.num_output_tokens for r in reqs}
    start = dict(ctx)
    running = list(reqs)
    for a in advances:
        if not running:
            break
        assert s.n == len(running)
        assert s.steps_left() == min(left[r.request_id] for r in running)
        assert s.longest() == max(ctx[r.request_id] for r in running)
        assert s.ctx_sum == sum(ctx[r.request_id] for r in running)
        k = min(a, s.steps_left())
        assert s.opening() == sum(ctx[r.request_id] % BS == 0 for r in running)
        # the blocks the batch grows by in each of the next k steps, by hand
        grown = s.growth(k)
        for j in range(1, k + 1):
            assert grown[j - 1] == sum(
                max(-(-(ctx[r.request_id] + j) // BS) - -(-ctx[r.request_id] // BS), 0)
                for r in running)
        s.advance(k, end=float(k))
        for r in running:
            ctx[r.request_id] += k
            left[r.request_id] -= k
        m = s.finishing()
        done = [r for r in running if left[r.request_id] <= 0]
        assert m == len(done)
        s.settle(s.first + m)
        for r in done:  # written back: counters, blocks, computed-token counts
            assert r.num_computed_tokens == ctx[r.request_id]
            assert r.num_output_tokens == r.spec.output_tokens
            assert r.num_blocks == -(-ctx[r.request_id] // BS)
            assert computed[r.request_id] == ctx[r.request_id] - start[r.request_id]
        running = [r for r in running if left[r.request_id] > 0]
        s.drop(m, running)
        for p, o in (joins.pop(0) if joins else ()):
            new = decoding_request(kv, request_spec(len(reqs), p, o), outputs=1)
            reqs.append(new)
            running.append(new)
            ctx[new.request_id] = start[new.request_id] = new.num_computed_tokens
            left[new.request_id] = o - 1
            s.insert(new, new.num_computed_tokens)
    s.settle()
    for r in reqs:
        assert r.num_computed_tokens == ctx[r.request_id]
        assert computed[r.request_id] == ctx[r.request_id] - start[r.request_id]


def test_drop_refuses_a_running_list_that_does_not_match():
    _, reqs = _batch([(10, 5, 1), (10, 9, 1)])
    s = DecodeStretch(list(reqs), BS, np.zeros(2, dtype=np.int64))
    s.advance(4, 1.0)
    assert s.finishing() == 1
    with pytest.raises(RuntimeError, match="not those retired"):
        s.drop(1, list(reqs))


@pytest.fixture(scope="module")
def comp(tmp_path_factory):
    return latency_model(make_component_profile(tmp_path_factory.mktemp("c"), spread=1.4))


@given(st.integers(1, 300),
       st.lists(st.tuples(st.floats(0.5, 40000.0), st.floats(1.0, 6.0)), min_size=1,
                max_size=40))
def test_the_vector_path_prices_each_point_as_one_step_alone(comp, n, points):
    # anywhere: inside the grid, below its near end, beyond its far end, on either axis
    kv = np.array([p[0] for p in points])
    kv_max = kv * np.array([p[1] for p in points])
    vec, flags = comp.decode_steps_s(n, kv, None, kv_max)
    for i in range(len(kv)):  # each point alone, as one step (`step_s`)
        t, out = comp.step_s(BatchShape(0, 0.0, n, float(kv[i]), (), float(kv_max[i])))
        assert t == vec[i]
        assert out == bool(flags[i])


@given(st.integers(1, 300), st.floats(1.0, 40000.0), st.floats(0.0, 30000.0),
       st.integers(1, 400), st.integers(0, 3))
def test_a_stretchs_steps_price_as_each_step_alone(comp, n, start, extra, k, seed):
    """Stretches as the engine prices them (every context one token longer a step): most
    lie in one cell of the attention grid (read once), some span cells or leave the grid;
    with and without jitter, each step's time is that step's alone (`step_s`), bit for
    bit."""
    steps = np.arange(k, dtype=np.float64)
    kv, kv_max = start + steps, start + extra + steps
    z = np.random.default_rng(seed).standard_normal(k) if seed else None
    vec, flags = comp.decode_steps_s(n, kv, z, kv_max)
    fast, fast_flags = comp.decode_steps_s(n, kv, z, kv_max, stepwise=True)
    assert np.array_equal(fast, vec) and np.array_equal(fast_flags, flags)
    for i in range(k):  # each step alone (`step_s`)
        t, out = comp.step_s(BatchShape(0, 0.0, n, float(kv[i]), (), float(kv_max[i])),
                             None if z is None else float(z[i]))
        assert t == vec[i]
        assert out == bool(flags[i])


def _falling_decode(count: float, kv: float, spread: float) -> float:
    """Decode attention that falls along both keys in their last cells, so a step beyond
    the grid is held at its edge (never extrapolated below it)."""
    kv_eff = kv if kv <= 4096 else 4096 - 0.1 * (kv - 4096)
    return 2e-6 + 1e-7 * count + 1e-9 * count * kv_eff * (1.0 - 0.3 * (spread - 1.0))


@pytest.fixture(scope="module")
def falling(tmp_path_factory):
    """A component profile with `_falling_decode` and a spread (sigma) that differs from
    cell to cell, so where a clamped point is read shows in its jitter."""
    from factories import component_rows

    rows = component_rows(decode=_falling_decode)
    for r in rows:
        if r["component"] == "decode_attn":
            ratio = 1.2 + r["kv_len"] / 16384 + r["kv_max"] / r["kv_len"] / 10
            r["p10_s"], r["p90_s"] = r["median_s"] / ratio**0.5, r["median_s"] * ratio**0.5
    return latency_model(make_component_profile(tmp_path_factory.mktemp("f"), rows=rows))


@pytest.mark.parametrize("region", ["spreads beyond", "contexts beyond", "both beyond",
                                    "inside"])
@pytest.mark.parametrize("jitter", [False, True])
def test_stretches_off_the_grid_on_one_axis_price_as_each_step_alone(falling, region,
                                                                      jitter):
    """A stretch whose every step leaves the grid the same way (the one-cell shortcuts of
    the clamped lookup) prices each step as pricing it alone does, bit for bit, read as a
    stretch or as any points."""
    comp = falling
    kv_axis, spread_axis = comp.kvax.values, comp.rax.values
    k = 60
    steps = np.arange(k, dtype=np.float64)
    start = {"spreads beyond": (kv_axis[1] + kv_axis[2]) / 2, "inside": kv_axis[1] + 3.0,
             "contexts beyond": kv_axis[-1] * 2.0, "both beyond": kv_axis[-1] * 2.0}[region]
    far_spread = spread_axis[-1] * 1.5 if region in ("spreads beyond", "both beyond") else 1.2
    kv = start + steps
    kv_max = np.floor(start * far_spread) + steps
    z = np.random.default_rng(7).standard_normal(k) if jitter else None
    for stepwise in (True, False):
        vec, flags = comp.decode_steps_s(24, kv, z, kv_max, stepwise=stepwise)
        for i in range(k):  # each step alone (`step_s`)
            t, out = comp.step_s(BatchShape(0, 0.0, 24, float(kv[i]), (), float(kv_max[i])),
                                 None if z is None else float(z[i]))
            assert t == vec[i]
            assert out == bool(flags[i])


@given(n=st.integers(1, 1024), mean=st.integers(1, 10**6), extra=st.integers(0, 10**6),
       k=st.integers(1, 500), frac=st.integers(0, 1023))
def test_a_stretchs_extent_from_its_ends_encloses_every_step(n, mean, extra, k, frac):
    """The extent read from a stretch's first and last step (`_stepwise_extent`) holds
    every step's mean context and spread, as the engine computes them (a sum of contexts
    over n, the longest over the mean), however large the contexts and the batch."""
    from chunksim.latency.composed import _stepwise_extent

    ctx_sum = mean * n + frac % n  # any mean a batch of n integer contexts can have
    longest = -(-ctx_sum // n) + extra  # at least the mean
    j = np.arange(k, dtype=np.int64)
    kv = np.arange(ctx_sum, ctx_sum + k * n, n, dtype=np.int64) / n
    spread = np.maximum((j + float(longest)) / kv, 1.0)
    x0, x1, y0, y1 = _stepwise_extent(kv, spread, flat=False)
    assert x0 == kv.min() and x1 == kv.max()
    assert y0 <= spread.min() and spread.max() <= y1
    assert y0 >= 1.0 and y1 <= spread.max() * (1 + 1e-11)  # (a margin, not a guess)


def _run(profile, reqs, **engine):
    return simulate(workload(reqs), profile,
                    RunConfig(policy="budget", chunk=512, prefix_caching=False,
                              engine=EngineConfig(**engine)))


def test_after_a_step_everyone_sampled_in_the_stretch_starts_unasked(tmp_path, monkeypatch):
    from chunksim.policies.budget import TokenBudgetPolicy

    plans = []
    plan = TokenBudgetPolicy.plan

    def counting(self, state):
        plans.append(len(state.running))
        return plan(self, state)

    monkeypatch.setattr(TokenBudgetPolicy, "plan", counting)
    prof = make_profile(tmp_path, constant_time(0.010))
    res, _ = _run(prof, [(0.0, 100, 40), (0.0, 120, 30)])
    # one plan: both prompts in one step; the 39 decode-all steps after it ask nobody
    assert plans == [0]
    assert len(res.steps) == 40
    plans.clear()
    slow, _ = _run(prof, [(0.0, 100, 40), (0.0, 120, 30)], fast_forward=False)
    assert len(plans) == 40
    assert slow.steps["duration_s"].tolist() == res.steps["duration_s"].tolist()


def test_when_the_first_decode_does_not_fit_the_policy_is_asked(tmp_path):
    # 6 blocks of 16 (kv_blocks=7: one is vLLM's null block): two 48-token prompts fill 3
    # blocks each; their first decodes need a fourth each, so the policy must preempt one:
    # the bulk path may not start unasked
    prof = make_profile(tmp_path, constant_time(0.010))
    reqs = [(0.0, 48, 20), (0.0, 48, 20)]
    cfg = dict(policy="budget", chunk=512, prefix_caching=False, kv_blocks=7)
    fast, _ = simulate(workload(reqs), prof, RunConfig(**cfg))
    slow, _ = simulate(workload(reqs), prof,
                       RunConfig(**cfg, engine=EngineConfig(fast_forward=False)))
    assert fast.requests["preemptions"].sum() >= 1
    assert fast.requests.equals(slow.requests)
    assert fast.steps.equals(slow.steps)

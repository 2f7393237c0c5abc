"""The decode rule has one definition, `core.request.is_decode`; the simulator's hot loops
inline it, and each inlined copy is bound to it here: `EngineCore.begin_step` and
`take_slots` price entries by it and `BulkDecoder.steady` decides bulk stretches by it
(every step of random runs over every policy, with speculative decoding, prefix caching,
fleets and P/D, checks that these copies say what the definition says), and the budget
and chunk policies split their running requests by it (their plans on random request
counters show which side of the rule each request fell on)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import POLICIES, build, config

from chunksim.core.request import is_decode
from chunksim.core.speculative import SpecConfig
from chunksim.sim.engine.core import EngineCore
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.engine.fast_forward import BulkDecoder
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.run import simulate


def _watch(mp: pytest.MonkeyPatch) -> dict:
    seen = {"steps": 0, "decode_rows": 0, "steady": 0}
    begin, steady = EngineCore.begin_step, BulkDecoder.steady

    def begin_step(self, plan, start_s):
        admitted = set(map(id, plan.admitted))
        rows = [(n, is_decode(r, id(r) in admitted)) for r, n in plan.scheduled]
        shape = begin(self, plan, start_s)
        assert shape.decodes == sum(n for n, d in rows if d)
        assert shape.prefill_tokens == sum(n for n, d in rows if not d)
        seen["steps"] += 1
        seen["decode_rows"] += shape.decodes
        return shape

    def _steady(self, plan):
        c = self.core
        want = (not plan.admitted and not plan.preempted and not c.waiting
                and not (c.offload is not None and c.offload.loads)
                and len(plan.scheduled) == len(c.running) > 0
                and all(r is run and n == 1 and is_decode(r)
                        for (r, n), run in zip(plan.scheduled, c.running, strict=True)))
        got = steady(self, plan)
        assert got == want
        seen["steady"] += got
        return got

    mp.setattr(EngineCore, "begin_step", begin_step)
    mp.setattr(BulkDecoder, "steady", _steady)
    return seen


SPEC = SpecConfig(speculative_method="ngram", num_speculative_tokens=2,
                  spec_acceptance_rate=0.6)

RANDOM_RUNS = dict(
    reqs=st.lists(st.tuples(st.floats(0, 0.1), st.integers(1, 2000), st.integers(1, 40)),
                  min_size=1, max_size=20),
    pol=st.sampled_from(POLICIES), kv_blocks=st.integers(30, 300), spec=st.booleans(),
    layout=st.sampled_from([None, FleetConfig(replicas=2), FleetConfig(pd="1:1")]))
"""Random runs of every policy, with speculative decoding (where a policy takes it), two
replicas or P/D: the strategies of the tests that watch every step of such runs."""


def random_run_config(pol, kv_blocks, spec, layout):
    """The RunConfig of one of `RANDOM_RUNS`' runs."""
    cfg = config(*pol[:2], 256, 4, kv_blocks, priority=pol[2])
    if spec and pol[0] in ("budget", "sjf"):
        cfg = cfg.__class__(**{**cfg.__dict__, "engine": EngineConfig(speculative=SPEC)})
    if layout is not None:
        cfg = cfg.__class__(**{**cfg.__dict__, "fleet": layout})
    return cfg


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefixed=st.booleans(), **RANDOM_RUNS)
@pytest.mark.slow
def test_every_inlined_copy_of_the_decode_rule_agrees(linear_profile, reqs, pol, kv_blocks,
                                                      prefixed, spec, layout):
    cfg = random_run_config(pol, kv_blocks, spec, layout)
    with pytest.MonkeyPatch.context() as mp:
        seen = _watch(mp)
        _, summary = simulate(build(reqs, prefixed, priorities=pol[2]), linear_profile, cfg)
    assert seen["steps"] > 0 or not summary["completed"]


def test_the_rule_on_hand_built_requests():
    from chunksim.core.request import Request
    from chunksim.core.spec import RequestSpec

    r = Request(RequestSpec(0, 0.0, 10, 5))
    assert not is_decode(r)  # nothing computed
    r.num_computed_tokens = 9
    assert not is_decode(r)  # the prompt's 1-token tail: its step samples the first token
    r.num_computed_tokens, r.num_output_tokens = 10, 1
    assert is_decode(r) and not is_decode(r, admitted_now=True)
    r.kv_carried = True
    assert is_decode(r, admitted_now=True)  # P/D: arrives with the prompt's KV
    r.num_computed_tokens, r.num_output_tokens = 9, 0
    assert is_decode(r, admitted_now=True)  # ... all but the last token's: a decode row
    assert not is_decode(r)  # once running, the rule for running requests applies
    r.num_preemptions = 1
    assert not is_decode(r, admitted_now=True)  # preempted: recomputes as a prompt
    r.num_computed_tokens = 4  # a recompute in progress is prompt work, even one token
    assert not is_decode(r)


def _request(rid: int, prompt: int, outputs: int, computed: int):
    """A running request with these counters, holding the blocks its context fills."""
    from chunksim.core.request import Request
    from chunksim.core.spec import RequestSpec

    r = Request(RequestSpec(rid, 0.0, prompt, outputs + 5))
    r.num_computed_tokens, r.num_output_tokens = computed, outputs
    r.num_blocks = -(-computed // 16)
    return r


COUNTERS = st.tuples(st.integers(1, 300), st.integers(0, 40), st.integers(0, 340)).filter(
    lambda t: t[2] <= t[0] + t[1] - 1 and (t[1] == 0 or t[2] >= 0))
"""A running request's (prompt, outputs, computed): anything short of its last token, a
decode, a prompt mid-prefill or its 1-token tail, a recompute after preemption."""


@settings(max_examples=300, deadline=None)
@given(counters=COUNTERS)
def test_the_budget_policy_splits_running_requests_by_the_rule(counters):
    """`TokenBudgetPolicy.plan` inlines the rule to split its running requests: a prompt
    counts against --max-num-partial-prefills, a decode does not. With the cap at one,
    a prompt queued behind the request runs exactly when the request is a decode."""
    from factories import kv_cache

    from chunksim.core.plan import SchedulerState
    from chunksim.policies import TokenBudgetPolicy

    r = _request(0, *counters)
    behind = _request(1, 500, 0, 100)  # a prompt mid-prefill
    pol = TokenBudgetPolicy(max_num_batched_tokens=100_000, max_num_partial_prefills=1)
    plan = pol.plan(SchedulerState([r, behind], [], kv_cache(10_000), False))
    assert any(q is behind for q, _ in plan.scheduled) == is_decode(r)
    assert plan.scheduled[0] == (r, 1 if is_decode(r) else r.num_remaining)


@settings(max_examples=300, deadline=None)
@given(counters=COUNTERS)
def test_the_chunk_policy_splits_running_requests_by_the_rule(counters):
    """`FixedChunkPolicy._plan` inlines the rule too: on a prefill-only turn of
    `alternate` a decode sits out, a prompt (or a recompute) runs its chunk."""
    from factories import kv_cache

    from chunksim.core.plan import SchedulerState
    from chunksim.policies import FixedChunkPolicy

    r = _request(0, *counters)
    behind = _request(1, 500, 0, 100)
    pol = FixedChunkPolicy(chunk=1000, variant="alternate")
    plan = pol.plan(SchedulerState([r, behind], [], kv_cache(10_000), False))
    assert any(q is r for q, _ in plan.scheduled) == (not is_decode(r))
    assert any(q is behind for q, _ in plan.scheduled)

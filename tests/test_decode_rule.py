"""The decode rule has one definition, `core.request.is_decode`; the simulator's hot loops
inline it (`EngineCore.begin_step` prices entries by it, `BulkDecoder.steady` decides
bulk stretches by it). Every step of random runs over every policy, with speculative
decoding, prefix caching, fleets and P/D, checks that each of these copies says what the
definition says. (The budget and chunk policies' splits of their running requests are
further copies; their plans are checked by the policy tests, not here.)"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import POLICIES, build, config

from chunksim.core.request import is_decode
from chunksim.core.speculative import SpecConfig
from chunksim.sim.core import EngineCore
from chunksim.sim.engine import EngineConfig
from chunksim.sim.fast_forward import BulkDecoder
from chunksim.sim.fleet_config import FleetConfig
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

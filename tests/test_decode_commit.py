"""The invariant the decode fast paths rest on (`EngineCore.begin_step`'s leading loop and
the budget policy's plain decodes skip the prefix cache's `commit` and the ledger): when a
running request decodes, every shareable block of its prompt is registered already, so
committing it would register nothing. Checked at every step of random runs that share
prefixes, preempt, chunk prompts, speculate and carry KV (P/D), under every policy."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decode_rule import SPEC
from test_properties import POLICIES, build, config

from chunksim.core.kv_cache import PrefixKVCache
from chunksim.core.request import is_decode
from chunksim.sim.core import EngineCore
from chunksim.sim.engine import EngineConfig
from chunksim.sim.fleet_config import FleetConfig
from chunksim.sim.run import simulate


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.floats(0, 0.1), st.integers(1, 2000), st.integers(1, 40)),
                     min_size=1, max_size=20),
       pol=st.sampled_from(POLICIES), kv_blocks=st.integers(30, 300), spec=st.booleans(),
       layout=st.sampled_from([None, FleetConfig(pd="1:1"), FleetConfig(replicas=2)]))
@pytest.mark.slow
def test_a_running_decode_has_its_prompt_blocks_registered(linear_profile, reqs, pol,
                                                            kv_blocks, spec, layout):
    cfg = config(*pol[:2], 256, 4, kv_blocks, priority=pol[2])
    if spec and pol[0] in ("budget", "sjf"):
        cfg = cfg.__class__(**{**cfg.__dict__, "engine": EngineConfig(speculative=SPEC)})
    if layout is not None:
        cfg = cfg.__class__(**{**cfg.__dict__, "fleet": layout})
    begin = EngineCore.begin_step

    def checked(self, plan, start_s):
        kv = self.kv
        if isinstance(kv, PrefixKVCache):
            for req, _ in plan.scheduled:
                if req not in plan.admitted and is_decode(req):
                    held = len(kv.keys.get(req.request_id, ()))
                    assert held >= len(kv.shareable_keys(req)), (
                        f"request {req.request_id} decodes with {held} of its "
                        f"{len(kv.shareable_keys(req))} prompt blocks registered")
        return begin(self, plan, start_s)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineCore, "begin_step", checked)
        simulate(build(reqs, prefixed=True, priorities=pol[2]), linear_profile, cfg)


def test_the_check_sees_decodes(linear_profile):
    """The property above is not vacuous: a prefixed run decodes through the check."""
    reqs = [(0.01 * i, 300 + 40 * i, 20) for i in range(8)]
    cfg = config("budget", None, 256, 4, 300)
    seen = []
    begin = EngineCore.begin_step

    def counting(self, plan, start_s):
        seen.extend(r for r, _ in plan.scheduled
                    if r not in plan.admitted and is_decode(r) and r.block_keys)
        return begin(self, plan, start_s)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineCore, "begin_step", counting)
        simulate(build(reqs, prefixed=True), linear_profile,
                 cfg.__class__(**{**cfg.__dict__, "engine": EngineConfig(fast_forward=False)}))
    assert len(seen) > 20

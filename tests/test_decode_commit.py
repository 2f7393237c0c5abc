"""The invariant the decode fast paths rest on (`EngineCore.begin_step`'s leading loop, and
the budget and chunk policies' plain decodes, skip the prefix cache's `commit` and the
ledger): when a
running request decodes, every shareable block of its prompt is registered already, so
committing it would register nothing. Checked at every step of random runs that share
prefixes, preempt, chunk prompts, speculate and carry KV (P/D), under every policy."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from test_decode_rule import RANDOM_RUNS, random_run_config
from test_properties import build, config

from chunksim.core.kv_cache import PrefixKVCache
from chunksim.core.request import is_decode
from chunksim.sim.engine.core import EngineCore
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import simulate


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RANDOM_RUNS)
@pytest.mark.slow
def test_a_running_decode_has_its_prompt_blocks_registered(linear_profile, reqs, pol,
                                                            kv_blocks, spec, layout):
    cfg = random_run_config(pol, kv_blocks, spec, layout)
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

"""`EngineCore.retire` told which requests finished (a step's end and a bulk segment know
them) finds them by identity; over random runs of every policy, with prefix caching,
speculative decoding, fleets and P/D, what it retires, and in which order, is what
scanning every running request gives. And alone, on hand-built requests: running order,
whatever order it was told."""

from __future__ import annotations

import pytest
from factories import kv_cache, request_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decode_rule import RANDOM_RUNS, random_run_config
from test_properties import build

from chunksim.core.request import Request
from chunksim.sim.engine.core import EngineCore
from chunksim.sim.run import simulate


def _scan(running):
    return [r for r in running if r.num_output_tokens >= r.spec.output_tokens]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefixed=st.booleans(), **RANDOM_RUNS)
@pytest.mark.slow
def test_retiring_the_told_requests_is_the_scan(linear_profile, reqs, pol, kv_blocks,
                                                prefixed, spec, layout):
    cfg = random_run_config(pol, kv_blocks, spec, layout)
    seen = {"calls": 0}
    retire = EngineCore.retire

    def checked(self, end_s, finished, defer_free=False):
        want = _scan(self.running)
        seen["calls"] += 1
        assert sorted(map(id, finished)) == sorted(map(id, want))
        kept = [r for r in self.running if r.num_output_tokens < r.spec.output_tokens]
        records = []
        on_retire = self.on_retire
        self.on_retire = lambda req, t: (records.append(req),
                                         on_retire is not None and on_retire(req, t))
        try:
            retire(self, end_s, finished, defer_free)
        finally:
            self.on_retire = on_retire
        assert [id(r) for r in records] == [id(r) for r in want]
        assert [id(r) for r in self.running] == [id(r) for r in kept]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EngineCore, "retire", checked)
        _, summary = simulate(build(reqs, prefixed, priorities=pol[2]), linear_profile, cfg)
    assert seen["calls"] > 0 or not summary["completed"]


def test_the_told_requests_leave_in_running_order():
    kv = kv_cache(4096, 16)
    core = EngineCore.__new__(EngineCore)
    reqs = [Request(request_spec(i, 10, 3)) for i in range(6)]
    for r in reqs[1::2]:
        r.num_output_tokens = 3  # 1, 3 and 5 have all their tokens
        r.num_computed_tokens = 12  # all but the last sampled token
    core.running = list(reqs)
    core.work_in = 6 * (10 + 3 - 1)  # the work the six came with
    core.running_computed = 3 * 12
    core.kv, core.finishing, core.on_retire = kv, [], None
    order = []
    core._record = lambda req, end_s: order.append(req.request_id)
    core.gaps = type("G", (), {"maybe_pack": lambda self: None})()
    EngineCore.retire(core, 1.0, [reqs[5], reqs[1], reqs[3]], defer_free=True)
    assert order == [1, 3, 5]
    assert [r.request_id for r in core.running] == [0, 2, 4]
    assert [r.request_id for r in core.finishing] == [1, 3, 5]
    # what the three left came with, and nothing computed: the work the core still holds
    assert (core.work_in, core.running_computed) == (3 * 12, 0)

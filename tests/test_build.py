"""Engine assembly (`sim.build`) and what the engine and fleet ask of a policy and a
router: the length a policy refuses, the seat cap, which routers read mid-stretch."""

from __future__ import annotations

import pytest

from chunksim.core.spec import RequestSpec, Workload
from chunksim.policies import POLICIES, make_policy
from chunksim.sim.build import RunConfig, build_engine, engine_parts
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.fleet.fleet import Fleet
from chunksim.sim.fleet.routers import ROUTERS, Router, make_router
from chunksim.sim.run import simulate


def _w(n: int = 3) -> Workload:
    return Workload("w", tuple(RequestSpec(i, 0.01 * i, 100, 5, conversation_id=f"c{i}")
                               for i in range(n)))


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_states_its_seat_cap_and_length_limit(name):
    p = make_policy(name, {"max_num_seqs": 7})
    assert p.max_num_seqs == 7
    assert p.max_model_len_error(10**9) is None  # chunked prefill (the default) takes any


@pytest.mark.parametrize("name", ["budget", "sjf"])
def test_budget_without_chunking_refuses_a_length_over_its_budget(name):
    p = make_policy(name, {"enable_chunked_prefill": False}, chunk=512)
    assert p.max_model_len_error(512) is None
    why = p.max_model_len_error(513)
    assert "--max-model-len 513" in why and "--max-num-batched-tokens 512" in why
    assert make_policy(name, {}, chunk=512).max_model_len_error(10**6) is None


def test_every_engine_of_a_fleet_is_refused_as_a_lone_one_is(linear_profile):
    cfg = RunConfig(policy="budget", chunk=512, kv_blocks=400,
                    knobs={"enable_chunked_prefill": False},
                    engine=EngineConfig(max_model_len=4096))
    parts = engine_parts(_w(), linear_profile, cfg)
    with pytest.raises(ValueError, match="--max-model-len 4096 exceeds"):
        build_engine(_w(), cfg, parts)
    for fleet in (FleetConfig(replicas=2), FleetConfig(pd="1:1")):
        with pytest.raises(ValueError, match="--max-model-len 4096 exceeds"):
            simulate(_w(), linear_profile, RunConfig(**{**cfg.__dict__, "fleet": fleet}))


def test_the_length_cap_defaults_to_the_profiles_and_the_user_value_wins(linear_profile):
    cfg = RunConfig(policy="budget", chunk=512, kv_blocks=400)
    parts = engine_parts(_w(), linear_profile, cfg)
    assert parts.engine.max_model_len == linear_profile.max_position
    given = RunConfig(policy="budget", chunk=512, kv_blocks=400,
                      engine=EngineConfig(max_model_len=300))
    assert engine_parts(_w(), linear_profile, given).engine.max_model_len == 300


class _Peeker(Router):
    """A router that reads replica state and never said it may read mid-stretch."""

    name = "peeker"
    reads_state = True

    def pick(self, spec, views):
        return self._argmin([v.outstanding_requests() for v in views])


def test_a_state_reading_router_ends_stretches_before_reads_unless_it_opts_in(
        linear_profile):
    cfg = RunConfig(policy="budget", chunk=512, kv_blocks=400)
    parts = engine_parts(_w(), linear_profile, cfg)

    def fleet(router):
        return Fleet(_w(), [build_engine(_w(), cfg, parts) for _ in range(2)], router)

    assert not fleet(_Peeker(2)).live
    for name, cls in ROUTERS.items():
        assert not cls.reads_mid_stretch or cls.reads_state, name
        assert fleet(make_router(name, 2)).live == (cls.reads_state and cls.reads_mid_stretch)
    assert {n for n, c in ROUTERS.items() if c.reads_mid_stretch} == {
        "least-requests", "least-tokens"}

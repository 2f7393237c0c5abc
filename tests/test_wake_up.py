"""Waking an idle engine: the profile's measured wake-up ratios, priced by the engine on
the first steps after each idle wait, by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import constant_time, make_profile, workload

from chunksim.latency.model import LatencyModel
from chunksim.policies import POLICIES
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate

WAKE = {"idle_s": [0.01, 0.1], "ratios": [[1.5, 1.2], [2.0, 1.4]]}


@pytest.fixture(scope="module")
def wake_profile(tmp_path_factory):
    """Every step 10 ms warm; after idling, the profile's wake-up ratios apply."""
    return make_profile(tmp_path_factory.mktemp("wake"), constant_time(0.010), name="wake",
                        provenance={"wake_up": WAKE})


def _run(profile, reqs, wake_up=True, fast_forward=True, policy="budget"):
    cfg = RunConfig(policy=policy, chunk=None if policy == "whole" else 512, prefix_caching=False,
                    engine=EngineConfig(wake_up=wake_up, fast_forward=fast_forward))
    return simulate(workload(reqs), profile, cfg)


def test_wake_ratio_interpolates_from_one_and_stays_flat_beyond(wake_profile):
    lat = LatencyModel(wake_profile)
    assert lat.wake_steps == 2
    assert lat.wake_ratio(0.0, 0) == 1.0 and lat.wake_ratio(0.005, 0) == pytest.approx(1.25)
    assert lat.wake_ratio(0.01, 1) == pytest.approx(1.2)
    assert lat.wake_ratio(0.055, 0) == pytest.approx(1.75)
    assert lat.wake_ratio(5.0, 0) == 2.0 and lat.wake_ratio(5.0, 1) == 1.4
    assert lat.wake_ratio(5.0, 2) == 1.0  # beyond the measured steps: warm


def test_a_ratio_below_one_is_not_a_faster_cold_engine(tmp_path):
    p = make_profile(tmp_path, constant_time(0.010),
                     provenance={"wake_up": {"idle_s": [0.01], "ratios": [[0.8]]}})
    assert LatencyModel(p).wake_ratio(0.01, 0) == 1.0


def test_first_steps_after_idle_pay_the_wake_up_by_hand(wake_profile):
    # A: arrives at 0 into a fresh engine (no idle time), 2 steps of 10 ms, done at 20 ms.
    # B: arrives 55 ms later: x1.75 on its prefill, x1.3 on its first decode, then warm.
    result, _ = _run(wake_profile, [(0.0, 100, 2), (0.075, 100, 4)])
    r = result.requests.set_index("request_id")
    assert r.loc[0, "first_token_s"] == pytest.approx(0.010)
    assert r.loc[0, "finish_s"] == pytest.approx(0.020)
    assert r.loc[1, "first_token_s"] - 0.075 == pytest.approx(0.0175)
    assert r.loc[1, "finish_s"] - 0.075 == pytest.approx(0.0175 + 0.013 + 0.010 + 0.010)
    off, _ = _run(wake_profile, [(0.0, 100, 2), (0.075, 100, 4)], wake_up=False)
    assert off.requests.set_index("request_id").loc[1, "finish_s"] == pytest.approx(0.115)


def test_the_host_overhead_wakes_up_with_the_step(tmp_path):
    # 10 ms forward + 2 ms overhead a step; B arrives 55 ms after A finished (at 24 ms)
    prof = make_profile(tmp_path, constant_time(0.010), name="wake_ovh",
                        provenance={"wake_up": WAKE, "step_overhead_s": 0.002})
    result, _ = _run(prof, [(0.0, 100, 2), (0.079, 100, 3)])
    r = result.requests.set_index("request_id")
    assert r.loc[0, "finish_s"] == pytest.approx(0.024)
    assert r.loc[1, "first_token_s"] - 0.079 == pytest.approx(0.012 * 1.75)
    assert r.loc[1, "finish_s"] - 0.079 == pytest.approx(0.012 * (1.75 + 1.3 + 1))


def test_an_arrival_into_a_busy_engine_pays_nothing(wake_profile):
    # B arrives while A decodes: the engine never idles between them
    result, _ = _run(wake_profile, [(0.0, 100, 6), (0.015, 100, 2)])
    steps = result.steps["duration_s"].to_numpy()
    assert np.allclose(steps, 0.010)


LONG_WAKE = {"idle_s": [0.01, 0.1], "ratios": [[1.5, 1.3, 1.2, 1.1], [2.0, 1.6, 1.4, 1.2]]}


@pytest.fixture(scope="module")
def long_wake_profile(tmp_path_factory):
    """As `wake_profile`, with four steps of wake-up: three of them decodes."""
    return make_profile(tmp_path_factory.mktemp("long_wake"), constant_time(0.010),
                        name="long_wake", provenance={"wake_up": LONG_WAKE})


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "vllm"])  # (vLLM's: no
# bulk decode to compare; tests/test_vllm_policy.py)
@pytest.mark.parametrize("profile", ["wake_profile", "long_wake_profile"])
def test_fast_forward_changes_nothing_with_wake_up(request, profile, policy):
    prof = request.getfixturevalue(profile)
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(0.08, 40))
    reqs = [(float(a), int(rng.integers(8, 600)), int(rng.integers(1, 40))) for a in arrivals]
    a, sa = _run(prof, reqs, policy=policy)
    b, sb = _run(prof, reqs, policy=policy, fast_forward=False)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    np.testing.assert_array_equal(np.sort(np.asarray(a.itl_s)), np.sort(np.asarray(b.itl_s)))
    assert sa["p99_itl_ms"] == sb["p99_itl_ms"]
    assert (a.steps["duration_s"] > 0.0101).any()  # some steps did pay a wake-up


def test_the_decodes_of_a_wake_up_run_in_bulk(long_wake_profile, monkeypatch):
    # only the prefills are stepped: after B's, its three wake-up decodes and the warm
    # ones run as one bulk stretch, each wake-up step priced with its ratio
    from chunksim.sim.engine.engine import Engine

    stepped = []
    step = Engine._step

    def counting(self, env, plan, start):
        stepped.append(start)
        return (yield from step(self, env, plan, start))

    monkeypatch.setattr(Engine, "_step", counting)
    result, _ = _run(long_wake_profile, [(0.0, 100, 2), (0.075, 100, 30)])
    assert stepped == [0.0, 0.075]
    # B's first four decodes; it came 55 ms after A finished: halfway between the rows
    d = result.steps["duration_s"].to_numpy()[3:7]
    assert d[:3] == pytest.approx(0.010 * np.array([1.45, 1.3, 1.15]))
    assert d[3] == pytest.approx(0.010)


def test_ratios_are_scaled_from_the_warm_times_to_the_tables_figures(tmp_path):
    # measured: after 10 ms idle a prefill took 1.5x its warm 8 ms = 12 ms, the decode 1.2x
    # its warm 10 ms; the table says 10 ms for both: so 1.2x and 1.2x the table, and a
    # step the table already prices above its after-idle time pays nothing extra
    p = make_profile(tmp_path, constant_time(0.010), provenance={"wake_up": {
        "idle_s": [0.01], "ratios": [[1.5, 1.2, 1.1]], "warm_s": [0.008, 0.010, 0.005],
        "steps": [[256, 0, 0, 0], [0, 0, 1, 256], [0, 0, 1, 256]]}})
    lat = LatencyModel(p)
    assert lat.wake_ratio(0.01, 0) == pytest.approx(1.2)
    assert lat.wake_ratio(0.01, 1) == pytest.approx(1.2)
    assert lat.wake_ratio(0.01, 2) == 1.0  # 1.1 x 5 ms < the table's 10 ms
    assert lat.wake_ratio(0.005, 0) == pytest.approx(1.1)  # halfway from 1 at no idle

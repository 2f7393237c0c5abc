"""Closed-form checks of the engine: a lone request by hand, and a textbook queue."""

import numpy as np
import pytest
from factories import linear_time, workload

from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess
from chunksim.workloads.lengths import Constant
from chunksim.workloads.synthetic import SyntheticConfig, generate

POLICIES = [("budget", None), ("chunk", "mixed"), ("chunk", "two-pass"),
            ("chunk", "alternate"), ("whole", "prefill-first"), ("whole", "mixed")]


def lone(profile, policy, variant, chunk, prompt, output, **kw):
    w = workload([(0.25, prompt, output)])
    cfg = RunConfig(policy=policy, chunk=None if policy == "whole" else chunk,
                    knobs=dict(variant=variant), **kw)
    return simulate(w, profile, cfg)


@pytest.mark.parametrize("policy,variant", POLICIES)
@pytest.mark.parametrize("prompt,output", [(1, 1), (1000, 1), (1000, 5), (1537, 3), (4097, 2)])
def test_lone_request_step_count_and_times_by_hand(const_profile, policy, variant, prompt,
                                                   output):
    chunk = 512
    res, s = lone(const_profile, policy, variant, chunk, prompt, output)
    prefill_steps = 1 if policy == "whole" else -(-prompt // chunk)
    steps = prefill_steps + output - 1
    assert s["steps"] == steps
    r = res.requests.iloc[0]
    assert r.first_token_s - r.arrival_s == pytest.approx(prefill_steps * 0.010)
    assert r.finish_s - r.arrival_s == pytest.approx(steps * 0.010)
    assert s["mean_ttft_ms"] == pytest.approx(prefill_steps * 10.0)
    assert s["mean_e2el_ms"] == pytest.approx(steps * 10.0)
    assert r.computed_tokens == prompt + output - 1


def test_lone_request_times_from_a_linear_table_by_hand(linear_profile):
    # budget 512, prompt 1000, output 3: chunk 512 @ prior 0, chunk 488 @ prior 512
    # (emits token 1), then decodes at contexts 1000 and 1001.
    res, s = lone(linear_profile, "budget", None, 512, 1000, 3)
    t1 = linear_time(512, 0, 0, 0)
    t2 = linear_time(488, 512, 0, 0)
    t3 = linear_time(0, 0, 1, 1000)
    t4 = linear_time(0, 0, 1, 1001)
    assert s["steps"] == 4
    assert res.steps["duration_s"].tolist() == pytest.approx([t1, t2, t3, t4], rel=1e-12)
    assert s["mean_ttft_ms"] == pytest.approx((t1 + t2) * 1000)
    assert s["mean_e2el_ms"] == pytest.approx((t1 + t2 + t3 + t4) * 1000)
    assert s["mean_tpot_ms"] == pytest.approx((t3 + t4) / 2 * 1000)
    assert sorted(res.itl_s) == pytest.approx(sorted([t3, t4]))


def test_two_pass_costs_both_passes(linear_profile):
    # a decode rides along the second request's prefill: two passes pay the fixed cost twice
    w = workload([(0.0, 100, 4), (0.0001, 800, 1)])
    cfg = dict(policy="chunk", chunk=2048, knobs=dict(variant="two-pass"))
    res, _ = simulate(w, linear_profile, RunConfig(**cfg))
    mixed = res.steps[(res.steps.prefill_tokens > 0) & (res.steps.decodes > 0)]
    assert len(mixed) == 1
    assert mixed.duration_s.iloc[0] == pytest.approx(
        linear_time(800, 0, 0, 0) + linear_time(0, 0, 1, 100))


def test_step_overhead_adds_to_every_step(const_profile):
    _, base = lone(const_profile, "budget", None, 512, 1000, 5)
    _, over = lone(const_profile, "budget", None, 512, 1000, 5, step_overhead_s=0.002)
    assert over["mean_e2el_ms"] == pytest.approx(base["mean_e2el_ms"] + 2.0 * base["steps"])


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_queue_mean_wait_matches_pollaczek_khinchine(const_profile, rho):
    """One seat, one step per request, constant 10 ms steps, Poisson arrivals: an M/D/1
    queue, whose mean wait is rho * S / (2 (1 - rho))."""
    service_s = 0.010
    waits = []
    for seed in range(4):
        w = generate(SyntheticConfig(
            arrivals=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=rho / service_s),
            prompt=Constant(64), output=Constant(1), num_requests=5000, seed=seed))
        cfg = RunConfig(policy="whole", knobs=dict(max_num_seqs=1),
                        engine=EngineConfig(seed=seed))
        res, s = simulate(w, const_profile, cfg)
        waits.append(s["mean_sched_delay_ms"] / 1000)
        assert s["mean_ttft_ms"] == pytest.approx(s["mean_sched_delay_ms"] + 10.0)
    expected = rho * service_s / (2 * (1 - rho))
    # 20k customers: the batch-means standard error is a few percent of the mean
    assert np.mean(waits) == pytest.approx(expected, rel=0.12)


def test_rejects_what_can_never_run_instead_of_hanging(const_profile):
    w = workload([(0.0, 100, 10), (0.1, 20000, 10), (0.2, 100, 10)])
    cfg = RunConfig(policy="whole", knobs=dict(max_num_batched_tokens=4096))
    res, s = simulate(w, const_profile, cfg)
    assert s["completed"] == 2 and s["rejected"] == 1
    assert "token cap 4096" in res.requests.reject_reason.iloc[1]
    res, s = simulate(w, const_profile, RunConfig(kv_blocks=100))  # 100 x 16 = 1600 tokens
    assert s["rejected"] == 1 and "raise --kv-blocks" in res.requests.reject_reason.iloc[1]


def test_preemption_is_recompute_lifo_and_every_request_finishes(const_profile):
    # 3 requests whose decodes outgrow a tiny cache: someone must be preempted
    w = workload([(0.0, 60, 40), (0.0, 60, 40), (0.0, 60, 40)])
    res, s = simulate(w, const_profile, RunConfig(kv_blocks=14, block_size=16,
                                                  prefix_caching=False))
    assert s["completed"] == 3 and s["preemptions"] > 0
    r = res.requests
    assert (r.computed_tokens == r.prompt_tokens + r.output_tokens - 1 + r.recomputed_tokens).all()
    assert (r.cached_tokens == 0).all()
    # the most recently admitted request is the victim: the first one is never preempted
    assert r.preemptions.iloc[0] == 0 and r.preemptions.iloc[2] > 0
    assert res.steps.kv_blocks_used.max() <= 14


def test_profiled_overhead_is_base_plus_per_request(tmp_path):
    from factories import constant_time, make_profile

    prof = make_profile(tmp_path, constant_time(0.010), provenance={
        "step_overhead": {"median_s": 0.002, "base_s": 0.001, "per_request_s": 0.0005}})
    w = workload([(0.0, 100, 30), (0.0, 100, 30), (0.0, 100, 40)])
    res, _ = simulate(w, prof, RunConfig(chunk=4096))
    steps = res.steps
    n = (steps.decodes + steps.prefill_requests).to_numpy()
    assert steps.duration_s.to_numpy() == pytest.approx(0.010 + 0.001 + 0.0005 * n)
    slow, _ = simulate(w, prof, RunConfig(chunk=4096,
                                          engine=EngineConfig(fast_forward=False)))
    assert slow.steps.duration_s.tolist() == steps.duration_s.tolist()
    flat, _ = simulate(w, prof, RunConfig(chunk=4096, step_overhead_s=0.0))
    assert flat.steps.duration_s.tolist() == pytest.approx([0.010] * len(flat.steps))

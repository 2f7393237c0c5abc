"""`validate.scenarios.medium_rate`: "medium load" as a share of the simulated capacity."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.slos import DEFAULT_SCHED_DELAY_MS, SCHED_DELAY_KEY
from chunksim.validate.scenarios import medium_rate
from chunksim.workloads.options import WorkloadOptions, build_workload

FIXED = WorkloadOptions(prompt_mean=200, prompt_std=0, prompt_min=200, prompt_max=200,
                        output_mean=56, output_std=0, output_min=56, output_max=56,
                        duration_s=5.0, seed=0)
BUDGET = RunConfig(policy="budget", chunk=512, prefix_caching=False)


def _median_delay_ms(profile, rate: float) -> float:
    _, s = simulate(build_workload(replace(FIXED, rate=rate)), profile, BUDGET)
    return s[SCHED_DELAY_KEY]


@pytest.mark.slow
def test_medium_rate_is_a_share_of_the_capacity_edge(const_profile):
    # 10-ms steps of at most 512 tokens serve at most 51200 / (200 + 55) = 201 req/s for
    # good; a finite run tolerates some overload before its median delay passes 2 s.
    rate, capacity = medium_rate(const_profile, FIXED, BUDGET, share=0.5)
    bound = 51200 / (200 + 55)
    assert bound <= capacity <= 2 * bound
    assert rate == round(0.5 * capacity, 2)
    assert _median_delay_ms(const_profile, capacity) <= DEFAULT_SCHED_DELAY_MS
    assert _median_delay_ms(const_profile, capacity * 1.06) > DEFAULT_SCHED_DELAY_MS  # tol 5 %


def test_medium_rate_refuses_a_bad_share(const_profile):
    with pytest.raises(ValueError, match="fraction of capacity"):
        medium_rate(const_profile, FIXED, BUDGET, share=1.5)

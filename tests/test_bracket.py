"""Where a capacity search starts without --rate (`sweep.bracket`): on the lattice a
1 req/s start walks, above the capacity, and ending on the same answer."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from chunksim.latency.profile import load_profile
from chunksim.sim.run import RunConfig
from chunksim.sweep.bracket import mean_lengths, on_lattice, service_rate
from chunksim.sweep.capacity import (
    SearchParams,
    capacity_search,
    probe_workload,
    search_params,
)
from chunksim.sweep.configs import make_configs, parse_policies
from chunksim.sweep.runner import Runner
from chunksim.sweep.slos import parse_capacity_slos
from chunksim.workloads import WorkloadOptions, build_workload

SHORT = WorkloadOptions(num_requests=240, prompt_mean=512, output_mean=64)


@pytest.fixture(scope="module")
def profile():
    return load_profile(None)


def test_the_start_is_the_service_rate_rounded_down_to_a_power_of_two(profile):
    run = RunConfig()
    wl = build_workload(probe_workload(SHORT, 1.0, 0, SearchParams()))
    mu = service_rate(wl, profile, run)
    start = on_lattice(mu, 1e-3, 1024.0)
    assert start <= mu < 2 * start
    assert math.log2(start) == int(math.log2(start))  # on 1 req/s's lattice
    assert on_lattice(mu, 1e-3, start / 4) == start / 4  # within the caps
    assert on_lattice(float("nan"), 1e-3, 8.0) == 1.0  # no rate at all: 1 req/s


def test_the_service_rate_falls_as_requests_grow_and_seats_shrink(profile):
    run = RunConfig()
    base = build_workload(probe_workload(SHORT, 1.0, 0, SearchParams()))
    longer = build_workload(probe_workload(replace(SHORT, prompt_mean=2048, output_mean=256),
                                           1.0, 0, SearchParams()))
    assert mean_lengths(longer)[0] > mean_lengths(base)[0]
    assert service_rate(longer, profile, run) < service_rate(base, profile, run)
    few = replace(run, knobs={"max_num_seqs": 4})
    assert service_rate(base, profile, few) < service_rate(base, profile, run)


def test_a_given_rate_is_the_start_and_a_profile_sets_it_otherwise(profile):
    run = RunConfig()
    assert search_params(replace(SHORT, rate=3.0), profile=profile, run=run).start == 3.0
    assert search_params(SHORT).start == 1.0  # no profile: 1 req/s
    p = search_params(SHORT, profile=profile, run=run)
    wl = build_workload(probe_workload(SHORT, 1.0, SHORT.seed, p))
    assert p.start == on_lattice(service_rate(wl, profile, run), p.min_rate, 1024.0)


@pytest.mark.slow
def test_a_search_from_the_service_rate_ends_where_one_from_1_req_s_does(profile):
    """The start only moves where the bracket is found: both searches walk one lattice,
    so they end on the same rate, with fewer passing (full-length) probes (each search
    from its own start: `share` off)."""
    slos = parse_capacity_slos(["p99_itl_ms=100", "p99_ttft_ms=2000"])
    run = RunConfig()
    configs = make_configs(parse_policies("budget,whole"), [512])
    old = replace(search_params(SHORT, tol=0.1), share=False)
    new = replace(search_params(SHORT, tol=0.1, profile=profile, run=run), share=False)
    assert new.start > old.start
    with Runner(profile, workers=1) as runner:
        a = capacity_search(configs, SHORT, run, slos, runner, old, max_reject_pct=1.0)
        b = capacity_search(configs, SHORT, run, slos, runner, new, max_reject_pct=1.0)
    for x, y in zip(a, b, strict=True):
        assert x.max_rate == y.max_rate > 0
        assert sum(p.met for p in y.probes) < sum(p.met for p in x.probes)


def test_a_fleet_of_n_engines_starts_at_n_times_one_engines_rate(profile):
    from chunksim.sweep.fleets import gpu_splits

    p = search_params(SHORT, profile=profile, run=RunConfig())
    assert p.service_rate is not None
    lone, *splits = make_configs(parse_policies("budget"), [512]) + make_configs(
        parse_policies("budget"), [512], gpu_splits(4))
    assert p.start_for(lone) == p.start
    for cfg in splits:
        s = p.start_for(cfg)
        # rounded up: a P/D split may serve more than 4 engines' worth
        assert s / 2 < p.service_rate * 4 <= s and s == 2.0 ** round(math.log2(s))
    given = search_params(replace(SHORT, rate=3.0), profile=profile, run=RunConfig())
    assert all(given.start_for(c) == 3.0 for c in splits)  # --rate: every search's start

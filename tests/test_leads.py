"""Which capacity searches start from another's capacity (`sweep.leads`), alone and in a
real capacity search."""

from __future__ import annotations

import csv
import dataclasses
import io

import pytest

from chunksim.sim.run import RunConfig
from chunksim.sweep.capacity import SearchParams, capacity_search
from chunksim.sweep.capacity_io import entry_document, probes_csv
from chunksim.sweep.configs import Config, PolicySpec, make_configs, parse_policies
from chunksim.sweep.fleets import FleetSpec
from chunksim.sweep.leads import Leads
from chunksim.sweep.probe_drive import _defers
from chunksim.sweep.probes import DEFERRED, deferred
from chunksim.sweep.runner import Runner
from chunksim.sweep.search import RateSearch
from chunksim.sweep.slos import meets
from chunksim.workloads import WorkloadOptions

LONE = [Config(PolicySpec("whole")), Config(PolicySpec("chunk"), 256),
        Config(PolicySpec("budget"), 512)]
FLEET = [Config(PolicySpec("budget"), 512, FleetSpec(replicas=2)),
         Config(PolicySpec("budget"), 2048, FleetSpec(replicas=2)),
         Config(PolicySpec("budget"), 512, FleetSpec(pd=(1, 1)))]


def _searches(n: int) -> list[RateSearch]:
    return [RateSearch(start=8.0, tol=0.03) for _ in range(n)]


def _end(s: RateSearch, capacity: float) -> None:
    """Drive `s` to its end against a monotone capacity."""
    while (r := s.next_rate()) is not None:
        s.report(r, r <= capacity)


def test_one_lead_per_group_and_its_capacity_aims_the_rest():
    configs = LONE + FLEET
    searches = _searches(len(configs))
    leads = Leads(configs, searches)
    assert leads.start() == [0, 3, 5]  # lone engines, 2x, P/D 1:1
    _end(searches[0], 5.0)
    released = leads.release(0)
    assert released == [1, 2]
    for j in released:  # aimed at the lead's capacity, on the lattice
        assert searches[j].hint == pytest.approx(searches[0].capacity)
    assert leads.release(1) == [] and leads.release(5) == []


def test_the_rest_start_once_the_leads_bisection_converges():
    """Released while the lead still checks the rates above its bracket; aimed at the
    capacity it has converged on."""
    searches = _searches(3)
    leads = Leads(LONE, searches)
    lead = searches[0]
    while not lead.converged:
        assert leads.release(0) == []
        r = lead.next_rate()
        lead.report(r, r <= 5.0)
    assert not lead.done and lead.next_rate() == pytest.approx(lead.hi * lead.verify[0])
    assert leads.release(0) == [1, 2]
    assert searches[1].hint == pytest.approx(lead.capacity)
    assert leads.release(0) == []  # released once


def test_a_lead_without_a_capacity_hands_the_lead_on():
    searches = _searches(3)
    leads = Leads(LONE, searches)
    _end(searches[0], 0.0)  # nothing met
    assert searches[0].capacity == 0
    assert leads.release(0) == [1] and searches[1].hint is None  # runs from the start
    assert leads.release(0) == []  # handed on once: the others wait for search 1
    _end(searches[1], 5.0)
    assert leads.release(1) == [2] and searches[2].hint == pytest.approx(searches[1].capacity)
    capped = RateSearch(start=8.0, max_rate=16.0)
    _end(capped, 1e9)
    assert capped.capped
    leads2 = Leads(LONE, [capped, *_searches(2)])
    assert leads2.release(0) == [1]  # "at least the max rate" aims nothing either


def test_a_search_that_fails_at_its_start_runs_alone_and_leads_nothing():
    """`whole` rejects requests on their lengths at the start rate: it runs from the
    start beside the group's lead (the next search), which the rest wait for; only the
    searches before the group's lead are asked."""
    searches = _searches(len(LONE))
    asked = []

    def fails(i):
        asked.append(i)
        return i == 0

    leads = Leads(LONE, searches, fails_at_start=fails)
    assert leads.start() == [0, 1] and asked == [0, 1]
    _end(searches[0], 0.0)
    assert leads.release(0) == []  # alone: it hands nothing on
    _end(searches[1], 5.0)
    assert leads.release(1) == [2] and searches[2].hint == pytest.approx(5.0, rel=0.1)
    # without sharing nothing is asked: every search starts at once anyway
    asked.clear()
    assert Leads(LONE, _searches(3), share=False, fails_at_start=fails).start() == [0, 1, 2]
    assert asked == []


def test_without_sharing_every_search_starts_at_once():
    searches = _searches(len(LONE))
    leads = Leads(LONE, searches, share=False)
    assert leads.start() == [0, 1, 2]
    _end(searches[0], 5.0)
    assert leads.release(0) == [] and all(s.hint is None for s in searches)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_shared_searches_find_the_capacities_of_independent_ones(linear_profile, workers):
    """Started from the lead's capacity, the other searches end on the same capacities
    in fewer probes; each seed's capacity is a rate that seed met."""
    configs = make_configs(parse_policies("budget"), [768, 1024, 2048])
    slos = {"p99_itl_ms": 8.0, "p99_ttft_ms": 400.0}
    w = WorkloadOptions(duration_s=8.0, prompt_mean=512, output_mean=64)
    params = SearchParams(start=8.0, tol=0.05, max_rate=256.0)
    with Runner(linear_profile, workers=workers) as runner:
        shared = capacity_search(configs, w, RunConfig(), slos, runner, params, seeds=[0, 1, 2])
        alone = capacity_search(configs, w, RunConfig(), slos, runner,
                                dataclasses.replace(params, share=False), seeds=[0, 1, 2])
    assert [e.max_rate for e in shared] == pytest.approx([e.max_rate for e in alone], rel=1e-9)
    assert all(e.max_rate > 0 for e in shared)
    assert sum(len(e.probes) for e in shared) < sum(len(e.probes) for e in alone)
    assert any(e.seed_probes for e in shared)  # a seed met no probe and walked down
    for e in shared:
        for k, cap in enumerate(e.seed_capacities()):
            runs = [p.runs[k] for p in e.probes if p.rate == cap] + \
                [q.summary for q in e.seed_probes if q.seed == k and q.rate == cap]
            assert cap > 0 and runs and meets(runs[0], slos)
        for q in e.seed_probes:  # a seed walks down only when it met no probe
            assert not any(p.seeds_met[q.seed] for p in e.probes)
            assert q.rate < min(p.rate for p in e.probes)
    seeds = [0, 1, 2]
    walked = next(e for e in shared if e.seed_probes)
    doc = entry_document(walked, slos, seeds)
    assert [(q["rate"], q["seed"], q["met"]) for q in doc["seed_probes"]] == [
        (q.rate, seeds[q.seed], q.met) for q in walked.seed_probes]
    assert doc["max_rate_by_seed"] == dict(zip(map(str, seeds), walked.seed_capacities(),
                                               strict=True))
    rows = list(csv.DictReader(io.StringIO(probes_csv(shared))))
    assert len(rows) == sum(len(p.runs) for e in shared for p in e.probes) + sum(
        len(e.seed_probes) for e in shared)
    alone_rows = [r for r in rows if r["met"] == ""]  # the seed walks: no median verdict
    assert len(alone_rows) == sum(len(e.seed_probes) for e in shared)


def _stopped(key: str) -> dict:
    return {"stopped": True, "stopped_key": key, "stopped_bound_ms": 8.0, "completed": None}


def test_later_seeds_wait_only_on_a_probe_its_first_seeds_failed():
    slos = {"p99_itl_ms": 8.0, "p99_ttft_ms": 400.0}
    full_pass = {"completed": 100, "rejected": 0, "p99_itl_ms": 5.0, "p99_ttft_ms": 100.0}
    full_miss = {**full_pass, "p99_itl_ms": 9.0}
    first = [0, 1]
    # two stopped misses on one bound: the median misses it whatever seed 2 gives
    assert _defers([_stopped("p99_itl_ms"), _stopped("p99_itl_ms"), DEFERRED], first,
                   slos, 0.0)
    # misses on different bounds: seed 2 decides each median
    assert not _defers([_stopped("p99_itl_ms"), _stopped("p99_ttft_ms"), DEFERRED],
                       first, slos, 0.0)
    assert not _defers([_stopped("p99_itl_ms"), full_pass, DEFERRED], first, slos, 0.0)
    # failed in full: the probe's median figures are reported, so seed 2 runs
    assert not _defers([full_miss, full_miss, DEFERRED], first, slos, 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_seeds_left_unrun_change_no_verdict_and_no_seed_capacity(linear_profile, workers,
                                                                 monkeypatch):
    """A seed is left unrun only at a probe the others already failed; the probes'
    verdicts and every seed's capacity are those of running every seed everywhere."""
    import chunksim.sweep.probe_drive as drive

    configs = make_configs(parse_policies("budget"), [768, 2048])
    slos = {"p99_itl_ms": 8.0, "p99_ttft_ms": 400.0}
    w = WorkloadOptions(duration_s=8.0, prompt_mean=512, output_mean=64)
    params = SearchParams(start=8.0, tol=0.05, max_rate=256.0)
    with Runner(linear_profile, workers=workers) as runner:
        lazy = capacity_search(configs, w, RunConfig(), slos, runner, params, seeds=[0, 1, 2])
        monkeypatch.setattr(drive, "_defers", lambda *a: False)
        every = capacity_search(configs, w, RunConfig(), slos, runner, params, seeds=[0, 1, 2])
    unrun = [(p, k) for e in lazy for p in e.probes for k, ok in enumerate(p.seeds_met)
             if ok is None]
    assert unrun  # some seed was left unrun
    for p, k in unrun:
        assert not p.met and deferred(p.runs[k]) and p.summary.get("stopped")
        assert k in p.summary["deferred_seeds"]
    for a, b in zip(lazy, every, strict=True):
        assert [(p.rate, p.met) for p in a.probes] == [(p.rate, p.met) for p in b.probes]
        assert a.seed_capacities() == b.seed_capacities()
        assert all(ok is not None for p in b.probes for ok in p.seeds_met)
        for p, q in zip(a.probes, b.probes, strict=True):  # what ran is the same run
            assert [x for x in p.seeds_met if x is not None] == [
                y for x, y in zip(p.seeds_met, q.seeds_met, strict=True) if x is not None]

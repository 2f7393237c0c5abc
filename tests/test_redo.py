"""Stopped seeds run again (`probe_drive._redo`, `early.open_bounds`, `early.merge_runs`):
while a probe is open, each seed reruns settling only on the bounds still open, and the
rounds end in the verdict the full runs give; in a real search, the probes, their
verdicts and every seed's capacity are those of rerunning every stopped seed in full."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.sim.engine.settle import REJECTED_KEY
from chunksim.sim.run import RunConfig
from chunksim.sweep import probe_drive
from chunksim.sweep.capacity import SearchParams, capacity_search, judge
from chunksim.sweep.configs import make_configs, parse_policies
from chunksim.sweep.early import failed_keys, merge_runs, open_bounds
from chunksim.sweep.job import SimJob
from chunksim.sweep.probes import partial_verdict
from chunksim.sweep.runner import Runner
from chunksim.workloads import WorkloadOptions

SLOS = {"p99_ttft_ms": 100.0, "p99_itl_ms": 50.0, "median_sched_delay_ms": 20.0}


def _stopped(key: str) -> dict:
    return {"stopped": True, "completed": None, "stopped_key": key,
            "stopped_bound_ms": SLOS[key]}


def _job(slos: dict[str, float]) -> SimJob:
    return SimJob(WorkloadOptions(), RunConfig(), make_configs(parse_policies("budget"),
                                                               [512])[0],
                  settle_slos_ms=tuple(slos.items()) + ((REJECTED_KEY, 0.0),))


def _rerun(full: dict, job: SimJob, order: list[str]) -> dict:
    """What running a seed whose full figures are `full` gives under `job`: stopped on
    the first of its watched bounds it misses (in `order`, the order misses settle in
    time), else its figures."""
    watched = {k for k, _ in job.settle_slos_ms}
    for key in order:
        if key in watched and full[key] > SLOS[key]:
            return _stopped(key)
    return full


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.integers(1, 3), st.data())
def test_reruns_end_in_the_full_runs_verdict(n_seeds, n_keys, data):
    """Seeds stopped on any bound they miss, rerun round by round as `_redo` says (each
    rerun stopping on the first watched bound it misses, in any order): the rounds end,
    within one more than the bounds, in the verdict of every seed in full."""
    slos = dict(list(SLOS.items())[:n_keys])
    vals = st.floats(1.0, 300.0)
    full = [{"completed": 10, "rejected": 0, **{k: data.draw(vals) for k in slos}}
            for _ in range(n_seeds)]
    truth = judge(full, slos, 0.0)
    runs = []
    for s in full:
        missed = [k for k, b in slos.items() if s[k] > b]
        runs.append(_stopped(data.draw(st.sampled_from(missed)))
                    if missed and data.draw(st.booleans()) else s)
    jobs = [_job(slos) for _ in runs]
    for _ in range(n_keys + 2):
        redo = probe_drive._redo(runs, jobs, slos, 0.0)
        verdict = partial_verdict(runs, slos, 0.0)
        if not redo:
            break
        assert verdict is not False
        for k, job in redo:
            # a rerun settles only bounds the seed is not known to miss
            assert not {key for key, _ in job.settle_slos_ms} & failed_keys(runs[k])
            order = data.draw(st.permutations(list(slos)))
            runs[k] = merge_runs(runs[k], _rerun(full[k], job, order))
    else:
        pytest.fail("the reruns did not end")
    assert verdict == truth
    # what a seed is known to miss it does miss
    for s, f in zip(runs, full, strict=True):
        assert all(f[k] > slos[k] for k in failed_keys(s))


def test_an_open_bound_is_what_a_rerun_settles_on():
    slos = {"p99_ttft_ms": 100.0, "p99_itl_ms": 50.0}
    runs = [_stopped("p99_ttft_ms"), {"completed": 10, "rejected": 0, "p99_ttft_ms": 5.0,
                                      "p99_itl_ms": 5.0, "median_sched_delay_ms": 5.0},
            _stopped("p99_itl_ms")]
    assert partial_verdict(runs, slos, 0.0) is None
    assert open_bounds(runs, slos) == ["p99_ttft_ms", "p99_itl_ms"]
    redo = dict(probe_drive._redo(runs, [_job(slos)] * 3, slos, 0.0))
    assert sorted(redo) == [0, 2]
    assert dict(redo[0].settle_slos_ms) == {"p99_itl_ms": 50.0, REJECTED_KEY: 0.0}
    assert dict(redo[2].settle_slos_ms) == {"p99_ttft_ms": 100.0, REJECTED_KEY: 0.0}
    # seed 0 misses ITL too: the median misses both bounds, decided without a full run
    runs[0] = merge_runs(runs[0], _stopped("p99_itl_ms"))
    assert failed_keys(runs[0]) == {"p99_ttft_ms", "p99_itl_ms"}
    assert partial_verdict(runs, slos, 0.0) is False
    assert probe_drive._redo(runs, [_job(slos)] * 3, slos, 0.0) == []


def test_with_two_seeds_a_known_miss_still_runs_in_full():
    """The median of two averages them: a seed known to miss a bound, by an unknown
    amount, runs in full when that bound is open."""
    slos = {"p99_itl_ms": 50.0}
    runs = [{"completed": 10, "rejected": 0, "p99_itl_ms": 10.0}, _stopped("p99_itl_ms")]
    assert partial_verdict(runs, slos, 0.0) is None
    ((k, job),) = probe_drive._redo(runs, [_job(slos)] * 2, slos, 0.0)
    assert k == 1 and job.settle_slos_ms == ()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_narrowed_reruns_change_no_probe_and_no_seed_capacity(linear_profile, workers,
                                                              monkeypatch):
    """Against rerunning every stopped seed in full, as the search did before: the same
    probes, verdicts, seeds met and seed capacities; some reruns were narrowed."""
    configs = make_configs(parse_policies("budget"), [768, 2048])
    slos = {"p99_itl_ms": 12.0, "p99_ttft_ms": 400.0, "median_sched_delay_ms": 20.0}
    w = WorkloadOptions(duration_s=8.0, prompt_mean=512, output_mean=64)
    params = SearchParams(start=8.0, tol=0.05, max_rate=256.0)
    narrowed = []
    settling = probe_drive._settling

    def counted(job, keys):
        narrowed.append(keys)
        return settling(job, keys)

    with Runner(linear_profile, workers=workers) as runner:
        monkeypatch.setattr(probe_drive, "_settling", counted)
        lazy = capacity_search(configs, w, RunConfig(), slos, runner, params, seeds=[0, 1, 2])
        monkeypatch.setattr(probe_drive, "_settling",
                            lambda job, keys: dataclasses.replace(job, settle_slos_ms=()))
        every = capacity_search(configs, w, RunConfig(), slos, runner, params, seeds=[0, 1, 2])
    assert narrowed
    for a, b in zip(lazy, every, strict=True):
        assert a.max_rate == b.max_rate
        assert [(p.rate, p.met, p.seeds_met) for p in a.probes] == [
            (p.rate, p.met, p.seeds_met) for p in b.probes]
        assert a.seed_capacities() == b.seed_capacities()

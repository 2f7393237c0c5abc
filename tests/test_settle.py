"""Probes that stop once their SLO verdict is known (`sim.engine.settle`, `sweep.early`): the
verdict of a stopped run is the full run's, on a corpus of runs and bounds that includes
bounds at and a hair below each run's own figures; a run that goes to its end reports the
same figures as one without the watch."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chunksim.sim.engine.engine as engine_mod
from chunksim.latency.profile import load_profile
from chunksim.sim.engine.settle import needed_above, watchable
from chunksim.sim.run import RunConfig
from chunksim.sweep.capacity import capacity_search, judge, probe_workload, search_params
from chunksim.sweep.configs import make_configs, parse_policies
from chunksim.sweep.early import decide
from chunksim.sweep.fleets import gpu_splits
from chunksim.sweep.job import SimJob, run_job
from chunksim.sweep.runner import Runner
from chunksim.sweep.slos import meets, violations
from chunksim.workloads.options import WorkloadOptions

KEYS = ("p99_ttft_ms", "p99_itl_ms", "median_sched_delay_ms", "p90_e2el_ms", "p50_ttft_ms")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=400),
       st.sampled_from([50, 90, 95, 99]), st.floats(0.01, 9.99))
def test_needed_above_puts_the_percentile_above(values, pct, bound):
    """However the other samples lie, `needed_above(n, p)` samples above B put numpy's
    percentile above B."""
    v = np.asarray(values)
    n = len(v)
    if np.count_nonzero(v > bound) >= needed_above(n, pct):
        assert np.percentile(v, pct) > bound
        if pct == 50:
            assert np.median(v) > bound
    # and the count is the least that decides: one fewer just above B, the rest far
    # below, leaves the percentile within B
    need = needed_above(n, pct)
    if need > 1:
        edge = np.r_[np.full(need - 1, np.nextafter(bound, np.inf)), np.zeros(n - need + 1)]
        assert np.percentile(edge, pct) <= bound


def test_needed_above_never_falls_as_n_grows():
    """Why counting against an upper bound on n is exact."""
    for pct in (50, 90, 95, 99):
        need = [needed_above(n, pct) for n in range(1, 20000)]
        assert all(b >= a for a, b in itertools.pairwise(need))


def test_watchable_keys():
    assert all(watchable(k) for k in KEYS)
    assert not watchable("mean_ttft_ms") and not watchable("p99_tpot_ms")
    assert not watchable("max_decode_stall_ms")


def _stopped(key: str, bound: float) -> dict:
    return {"stopped": True, "completed": None, "stopped_key": key, "stopped_bound_ms": bound}


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5), st.data())
def test_decide_with_stopped_seeds_is_exact_or_open(n_seeds, data):
    """Replacing seeds that miss a bound by their stopped form never changes the
    median-seed verdict; it may only leave it open (None)."""
    slos = {"p99_ttft_ms": 100.0, "p99_itl_ms": 50.0}
    vals = st.floats(1.0, 300.0)
    full = [{"completed": 10, "p99_ttft_ms": data.draw(vals), "p99_itl_ms": data.draw(vals)}
            for _ in range(n_seeds)]
    truth = judge(full, slos)
    runs = []
    for s in full:
        missed = [k for k, b in slos.items() if s[k] > b]
        if missed and data.draw(st.booleans()):
            k = data.draw(st.sampled_from(missed))
            runs.append(_stopped(k, slos[k]))
        else:
            runs.append(s)
    got = decide(runs, slos)
    assert got is None or got == truth
    if not any(r.get("stopped") for r in runs):  # nothing stopped: decided exactly
        assert got == truth
    if n_seeds % 2:
        # an odd count: a seed stopped on a bound is as good as its value for that bound
        for k, b in slos.items():
            above = sum(r.get("stopped_key") == k or (not r.get("stopped") and r[k] > b)
                        for r in runs)
            if above > n_seeds // 2:
                assert got is False


@pytest.fixture(scope="module")
def profile():
    return load_profile(None)


def _jobs():
    """Grids x seeds x rates on one engine, two replicas and a P/D pair, small runs."""
    configs = make_configs(parse_policies("whole,chunk"), [256])
    configs += make_configs(parse_policies("budget"), [2048])
    configs += make_configs(parse_policies("budget"), [2048], gpu_splits(2))
    for cfg, seed, rate in itertools.product(configs, (0, 1), (5.0, 24.0)):
        w = WorkloadOptions(rate=rate, seed=seed, num_requests=60)
        yield SimJob(w, RunConfig(), cfg)


def _bound_sets(full: dict) -> list[dict[str, float]]:
    """SLO sets around this run's own figures: at each value (met), a hair below
    (missed), at half of it, all at once, and the defaults."""
    out = [{"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0, "median_sched_delay_ms": 2000.0}]
    for key in KEYS:
        v = float(full[key])
        if v <= 0:
            continue
        out += [{key: v}, {key: math.nextafter(v, 0.0)}, {key: v * 0.5}]
    out.append({k: float(full[k]) for k in KEYS if full[k] > 0})
    out.append({k: math.nextafter(float(full[k]), 0.0) for k in KEYS if full[k] > 0})
    return out


@pytest.mark.slow
def test_stopped_runs_give_the_full_runs_verdict(profile, monkeypatch):
    """The corpus: every (run, SLO set) pair is a probe; each is run with the watch. A
    stopped run's bound fails in the full run; a run that went to its end is the full run,
    figure for figure."""
    monkeypatch.setattr(engine_mod, "SETTLE_EVERY_STEPS", 16)  # check often: more stops
    probes = stops = 0
    for job in _jobs():
        full = run_job(job, profile).summary
        for slos in _bound_sets(full):
            bounds = tuple(slos.items())
            got = run_job(SimJob(job.workload, job.run, job.config,
                                 settle_slos_ms=bounds), profile).summary
            probes += 1
            if got.get("stopped"):
                stops += 1
                key = got["stopped_key"]
                assert float(full[key]) > slos[key], (job, slos, got)
                assert not meets(full, slos) and not meets(got, slos)
                assert violations(got, slos) == [f"{key} > {slos[key]:g} (settled early)"]
            else:
                assert got == full
    assert probes >= 200
    assert stops >= probes // 5  # the corpus exercises the stop, not only full runs


@pytest.mark.slow
def test_capacity_search_answers_the_same_with_and_without_settling(profile):
    configs = make_configs(parse_policies("chunk,budget"), [2048])
    w = WorkloadOptions(num_requests=100)
    params = search_params(w, tol=0.2)
    slos = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0, "median_sched_delay_ms": 2000.0}
    with Runner(profile, 1) as r:
        a = capacity_search(configs, w, RunConfig(), slos, r, params, seeds=[0, 1, 2])
        b = capacity_search(configs, w, RunConfig(), slos, r, params, seeds=[0, 1, 2],
                            settle=False)
    assert any(p.summary.get("stopped") for e in a for p in e.probes)
    for ea, eb in zip(a, b, strict=True):
        assert ea.max_rate == eb.max_rate
        assert [(p.rate, p.met) for p in ea.probes] == [(p.rate, p.met) for p in eb.probes]
        for pa, pb in zip(ea.probes, eb.probes, strict=True):  # a seed left unrun: None
            assert all(x is None or x == y
                       for x, y in zip(pa.seeds_met, pb.seeds_met, strict=True))
        assert ea.seed_capacities() == eb.seed_capacities()
        for pa, pb in zip(ea.probes, eb.probes, strict=True):
            if not pa.summary.get("stopped"):  # reported in full: the same figures
                assert pa.summary == pb.summary and pa.runs == pb.runs
            else:
                assert not pa.met and "p99_ttft_ms" not in pa.summary
        assert ea.at_max == eb.at_max


def test_probe_workload_is_unchanged_by_settling():
    w = WorkloadOptions()
    assert probe_workload(w, 3.0, 1, search_params(w)).rate == 3.0


def test_a_stopped_probe_reports_its_decision_only():
    from chunksim.reports.capacity_report import probe_rows
    from chunksim.sweep.capacity import CapacityEntry, Probe, probe_summary
    from chunksim.sweep.capacity_io import entry_document

    slos = {"p99_ttft_ms": 100.0}
    full = {"completed": 10, "p99_ttft_ms": 50.0, "workload": "w"}
    stop = {**_stopped("p99_ttft_ms", 100.0), "stopped_at_s": 3.0, "workload": "w"}
    runs = [stop, stop, full]
    summary = probe_summary(runs)
    assert summary["stopped"] and summary["stopped_seeds"] == [0, 1]
    assert "p99_ttft_ms" not in summary and summary["workload"] == "w"
    cfg = make_configs(parse_policies("budget"), [2048])[0]
    probe = Probe(8.0, judge(runs, slos), summary, runs, [meets(s, slos) for s in runs])
    assert not probe.met and probe.seeds_met == [False, False, True]
    e = CapacityEntry(cfg, 0.0, False, [probe])
    doc = entry_document(e, slos, [0, 1, 2])
    p = doc["probes"][0]
    assert p["stopped"] and p["median"] == {"completed": None}
    assert p["by_seed"][0]["violations"] == ["p99_ttft_ms > 100 (settled early)"]
    assert p["by_seed"][0]["stopped_at_s"] == 3.0 and "stopped_at_s" not in p["by_seed"][2]
    assert doc["first_miss_violations"] == ["p99_ttft_ms > 100 (settled early)"]
    row = probe_rows([e], slos)[1]
    assert row[1] == "missed (stopped early)" and row[3] == fmt_none()


def fmt_none() -> str:
    from chunksim.reports.tables import fmt

    return fmt(None, "{:.1f}")


@pytest.mark.slow
def test_pipelined_search_on_a_pool_answers_as_the_lock_step_one(profile):
    """Searches that move on as their own probes finish (a process pool) end where the
    lock-step rounds (inline) end, probe for probe: the lead, the searches started from
    its capacity, the seeds left unrun and the closing runs."""
    configs = make_configs(parse_policies("whole,chunk,budget"), [512, 2048])
    w = WorkloadOptions(num_requests=60)
    params = search_params(w, tol=0.2)
    slos = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0, "median_sched_delay_ms": 2000.0}
    out = []
    for workers in (1, 2):
        with Runner(profile, workers) as r:
            assert r.pooled == (workers > 1)
            out.append(capacity_search(configs, w, RunConfig(), slos, r, params,
                                       seeds=[0, 1, 2]))
    for a, b in zip(*out, strict=True):
        assert (a.max_rate, a.capped, a.non_monotone) == (b.max_rate, b.capped, b.non_monotone)
        assert [(p.rate, p.met, p.seeds_met, p.judged, p.summary, p.runs)
                for p in a.probes] == \
            [(p.rate, p.met, p.seeds_met, p.judged, p.summary, p.runs) for p in b.probes]
        assert a.seed_probes == b.seed_probes


class _SlowFullRuns:
    """A pool stand-in: each job runs at once as it is submitted, but a run in full (no
    bound to stop on: the runs that fill in a passed probe's figures, and the closing
    ones) hands its result over `delay_s` later, from another thread."""

    pooled = True
    workers = 2

    def __init__(self, profile, delay_s: float) -> None:
        self.profile, self.delay_s = profile, delay_s
        self.log: list[tuple] = []  # ("submit" | "result", config, rate, seed, in full)

    def submit(self, job):
        import threading
        from concurrent.futures import Future

        fut, res = Future(), run_job(job, self.profile)
        key = (job.config.label, job.workload.rate, job.workload.seed,
               not job.settle_slos_ms)
        self.log.append(("submit", *key))

        def hand_over():
            self.log.append(("result", *key))
            fut.set_result(res)

        if key[-1]:
            threading.Timer(self.delay_s, hand_over).start()
        else:
            hand_over()
        return fut


@pytest.mark.slow
def test_a_passed_probe_does_not_hold_its_search_while_its_figures_fill_in(profile):
    """Once a probe's verdict is known to be a pass, its search probes on while the runs
    that only fill in its figures (seeds not run yet, stopped seeds again in full) are
    still running, and still ends where the lock-step rounds end, probe for probe."""
    configs = make_configs(parse_policies("chunk,budget"), [512])
    w = WorkloadOptions(num_requests=60)
    params = search_params(w, tol=0.2)
    slos = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0, "median_sched_delay_ms": 2000.0}
    slow = _SlowFullRuns(profile, delay_s=0.5)
    slow_out = capacity_search(configs, w, RunConfig(), slos, slow, params, seeds=[0, 1, 2])
    with Runner(profile, 1) as r:
        ref = capacity_search(configs, w, RunConfig(), slos, r, params, seeds=[0, 1, 2])
    for a, b in zip(slow_out, ref, strict=True):
        assert (a.max_rate, a.seed_probes) == (b.max_rate, b.seed_probes)
        assert [(p.rate, p.met, p.seeds_met, p.judged, p.summary, p.runs)
                for p in a.probes] == \
            [(p.rate, p.met, p.seeds_met, p.judged, p.summary, p.runs) for p in b.probes]
    # some search submitted a probe at another rate while a full run of its own was out
    out: set[tuple] = set()  # (config, rate, seed) of the full runs still out
    moved_on = False
    for kind, cfg, rate, seed, full in slow.log:
        if kind == "submit" and full:
            out.add((cfg, rate, seed))
        elif kind == "result" and full:
            out.remove((cfg, rate, seed))
        elif kind == "submit" and any(c == cfg and r != rate for c, r, _ in out):
            moved_on = True
    assert moved_on, slow.log


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["one", "run", "pack"]),
                          st.lists(st.floats(0.0, 0.2), min_size=1, max_size=5),
                          st.integers(1, 4), st.booleans()), max_size=40))
def test_gap_counter_counts_as_a_recount_would(ops):
    """The incremental count of logged gaps above a bound equals counting them all
    afresh, through single gaps, runs and packing, checked at random moments."""
    import chunksim.sim.records.records as records
    from chunksim.sim.engine.settle import _GapCounter

    old = records._SINGLE_FOLD
    records._SINGLE_FOLD = 3
    try:
        g = records.GapLog()
        counter = _GapCounter(100.0)
        for kind, vals, reps, check in ops:
            if kind == "one":
                for v in vals:
                    g.add(v, 0)
            elif kind == "run":
                g.add_run(np.asarray(vals), [None] * reps)
            else:
                g.maybe_pack()
            if check:
                assert counter.count(g) == _above_100_ms(g)
        assert counter.count(g) == _above_100_ms(g)
    finally:
        records._SINGLE_FOLD = old


def _length_capped() -> RunConfig:
    """The default engine with --max-model-len 700: the default workload's longer
    prompts are rejected on arrival."""
    run = RunConfig()
    return replace(run, engine=replace(run.engine, max_model_len=700))


def test_the_rejection_cap_settles_a_run_exactly(profile):
    """A run whose share of rejected requests (here: prompts over --max-model-len) is
    already above --max-reject-pct stops, and its full run rejects more than the cap; a
    run that went on is the full run, figure for figure."""
    from chunksim.sim.engine.settle import REJECTED_KEY
    from chunksim.sim.records.rejections import reject_pct

    run = _length_capped()
    stops = 0
    for seed, rate in itertools.product((0, 1), (2.0, 30.0)):
        job = SimJob(WorkloadOptions(rate=rate, seed=seed, num_requests=80), run,
                     make_configs(parse_policies("budget"), [512])[0])
        full = run_job(job, profile).summary
        share = reject_pct(full)
        assert share > 0
        for cap in (0.0, share / 2, math.nextafter(share, 0.0), share, 100.0):
            got = run_job(replace(job, settle_slos_ms=((REJECTED_KEY, cap),)),
                          profile).summary
            if got.get("stopped"):
                stops += 1
                assert got["stopped_key"] == REJECTED_KEY and share > cap
                assert got["stopped_bound_pct"] == cap
            else:  # (a run may end before its next check: then it is the full run)
                assert got == full
    assert stops >= 8


def test_a_probe_over_the_rejection_cap_fails_without_running_in_full(profile):
    """Every probe rejects too many: each fails on its first check, and the search
    answers as the unsettled one."""
    configs = make_configs(parse_policies("budget"), [512])
    run = _length_capped()
    w = WorkloadOptions(num_requests=80)
    params = search_params(w, tol=0.2)
    slos = {"p99_ttft_ms": 2000.0}
    with Runner(profile, 1) as r:
        (a,) = capacity_search(configs, w, run, slos, r, params, seeds=[0, 1, 2])
        (b,) = capacity_search(configs, w, run, slos, r, params, seeds=[0, 1, 2],
                               settle=False)
    assert a.max_rate == b.max_rate == 0.0
    assert [(p.rate, p.met) for p in a.probes] == [(p.rate, p.met) for p in b.probes]
    assert all(p.summary.get("stopped") for p in a.probes[1:])
    # the lowest probe is what a configuration that never passed reports: in full
    assert a.probes[0].runs == b.probes[0].runs and a.probes[0].summary == b.probes[0].summary
    assert a.probes[0].seeds_met == b.probes[0].seeds_met
    assert judge(b.probes[0].runs, slos, 100.0)  # no cap: the latencies alone pass


def _above_100_ms(g) -> int:
    """Gaps of `g` above 100 ms, counted again from its values."""
    return int(np.count_nonzero(np.asarray(g.values()) * 1000.0 > 100.0))


def test_the_watch_checks_again_sooner_as_misses_grow():
    """`SloWatch.check`: no growing miss, the longest interval; misses growing toward
    what settles a bound, about when they could reach it, never under the floor."""
    from types import SimpleNamespace

    from chunksim.sim.engine.settle import MIN_SETTLE_STEPS, SETTLE_EVERY_STEPS, Settled, SloWatch
    from chunksim.workloads.options import build_workload

    w = build_workload(WorkloadOptions(num_requests=100, rate=10.0))
    arrival = w.requests.arrival_s
    first = np.full(len(arrival), np.nan)
    core = SimpleNamespace(rejected=[], first_token_s=first, first_sched_s=first,
                           finish_s=first, running=[], waiting=[])
    watch = SloWatch({"median_ttft_ms": 100.0}, w)
    watch.attach([SimpleNamespace(core=core, watch=None)], lone=True)
    need = needed_above(100, 50.0)  # 51 of 100 TTFTs above 100 ms settle the median

    def late(n):  # the first n requests got their first token 1 s after arriving
        first[:n] = arrival[:n] + 1.0

    assert watch.check(1.0, SETTLE_EVERY_STEPS) == SETTLE_EVERY_STEPS  # no miss yet
    late(10)
    assert watch.check(2.0, 128) == SETTLE_EVERY_STEPS  # 10 a 128 steps: 41 to go is far
    late(40)
    assert watch.check(3.0, 128) == (need - 40) * 128 // 30  # 30 more: ~47 steps to go
    late(50)
    assert watch.check(4.0, 40) == MIN_SETTLE_STEPS  # one to go
    late(need)
    with pytest.raises(Settled):
        watch.check(5.0, 8)


@pytest.mark.parametrize("policy,chunk", [("budget", 512), ("chunk", 256)])
def test_the_watch_gets_its_turn_inside_a_long_stretch(profile, monkeypatch, policy, chunk):
    """A lone engine's stretch carries on through arrivals and prefills (`mixed_step`),
    so it may run for thousands of steps: the watch still checks the run every
    SETTLE_EVERY_STEPS steps at most, inside it, and a run that never settles reports
    what it reports without the watch."""
    from chunksim.sim.engine.settle import SETTLE_EVERY_STEPS, SloWatch

    at: list[int] = []
    check = SloWatch.check

    def counting(self, now, steps=SETTLE_EVERY_STEPS):
        at.append(self.engines[0].core.steps.n)
        return check(self, now, steps)

    monkeypatch.setattr(SloWatch, "check", counting)
    (config,) = make_configs(parse_policies(policy), [chunk])
    job = SimJob(WorkloadOptions(num_requests=300, rate=6.0), RunConfig(), config)
    full = run_job(job, profile).summary
    got = run_job(replace(job, settle_slos_ms=(("p99_ttft_ms", 10**7),)), profile).summary
    assert got == full
    assert len(at) >= full["steps"] // SETTLE_EVERY_STEPS
    assert max(np.diff([0, *at])) <= SETTLE_EVERY_STEPS

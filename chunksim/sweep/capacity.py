"""Capacity: the highest request rate at which each configuration meets the SLOs.

Each probe rate runs every seed; the rate passes when the SLOs hold for the median seed
(per bound, the median over seeds of the metric is within it), so one unlucky burst in
one seed neither sinks nor makes a rate. Probe windows are long enough for the tail
percentiles they are judged on (`SearchParams.min_requests`), and the bisection checks
rates above its bracket before accepting an answer (`search.RateSearch.verify`). Every
probe, with every seed's summary, is kept.

Searches run side by side on the shared Runner (`_pipelined`, or in lock-step rounds on
a serial one). Configurations that differ only in policy and chunk size start from the
first one's capacity (`leads`), so most of them end in a few probes around it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

from chunksim.latency.profile import Profile
from chunksim.progress import ProgressBar
from chunksim.sim.build import static_rejections
from chunksim.sim.rejections import MAX_REJECT_PCT_DEFAULT, all_within, within
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.early import decide, rejected_too_many, settle_bounds, stopped
from chunksim.sweep.job import SimJob, run_config
from chunksim.sweep.leads import Leads
from chunksim.sweep.runner import Runner
from chunksim.sweep.search import RateSearch
from chunksim.sweep.seeds import fold
from chunksim.sweep.slos import meets
from chunksim.workloads.options import WorkloadKind, WorkloadOptions, build_workload


@dataclass(frozen=True)
class SearchParams:
    """How each capacity search brackets and bisects the rate, and how long a probe is."""

    start: float = 1.0
    """First rate probed, requests/s."""
    tol: float = 0.03
    """Relative bracket width at which the bisection stops."""
    min_rate: float = 1e-3
    """Below this, a configuration is reported as never meeting the SLOs."""
    max_rate: float = 1e4
    """The doubling stops here."""
    verify: tuple[float, ...] = (1.15, 1.4)
    """Multiples of the bracket's upper end probed before an answer is accepted."""
    auto_window: bool = False
    """Size each probe's window from its rate: `max(min_duration_s, min_requests / rate)`
    seconds (synthetic workloads whose length the user did not set)."""
    min_duration_s: float = 60.0
    """Shortest auto window, s: an overloaded rate needs time to build a queue."""
    min_requests: int = 1000
    """Requests an auto window holds at least: a P99 over 1,000 requests rests on ~10 of
    them, over 200 on 2."""
    share: bool = True
    """Configurations that differ only in policy and chunk size start their search from
    the first one's capacity (`sweep.leads`) instead of from `start`; where feasibility
    is monotone in the rate they end on the same capacity."""
    service_rate: float | None = None
    """One engine's service rate on the workload (`bracket.service_rate`), req/s, when
    the start came from it: a fleet of N engines then starts at N times it, on the same
    lattice of rates (`start_for`). None: every search starts at `start`."""

    def start_for(self, config: Config) -> float:
        """Where the search of `config` starts."""
        if self.service_rate is None or config.fleet is None or config.fleet.gpus <= 1:
            return self.start
        from chunksim.sweep.bracket import on_lattice

        return on_lattice(self.service_rate * config.fleet.gpus, self.min_rate,
                          self.max_rate)


def search_params(workload: WorkloadOptions, max_rate: float = 1024.0,
                  tol: float = 0.03, profile: Profile | None = None,
                  run: RunConfig | None = None) -> SearchParams:
    """`sim capacity`'s search for these workload flags: start at --rate, or where not
    given, at the service rate `profile` implies for the workload under `run`, on the
    lattice of rates (`bracket`; 1 req/s without a profile); synthetic workloads whose
    length was not set get the auto window."""
    synthetic = workload.trace is None and workload.workload is not WorkloadKind.TRACE
    auto = synthetic and workload.num_requests is None and workload.duration_s is None
    params = SearchParams(auto_window=auto)
    start, mu = workload.rate, None
    if start is None and profile is not None and run is not None:
        from chunksim.sweep.bracket import on_lattice, service_rate
        from chunksim.workloads.options import build_workload

        probe = probe_workload(workload, 1.0, workload.seed, params)
        mu = service_rate(build_workload(probe), profile, run)
        start = on_lattice(mu, params.min_rate, max(max_rate, 1.0))
    start = start or 1.0
    return SearchParams(start=start, tol=tol, min_rate=min(start, 1e-3),
                        max_rate=max(max_rate, start), auto_window=auto, service_rate=mu)


def window_note(params: SearchParams, workload: WorkloadOptions,
                requests_at_capacity: float | None) -> str:
    """One sentence on how long each probe was, and whether that supports a P99."""
    if params.auto_window:
        return (f"each probe spans max({params.min_duration_s:g} s, {params.min_requests} "
                f"requests / rate): at least {params.min_requests} requests, so a P99 rests "
                f"on ~{params.min_requests // 100} of them")
    n = requests_at_capacity
    what = ("the trace window" if workload.trace is not None or
            workload.workload is WorkloadKind.TRACE else "the --duration / --num-requests given")
    txt = f"each probe replays {what}"
    if n is not None:
        txt += f" (~{n:.0f} requests at the capacity)"
        if n < params.min_requests:
            txt += (f"; a P99 over fewer than {params.min_requests} requests rests on "
                    f"~{max(1, int(n) // 100)}, so expect it to move between seeds")
    return txt


def probe_workload(workload: WorkloadOptions, rate: float, seed: int,
                   params: SearchParams) -> WorkloadOptions:
    """The workload one probe replays: `rate`, `seed`, and the auto window if asked."""
    w = dataclasses.replace(workload, rate=rate, seed=seed)
    if params.auto_window:
        w = dataclasses.replace(w, duration_s=max(params.min_duration_s,
                                                  params.min_requests / rate))
    return w


@dataclass
class Probe:
    """One simulated rate of one configuration, under every seed."""

    rate: float
    met: bool
    """The SLOs held for the median seed."""
    summary: dict
    """The per-seed summaries folded to their medians."""
    runs: list[dict] = field(default_factory=list)
    """Each seed's summary, in seed order."""
    seeds_met: list[bool] = field(default_factory=list)
    """Whether each seed alone met the SLOs."""


def judge(runs: Sequence[Mapping], slos: Mapping[str, float],
          max_reject_pct: float = MAX_REJECT_PCT_DEFAULT) -> bool:
    """The median-seed rule: every bound holds for the median over seeds of its metric
    (a seed that completed nothing counts as missing every bound); and no seed rejected
    more than `max_reject_pct` % of its requests (`sim.rejections`). Seeds that stopped
    early (`early.decide`) must leave it decided."""
    verdict = _decide(runs, slos, max_reject_pct)
    if verdict is None:
        raise ValueError("judge: stopped seeds leave the verdict open (run them in full)")
    return verdict


def _decide(runs: Sequence[Mapping], slos: Mapping[str, float],
            max_reject_pct: float) -> bool | None:
    """`judge`'s verdict, None while stopped seeds leave it open. A seed that ran in full
    and rejected too much fails the probe; a stopped seed's rejections are unknown, so it
    is run in full whenever the verdict is not already a miss (`_redo`)."""
    if rejected_too_many(runs) or not all_within([s for s in runs if not stopped(s)],
                                                 max_reject_pct):
        return False
    return decide(runs, slos)


DEFERRED = {"stopped": True, "deferred": True, "stopped_key": None, "completed": None}
"""A seed not run (yet) at a probe the others already failed (`_phases`): unknown on
every bound, like a stopped seed on the bounds it did not settle."""


def deferred(summary: Mapping) -> bool:
    return bool(summary.get("deferred"))


def seed_met(summary: Mapping, slos: Mapping[str, float], max_reject_pct: float
             ) -> bool | None:
    """Whether one seed met the SLOs (None: not run, `DEFERRED`)."""
    if deferred(summary):
        return None
    return meets(summary, slos) and within(summary, max_reject_pct)


def probe_summary(runs: Sequence[Mapping]) -> dict:
    """The per-seed summaries folded to their medians; a probe with a seed that stopped
    early reports its decision only (`stopped`, which seeds), never partial figures."""
    if not any(stopped(s) for s in runs):
        return fold(runs).median
    ran = [s for s in runs if not deferred(s)]
    out = {"stopped": True, "completed": None, "workload": ran[0].get("workload"),
           "stopped_seeds": [k for k, s in enumerate(runs) if stopped(s) and not deferred(s)],
           "stopped_keys": sorted({s["stopped_key"] for s in ran if stopped(s)})}
    if len(ran) < len(runs):
        out["deferred_seeds"] = [k for k, s in enumerate(runs) if deferred(s)]
    return out


def static_floor(search: RateSearch, misses: Callable[[float], bool]) -> bool:
    """Whether every rate the halving of `search` has left misses by `misses(rate)`:
    a search that met nothing then ends with capacity 0, as probing each would."""
    rates = search.halvings()
    return bool(rates) and all(misses(r) for r in rates)


def _rejecting(runs: Sequence[Mapping], max_reject_pct: float) -> bool:
    """Some seed of a probe rejected more than `max_reject_pct` % of its requests."""
    return rejected_too_many(runs) or not all_within(
        [s for s in runs if not stopped(s)], max_reject_pct)


def _run(runner: Runner, jobs: list[SimJob], progress: ProgressBar | None) -> list:
    if progress is not None:
        progress.add(len(jobs))
    return runner.map(jobs, progress=progress)


@dataclass(frozen=True)
class SeedProbe:
    """One seed alone at one rate, below a search's probes."""

    rate: float
    seed: int
    """The seed's index in the search's seeds."""
    met: bool
    summary: dict


@dataclass
class CapacityEntry:
    """A configuration's search outcome."""

    config: Config
    max_rate: float
    """Highest probed rate meeting every SLO on the median seed (0 if none did)."""
    capped: bool
    """The SLOs held even at the search's max rate (capacity >= max_rate)."""
    probes: list[Probe] = field(default_factory=list)
    non_monotone: list[float] = field(default_factory=list)
    """Probed rates below `max_rate` that missed the SLOs (a noisy tail, or a real dip)."""
    seed_probes: list[SeedProbe] = field(default_factory=list)
    """Single-seed runs below the probes for seeds that met the SLOs at none of them
    (`_seed_floors`), so each seed's capacity is a rate it met."""
    rejected_below: float | None = None
    """Nothing met, and every rate the search would have probed below this one rejects
    too many requests on arrival on some seed: those rates were decided without probing
    (`static_floor`). None: the search probed every rate it needed."""

    @property
    def at_max(self) -> dict | None:
        """The (median) summary at `max_rate` (None if no rate met the SLOs)."""
        p = self.probe_at_max
        return None if p is None else p.summary

    @property
    def probe_at_max(self) -> Probe | None:
        for p in self.probes:
            if p.met and p.rate == self.max_rate:
                return p
        return None

    def seed_capacities(self) -> list[float]:
        """Per seed, the highest probed rate that seed alone met the SLOs at (0 if none):
        the spread of the capacity over seeds, on the rates the search probed (and, for
        a seed that met none of them, its own runs below: `seed_probes`)."""
        n = max((len(p.seeds_met) for p in self.probes), default=0)
        return [max([p.rate for p in self.probes if len(p.seeds_met) > k and p.seeds_met[k]]
                    + [q.rate for q in self.seed_probes if q.seed == k and q.met],
                    default=0.0) for k in range(n)]

    @property
    def capacity_range(self) -> tuple[float, float]:
        caps = self.seed_capacities() or [self.max_rate]
        return min(caps), max(caps)


def capacity_search(configs: list[Config], workload: WorkloadOptions, run: RunConfig,
                    slos: dict[str, float], runner: Runner,
                    params: SearchParams | None = None,
                    progress: ProgressBar | None = None,
                    seeds: Sequence[int] | None = None,
                    max_reject_pct: float = MAX_REJECT_PCT_DEFAULT,
                    settle: bool = True,
                    skip_rejected_rates: bool = True) -> list[CapacityEntry]:
    """Search every configuration's capacity over `seeds` (default: the workload's seed);
    entries in `configs` order. A probe that rejects more than `max_reject_pct` % of its
    requests (on any seed) fails. With `settle`, a probe run stops once one of its bounds
    has certainly failed (`sim.settle`): the verdict is the full run's, and a probe that
    passes, or whose stopped seeds leave the median open, runs them in full.

    With `skip_rejected_rates`, a lone engine's search that has met nothing and failed on
    rejections ends once every rate its halving has left would reject too much on some
    seed: rejections are fixed by the requests' lengths (`sim.build.static_rejections`),
    so those probes would fail whatever their latencies; its capacity (0) is the same,
    found without running them."""
    params = params or SearchParams()
    seeds = list(seeds) if seeds else [workload.seed]
    bounds = settle_bounds(slos, max_reject_pct) if settle else ()
    searches = [RateSearch(params.start_for(c), params.tol, params.min_rate,
                           params.max_rate, params.verify) for c in configs]
    probes: list[list[Probe]] = [[] for _ in configs]

    def jobs_at(i: int, r: float) -> list[SimJob]:
        return [SimJob(probe_workload(workload, r, k, params), run, configs[i],
                       settle_slos_ms=bounds) for k in seeds]

    def rejects_too_many(i: int, r: float) -> bool:
        for k in seeds:
            opts = probe_workload(workload, r, k, params)
            w = build_workload(opts)
            n = static_rejections(w, runner.profile, run_config(SimJob(opts, run, configs[i])))
            if n is not None and 100.0 * n / len(w.requests) > max_reject_pct:
                return True
        return False

    def done(i: int, r: float, rs: list[dict]) -> list[int]:
        """Judge search `i`'s probe at `r` (`rs`: its seeds' summaries); returns the
        searches that this releases (`ended`)."""
        ok = judge(rs, slos, max_reject_pct)
        searches[i].report(r, ok)
        probes[i].append(Probe(r, ok, probe_summary(rs), rs,
                               [seed_met(s, slos, max_reject_pct) for s in rs]))
        s = searches[i]
        if (skip_rejected_rates and not ok and s.lo is None and configs[i].fleet is None
                and _rejecting(rs, max_reject_pct)):
            s.floor_fails = static_floor(s, lambda x: rejects_too_many(i, x))
        return ended(i)

    leads = Leads(configs, searches, params.share and params.min_rate < params.max_rate)

    def ended(i: int) -> list[int]:
        """Searches released by search `i` so far (`Leads.release`) that have a probe to
        run (one released with none ends at once and releases in turn)."""
        out, stack = [], [i]
        while stack:
            for j in leads.release(stack.pop()):
                (stack if searches[j].done else out).append(j)
        return out

    def phases(i: int) -> tuple[list[int], list[int]]:
        """The seeds probed first (a majority, weakest first by this search's and its
        lead's probes so far) and those run only if they leave the probe open."""
        n = len(seeds)
        if n < 3:
            return list(range(n)), []
        src = leads.source.get(i)
        seen = probes[i] + (probes[src] if src is not None else [])

        def strength(k: int) -> tuple:
            met = [p.rate for p in seen if p.seeds_met[k]]
            miss = [p.rate for p in seen if p.seeds_met[k] is False]
            return max(met, default=0.0), min(miss, default=float("inf")), k

        order = sorted(range(n), key=strength)
        return order[:n // 2 + 1], order[n // 2 + 1:]

    floors: list[list[SeedProbe]] = [[] for _ in configs]

    def after(i: int) -> list[Generator]:
        """What search `i` runs once it has ended: one chain of jobs a seed."""
        return [_after_search(searches[i], probes[i], k, lambda r, k=k: jobs_at(i, r)[k],
                              floors[i], slos, max_reject_pct) for k in range(len(seeds))]

    drive = _pipelined if runner.pooled else _lock_step
    drive(searches, leads.start(), ended, jobs_at, phases, done, after, slos, runner,
          progress, max_reject_pct)
    return [CapacityEntry(c, s.capacity, s.capped, sorted(p, key=lambda x: x.rate),
                          s.non_monotone, sorted(f, key=lambda q: (q.seed, q.rate)),
                          s.hi if s.floor_fails else None)
            for c, s, p, f in zip(configs, searches, probes, floors, strict=True)]


def _defers(runs: Sequence[Mapping], first: Sequence[int], slos: Mapping[str, float],
            max_reject_pct: float) -> bool:
    """Whether a probe's later seeds (`DEFERRED` in `runs`) may stay unrun: its first
    seeds already fail it, and one of them stopped early, so it reports its decision
    only whatever the others give (`probe_summary`)."""
    return (any(stopped(runs[k]) for k in first)
            and _decide(runs, slos, max_reject_pct) is False)


def _later(runs: Sequence[Mapping], job: SimJob, slos: Mapping[str, float],
           max_reject_pct: float) -> SimJob:
    """A later seed's job: in full when the first seeds already pass the probe (its
    figures are reported whatever it gives), else settling like the others."""
    return _full(job) if _decide(runs, slos, max_reject_pct) is True else job


def _after_search(search: RateSearch, probes: list[Probe], k: int, job_at,
                  floors: list[SeedProbe], slos: Mapping[str, float],
                  max_reject_pct: float) -> Generator[SimJob, dict, None]:
    """Seed `k` of a search that has ended, as a generator of jobs (send each one's
    summary back). Its seed capacity first: the probes it was not run at (`DEFERRED`)
    above the highest rate it met, from the top down until it meets one, so that it is
    what running every seed everywhere gives (the rest stay unrun, `seeds_met` None).
    Then, for a search with a capacity, a seed that met none of its probes (one started
    from a hint probes near the capacity only) runs alone down the lattice from the
    lowest probe, 1, 2, 4, ... steps, until it meets the SLOs or passes `min_rate`
    (`floors`). For a search that never passed, its lowest probe, which it reports, runs
    in full. Each chain depends on its own search only: when it runs changes nothing."""
    if not probes:
        return

    def met(summary: dict) -> bool | None:
        return seed_met(summary, slos, max_reject_pct)

    while True:
        best = max((p.rate for p in probes if p.seeds_met[k]), default=0.0)
        left = [p for p in probes if p.seeds_met[k] is None and p.rate > best]
        if not left:
            break
        p = max(left, key=lambda x: x.rate)
        got = yield job_at(p.rate)
        p.runs[k], p.seeds_met[k] = got, met(got)
        p.summary = probe_summary(p.runs)
    if search.capacity > 0 and not any(p.seeds_met[k] for p in probes):
        low, m = min(p.rate for p in probes), 0
        while (r := low * 2.0 ** (-max(1, 2 * m) / search.steps_per_octave)) >= \
                search.min_rate:
            got = yield job_at(r)
            ok = bool(met(got))
            floors.append(SeedProbe(r, k, ok, got))
            if ok:
                break
            m = max(1, 2 * m)
    if search.capacity == 0:
        low = min(probes, key=lambda x: x.rate)
        if stopped(low.runs[k]):
            got = yield _full(job_at(low.rate))
            low.runs[k], low.seeds_met[k] = got, met(got)
            low.summary = probe_summary(low.runs)


def _step(chain: Generator, summary: dict | None) -> SimJob | None:
    """The next job of `chain` (given the last one's summary), None once it is over."""
    try:
        return next(chain) if summary is None else chain.send(summary)
    except StopIteration:
        return None


def _run_chains(chains: list[Generator], runner: Runner,
                progress: ProgressBar | None) -> None:
    """Run chains side by side, one job of each a round."""
    live = [(c, j) for c in chains if (j := _step(c, None)) is not None]
    while live:
        results = _run(runner, [j for _, j in live], progress)
        live = [(c, j) for (c, _), res in zip(live, results, strict=True)
                if (j := _step(c, res.summary)) is not None]


def _redo(runs: Sequence[Mapping], slos: Mapping[str, float],
          max_reject_pct: float = MAX_REJECT_PCT_DEFAULT) -> list[int]:
    """The stopped seeds of a probe to run in full: all of them when the probe passes (its
    figures are reported) or when they leave the median-seed verdict open."""
    if _decide(runs, slos, max_reject_pct) is False:
        return []
    return [k for k, s in enumerate(runs) if stopped(s)]


def _full(job: SimJob) -> SimJob:
    return dataclasses.replace(job, settle_slos_ms=())


def _lock_step(searches, first, ended, jobs_at, phases, done, after, slos,
               runner: Runner, progress: ProgressBar | None, max_reject_pct: float) -> None:
    """The running searches advance together: one batch of each one's next probe a round
    (`first`: those running at the start; `done` and `ended(i)`: those search i starts;
    `phases(i)`: the seeds run first and those run only if needed, `_defers`); then every
    search's chains after it (`after(i)`), side by side."""
    running, over = list(first), []
    while True:
        for i in [i for i in running if searches[i].done]:
            running.remove(i)
            over.append(i)
            running.extend(ended(i))
        running.sort()
        batch = [(i, r) for i in running if (r := searches[i].next_rate()) is not None]
        if not batch:
            _run_chains([c for i in sorted(over) for c in after(i)], runner, progress)
            return
        groups = [jobs_at(i, r) for i, r in batch]
        splits = [phases(i) for i, _ in batch]
        runs = [[DEFERRED] * len(g) for g in groups]
        for stage in (0, 1):
            want = [(j, k) for j, (g, sp) in enumerate(zip(groups, splits, strict=True))
                    for k in sp[stage]
                    if stage == 0 or not _defers(runs[j], sp[0], slos, max_reject_pct)]
            jobs = [groups[j][k] if stage == 0 else
                    _later(runs[j], groups[j][k], slos, max_reject_pct) for j, k in want]
            for (j, k), res in zip(want, _run(runner, jobs, progress), strict=True):
                runs[j][k] = res.summary
        redo = [(j, k) for j, rs in enumerate(runs)
                for k in _redo(rs, slos, max_reject_pct)]
        if redo:
            full = _run(runner, [_full(groups[j][k]) for j, k in redo], progress)
            for (j, k), res in zip(redo, full, strict=True):
                runs[j][k] = res.summary
        for (i, r), rs in zip(batch, runs, strict=True):
            running.extend(done(i, r, rs))


def _pipelined(searches, first, ended, jobs_at, phases, done, after, slos,
               runner: Runner, progress: ProgressBar | None, max_reject_pct: float) -> None:
    """Each search submits its next probe as soon as its last one is judged, so a short
    (stopped) probe never leaves a worker idle while a long one runs, and its chains
    (`after`) as soon as it ends. Each search's probes depend on its own results and its
    lead's capacity only, each chain on its search only: the outcome is the lock-step
    one."""
    # future -> (0, search, seed) for a probe's job, (1, chain number) for a chain's
    pending: dict[Future, tuple[int, int] | tuple[int, int, int]] = {}
    # search -> rate, runs, jobs, (seeds run first, seeds not yet submitted)
    state: dict[int, tuple[float, list, list[SimJob], tuple[list[int], list[int]]]] = {}
    chains: list[Generator] = []

    def submit(key: tuple, job: SimJob) -> None:
        if progress is not None:
            progress.add(1)
        pending[runner.submit(job)] = key

    def advance(i: int) -> None:
        r = searches[i].next_rate()
        if r is None:
            for c in after(i):
                if (job := _step(c, None)) is not None:
                    chains.append(c)
                    submit((1, len(chains) - 1), job)
            for j in ended(i):
                advance(j)
            return
        jobs = jobs_at(i, r)
        first, later = phases(i)
        runs = [DEFERRED] * len(jobs)
        state[i] = (r, runs, jobs, (first, list(later)))
        for k in first:
            runs[k] = None
            submit((0, i, k), jobs[k])

    for i in first:
        advance(i)
    try:
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=pending.__getitem__):
                key = pending.pop(fut)
                summary = fut.result().summary
                if progress is not None:
                    progress.advance()
                if key[0] == 1:
                    if (job := _step(chains[key[1]], summary)) is not None:
                        submit(key, job)
                    continue
                _, i, k = key
                r, runs, jobs, (first, later) = state[i]
                runs[k] = summary
                if any(x is None for x in runs):
                    continue
                if later and not _defers(runs, first, slos, max_reject_pct):
                    picked = [_later(runs, jobs[k2], slos, max_reject_pct) for k2 in later]
                    for k2, job in zip(later, picked, strict=True):
                        runs[k2] = None
                        submit((0, i, k2), job)
                    later.clear()
                    continue
                redo = _redo(runs, slos, max_reject_pct)
                if redo:
                    for k2 in redo:
                        runs[k2] = None
                        submit((0, i, k2), _full(jobs[k2]))
                    continue
                for j in done(i, r, runs):
                    advance(j)
                advance(i)
    finally:
        for fut in pending:
            fut.cancel()


def recommend(entries: list[CapacityEntry]) -> CapacityEntry | None:
    """Highest capacity; ties (the searches share one rate lattice) -> lower P99 TTFT,
    then configuration order. None if no configuration met the SLOs at any rate.
    (The page's verdict, `sweep.verdict`, also weighs the spread over seeds.)"""
    ok = [e for e in entries if e.max_rate > 0]
    if not ok:
        return None
    return min(ok, key=lambda e: (-e.max_rate, e.at_max["p99_ttft_ms"], e.config.sort_key))

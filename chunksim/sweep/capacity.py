"""Capacity: the highest request rate at which each configuration meets the SLOs.

Each probe rate runs every seed; the rate passes when the SLOs hold for the median seed
(per bound, the median over seeds of the metric is within it), so one unlucky burst in
one seed neither sinks nor makes a rate. Probe windows are long enough for the tail
percentiles they are judged on (`SearchParams.min_requests`), and the bisection checks
rates above its bracket before accepting an answer (`search.RateSearch.verify`). Every
probe, with every seed's summary, is kept.

Searches run side by side on the shared Runner (`probe_drive`). Configurations that
differ only in policy and chunk size start from the first one's capacity (`leads`), so
most of them end in a few probes around it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

from chunksim.latency.profile import Profile
from chunksim.progress import ProgressBar
from chunksim.sim.build import static_rejections
from chunksim.sim.records.rejections import MAX_REJECT_PCT_DEFAULT, reject_pct
from chunksim.sim.records.rejections import worst as reject_worst
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.early import settle_bounds
from chunksim.sweep.job import SimJob, run_config
from chunksim.sweep.leads import Leads
from chunksim.sweep.probe_drive import after_search, lock_step, pipelined
from chunksim.sweep.probes import (
    Probe,
    SeedProbe,
    judge,
    probe_summary,
    rejecting,
    seeds_met,
)
from chunksim.sweep.runner import Runner
from chunksim.sweep.search import RateSearch
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
    the start came from it: a fleet of N engines then starts at N times it rounded up,
    on the same lattice of rates (`start_for`). None: every search starts at `start`."""

    def start_for(self, config: Config) -> float:
        """Where the search of `config` starts: a fleet of N engines at N times one
        engine's service rate, rounded up to a power of two (a P/D split can serve more
        than N engines' worth; a start below the capacity passes, and a pass runs in
        full, while a start above it fails within seconds of simulated time)."""
        if self.service_rate is None or config.fleet is None or config.fleet.gpus <= 1:
            return self.start
        from chunksim.sweep.bracket import on_lattice

        return on_lattice(self.service_rate * config.fleet.gpus, self.min_rate,
                          self.max_rate, up=True)


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


def static_floor(search: RateSearch, misses: Callable[[float], bool]) -> bool:
    """Whether every rate the halving of `search` has left misses by `misses(rate)`:
    a search that met nothing then ends with capacity 0, as probing each would."""
    rates = search.halvings()
    return bool(rates) and all(misses(r) for r in rates)


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
    (`probe_drive.after_search`), so each seed's capacity is a rate it met."""
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
    def served_at_max(self) -> tuple[float, float] | None:
        """(requests/s served on the median seed, % rejected on the worst seed) at the
        capacity when a seed rejected requests there (None: none did, or nothing met):
        the capacity is then a rate offered, not served."""
        p = self.probe_at_max
        if p is None or not p.runs:
            return None
        w = reject_worst(p.runs)
        if w is None or not w.get("rejected"):
            return None
        import numpy as np

        served = [float(s.get("request_throughput") or 0.0) for s in p.runs]
        return float(np.median(served)), reject_pct(w)

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
    has certainly failed (`sim.engine.settle`): the verdict is the full run's, and a probe that
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

    def done(i: int, r: float, rs: list[dict], judged: list[bool | None]) -> list[int]:
        """Judge search `i`'s probe at `r` (`rs`: its seeds' summaries, `judged`: which
        seeds met the SLOs as the verdict became known); returns the searches that this
        releases (`ended`). Runs that only fill in a passed probe's figures may still be
        on their way into `rs` (`filled`)."""
        ok = judge(rs, slos, max_reject_pct)
        searches[i].report(r, ok)
        probes[i].append(Probe(r, ok, probe_summary(rs), rs,
                               seeds_met(rs, slos, max_reject_pct), judged))
        s = searches[i]
        if (skip_rejected_rates and not ok and s.lo is None and configs[i].fleet is None
                and rejecting(rs, max_reject_pct)):
            s.floor_fails = static_floor(s, lambda x: rejects_too_many(i, x))
        return ended(i)

    def filled(i: int, rs: list[dict]) -> None:
        """Every run of search `i`'s probe with the seeds' summaries `rs` is in."""
        p = next(p for p in probes[i] if p.runs is rs)
        p.summary = probe_summary(rs)
        p.seeds_met = seeds_met(rs, slos, max_reject_pct)

    leads = Leads(configs, searches, params.share, fails_at_start=lambda i: (
        skip_rejected_rates and configs[i].fleet is None
        and rejects_too_many(i, searches[i].next_rate())))

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
            met = [p.rate for p in seen if p.judged[k]]
            miss = [p.rate for p in seen if p.judged[k] is False]  # (as each was judged)
            return max(met, default=0.0), min(miss, default=float("inf")), k

        order = sorted(range(n), key=strength)
        return order[:n // 2 + 1], order[n // 2 + 1:]

    floors: list[list[SeedProbe]] = [[] for _ in configs]

    def after(i: int) -> list[Generator]:
        """What search `i` runs once it has ended: one chain of jobs a seed."""
        return [after_search(searches[i], probes[i], k, lambda r, k=k: jobs_at(i, r)[k],
                              floors[i], slos, max_reject_pct) for k in range(len(seeds))]

    drive = pipelined if runner.pooled else lock_step
    drive(searches, leads.start(), ended, jobs_at, phases, done, filled, after, slos,
          runner, progress, max_reject_pct)
    return [CapacityEntry(c, s.capacity, s.capped, sorted(p, key=lambda x: x.rate),
                          s.non_monotone, sorted(f, key=lambda q: (q.seed, q.rate)),
                          s.hi if s.floor_fails else None)
            for c, s, p, f in zip(configs, searches, probes, floors, strict=True)]


def recommend(entries: list[CapacityEntry]) -> CapacityEntry | None:
    """Highest capacity; ties (the searches share one rate lattice) -> lower P99 TTFT,
    then configuration order. None if no configuration met the SLOs at any rate.
    (The page's verdict, `sweep.verdict`, also weighs the spread over seeds.)"""
    ok = [e for e in entries if e.max_rate > 0]
    if not ok:
        return None
    return min(ok, key=lambda e: (-e.max_rate, e.at_max["p99_ttft_ms"], e.config.sort_key))


def check_max_rate(max_rate: float, rate: float | None) -> None:
    """--max-rate caps the capacity search, which starts at --rate (default 1 req/s): a
    cap at or below 0, or below the start, would be lifted without a word."""
    start = rate or 1.0
    if not max_rate > 0 or max_rate < start:
        raise ValueError(f"--max-rate {max_rate:g}: the capacity search starts at --rate "
                         f"{start:g} req/s, so its cap must be at least that; raise "
                         "--max-rate or lower --rate")

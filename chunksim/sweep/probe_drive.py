"""Running a capacity search's probes on a Runner: which seeds of a probe run first,
the later ones only while the probe is open, stopped seeds again (in full where the
figures are reported, else only until the bounds left open are settled), and each
search's closing runs (`after_search`) as soon as it ends and its probes' runs are in.
A probe is judged as soon as its verdict is known; a pass still runs its unrun and
stopped seeds in full, as its figures are reported, but the search does not wait for
them. `pipelined` keeps a pool busy (each search submits its next probe as soon as its
last is judged, and a free worker takes the most urgent job waiting, `_Dispatch`);
`lock_step` runs rounds on a serial Runner. Both give the same probes.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Generator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait

from chunksim.progress import ProgressBar
from chunksim.sim.engine.settle import REJECTED_KEY
from chunksim.sweep.early import failed_keys, merge_runs, open_bounds, stopped
from chunksim.sweep.job import SimJob
from chunksim.sweep.probes import (
    DEFERRED,
    Probe,
    SeedProbe,
    partial_verdict,
    probe_summary,
    seed_met,
    seeds_met,
)
from chunksim.sweep.runner import Runner
from chunksim.sweep.search import RateSearch


class _Dispatch:
    """A pipelined search's jobs waiting for the pool, the most urgent first: a probe's
    run (its search waits for it), then a run that fills in a judged probe's figures (its
    search's closing runs wait for it), then a closing run (nothing waits for it); in the
    order submitted within a kind. The pool holds at most `slots` jobs: one per worker
    and one more, queued, which a worker that finishes takes at once (without it, a
    worker would wait for this process to hand it the next). Jobs handed to the pool run
    in the order handed, so holding the rest back here is what lets a probe's run pass
    closing runs submitted before it, and a search's last probes not wait behind them."""

    RANK = {0: 0, 2: 1, 1: 2}
    """`pipelined`'s key kind (probe 0, closing run 1, fill-in 2) -> urgency."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._heap: list[tuple[int, int, tuple, SimJob]] = []
        self._order = itertools.count()

    def add(self, key: tuple, job: SimJob) -> None:
        heapq.heappush(self._heap, (self.RANK[key[0]], next(self._order), key, job))

    def take(self, held: int) -> list[tuple[tuple, SimJob]]:
        """The jobs to hand the pool now that it holds `held`: the most urgent, up to
        `slots` held in all."""
        out = []
        while self._heap and held + len(out) < self.slots:
            _, _, key, job = heapq.heappop(self._heap)
            out.append((key, job))
        return out


def _run(runner: Runner, jobs: list[SimJob], progress: ProgressBar | None) -> list:
    if progress is not None:
        progress.add(len(jobs))
    return runner.map(jobs, progress=progress)


def _defers(runs: Sequence[Mapping], first: Sequence[int], slos: Mapping[str, float],
            max_reject_pct: float) -> bool:
    """Whether a probe's later seeds (`DEFERRED` in `runs`) may stay unrun: its first
    seeds already fail it, and one of them stopped early, so it reports its decision
    only whatever the others give (`probe_summary`)."""
    return (any(stopped(runs[k]) for k in first)
            and partial_verdict(runs, slos, max_reject_pct) is False)


def after_search(search: RateSearch, probes: list[Probe], k: int, job_at,
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


def _redo(runs: Sequence[Mapping], jobs: Sequence[SimJob], slos: Mapping[str, float],
          max_reject_pct: float) -> list[tuple[int, SimJob]]:
    """The stopped seeds of a probe to run again, and their jobs; none once the probe is
    decided. All in full when it passes (its figures are reported). When they leave the
    median-seed verdict open (`early.open_bounds`), each that is unknown on an open bound
    settles on just those (and the rejection cap), so that it runs only until it misses
    one or to its end (merged with what it settled before, `early.merge_runs`); with an
    even count of seeds, one whose miss of an open bound is known but not by how much
    runs in full, as the median of two averages its value."""
    verdict = partial_verdict(runs, slos, max_reject_pct)
    if verdict is False:
        return []
    if verdict is True:
        return [(k, _full(jobs[k])) for k, s in enumerate(runs) if stopped(s)]
    bounds = open_bounds(runs, slos)
    even = len(runs) % 2 == 0
    out = []
    for k, s in enumerate(runs):
        if not stopped(s):
            continue
        missed = failed_keys(s)
        if even and any(b in missed for b in bounds):
            out.append((k, _full(jobs[k])))
        elif watch := [b for b in bounds if b not in missed]:
            out.append((k, _settling(jobs[k], watch)))
    return out


def _settling(job: SimJob, keys: Sequence[str]) -> SimJob:
    """`job` stopping on the bounds `keys` (and the rejection cap) only."""
    return dataclasses.replace(job, settle_slos_ms=tuple(
        (k, b) for k, b in job.settle_slos_ms if k in keys or k == REJECTED_KEY))


def _full(job: SimJob) -> SimJob:
    return dataclasses.replace(job, settle_slos_ms=())


def _known(runs: Sequence[Mapping], slos: Mapping[str, float],
           max_reject_pct: float) -> list[bool | None] | None:
    """`seeds_met` once the probe passes whatever its runs still to come give, else None
    (a failed probe runs nothing more; an open one is not judged yet)."""
    return seeds_met(runs, slos, max_reject_pct) if partial_verdict(
        runs, slos, max_reject_pct) else None


def lock_step(searches, first, ended, jobs_at, phases, done, filled, after, slos,
              runner: Runner, progress: ProgressBar | None, max_reject_pct: float) -> None:
    """The running searches advance together: one batch of each one's next probe a round
    (`first`: those running at the start; `done` and `ended(i)`: those search i starts;
    `phases(i)`: the seeds run first and those run only if needed, `_defers`); then every
    search's chains after it (`after(i)`), side by side. A probe is judged with its seeds
    as they stood when its verdict was known (`done`), as `pipelined` judges it."""
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
        runs = [[dict(DEFERRED) for _ in g] for g in groups]
        judged: list[list | None] = [None] * len(batch)  # as each verdict became known
        for stage in (0, 1):
            # later seeds settle while the probe is open; a pass runs them in full below
            want = [(j, k) for j, (g, sp) in enumerate(zip(groups, splits, strict=True))
                    for k in sp[stage]
                    if stage == 0 or not (_defers(runs[j], sp[0], slos, max_reject_pct)
                                          or partial_verdict(runs[j], slos, max_reject_pct))]
            jobs = [groups[j][k] for j, k in want]
            for (j, k), res in zip(want, _run(runner, jobs, progress), strict=True):
                runs[j][k] = res.summary
        while redo := [(j, k, job) for j, rs in enumerate(runs)
                       for k, job in _redo(rs, groups[j], slos, max_reject_pct)]:
            judged = [was or _known(rs, slos, max_reject_pct)
                      for was, rs in zip(judged, runs, strict=True)]
            again = _run(runner, [job for _, _, job in redo], progress)
            for (j, k, _), res in zip(redo, again, strict=True):
                runs[j][k] = merge_runs(runs[j][k], res.summary)
        for j, ((i, r), rs) in enumerate(zip(batch, runs, strict=True)):
            released = done(i, r, rs, judged[j] or seeds_met(rs, slos, max_reject_pct))
            filled(i, rs)
            running.extend(released)


def pipelined(searches, first, ended, jobs_at, phases, done, filled, after, slos,
              runner: Runner, progress: ProgressBar | None, max_reject_pct: float) -> None:
    """Each search submits its next probe as soon as its last one is judged, so a short
    (stopped) probe never leaves a worker idle while a long one runs, and its chains
    (`after`) as soon as it ends and its probes' runs are all in. A probe is judged as
    soon as its verdict is known: the runs that only fill in a passed probe's figures
    (its later seeds, its stopped seeds again in full) run beside the search's next
    probes, and `filled` says when they are all in. Each search's probes depend on its
    own verdicts and its lead's capacity only, each chain on its search only: the
    outcome is the lock-step one, whichever job a worker takes first (`_Dispatch`)."""
    # future -> (0, search, seed) for a probe's job, (1, chain number) for a chain's,
    # (2, fill number, seed) for a run that fills in a judged probe's figures
    pending: dict[Future, tuple] = {}
    # search -> rate, runs, jobs, (seeds run first, seeds not yet submitted)
    state: dict[int, tuple[float, list, list[SimJob], tuple[list[int], list[int]]]] = {}
    chains: list[Generator] = []
    before: dict[tuple, dict] = {}  # (0, search, seed) -> its stopped run, run again
    fills: list[tuple[int, list, set[int]]] = []  # (search, runs, seeds still running)
    filling = [0] * len(searches)  # per search, its probes with runs still to come in
    over: set[int] = set()  # searches ended whose chains wait for those runs

    waiting = _Dispatch(runner.workers + 1)

    def submit(key: tuple, job: SimJob) -> None:
        if progress is not None:
            progress.add(1)
        waiting.add(key, job)

    def dispatch() -> None:
        for key, job in waiting.take(len(pending)):
            pending[runner.submit(job)] = key

    def start_chains(i: int) -> None:
        for c in after(i):
            if (job := _step(c, None)) is not None:
                chains.append(c)
                submit((1, len(chains) - 1), job)

    def advance(i: int) -> None:
        r = searches[i].next_rate()
        if r is None:
            if filling[i]:
                over.add(i)
            else:
                start_chains(i)
            for j in ended(i):
                advance(j)
            return
        jobs = jobs_at(i, r)
        first, later = phases(i)
        runs = [dict(DEFERRED) for _ in jobs]
        state[i] = (r, runs, jobs, (first, list(later)))
        for k in first:
            runs[k] = None
            submit((0, i, k), jobs[k])

    def judge_now(i: int, r: float, runs: list, fill: list[tuple[int, SimJob]]) -> None:
        """Search `i`'s probe at `r` has its verdict: judge it and move on while `fill`
        (seed, job) runs in (each replacing, or merged into, what `runs` holds now)."""
        released = done(i, r, runs, seeds_met(runs, slos, max_reject_pct))
        if fill:
            fills.append((i, runs, {k for k, _ in fill}))
            filling[i] += 1
            for k, job in fill:  # (in full: what it gives replaces what stood)
                submit((2, len(fills) - 1, k), job)
        else:
            filled(i, runs)
        for j in released:
            advance(j)
        advance(i)

    for i in first:
        advance(i)
    dispatch()
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
                if key[0] == 2:
                    i, runs, left = fills[key[1]]
                    runs[key[2]] = summary
                    left.discard(key[2])
                    if not left:
                        filled(i, runs)
                        filling[i] -= 1
                        if not filling[i] and i in over:
                            over.discard(i)
                            start_chains(i)
                    continue
                _, i, k = key
                r, runs, jobs, (first, later) = state[i]
                runs[k] = merge_runs(before.pop(key), summary) if key in before else summary
                if any(x is None for x in runs):
                    continue
                if partial_verdict(runs, slos, max_reject_pct):
                    # passed: every seed not run, or stopped, runs in full for the figures
                    judge_now(i, r, runs, _redo(runs, jobs, slos, max_reject_pct))
                    continue
                if later and not _defers(runs, first, slos, max_reject_pct):
                    for k2 in later:  # (settling, as the verdict is open)
                        runs[k2] = None
                        submit((0, i, k2), jobs[k2])
                    later.clear()
                    continue
                redo = _redo(runs, jobs, slos, max_reject_pct)
                if redo:
                    for k2, job in redo:
                        before[(0, i, k2)] = runs[k2]
                        runs[k2] = None
                        submit((0, i, k2), job)
                    continue
                judge_now(i, r, runs, [])
            dispatch()
    finally:
        for fut in pending:
            fut.cancel()

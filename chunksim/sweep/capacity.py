"""Capacity: the highest request rate at which each configuration meets the SLOs, and the
recommended configuration (highest capacity; ties -> lower P99 TTFT at that rate).

All searches advance in lock-step: each round collects every unfinished search's next
rate and runs that batch on the shared Runner, so the worker pool stays busy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from chunksim.progress import ProgressBar
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.job import SimJob
from chunksim.sweep.runner import Runner
from chunksim.sweep.search import RateSearch
from chunksim.sweep.slos import meets
from chunksim.workloads.options import WorkloadOptions


@dataclass(frozen=True)
class SearchParams:
    """How each capacity search brackets and bisects the rate."""

    start: float = 1.0
    """First rate probed, requests/s."""
    tol: float = 0.03
    """Relative bracket width at which the bisection stops."""
    min_rate: float = 1e-3
    """Below this, a configuration is reported as never meeting the SLOs."""
    max_rate: float = 1e4
    """The doubling stops here."""


@dataclass
class Probe:
    """One simulated rate of one configuration."""

    rate: float
    met: bool
    summary: dict


@dataclass
class CapacityEntry:
    """A configuration's search outcome."""

    config: Config
    max_rate: float
    """Highest probed rate meeting every SLO (0 if none did)."""
    capped: bool
    """The SLOs held even at the search's max rate (capacity >= max_rate)."""
    probes: list[Probe] = field(default_factory=list)

    @property
    def at_max(self) -> dict | None:
        """The summary at `max_rate` (None if no rate met the SLOs)."""
        for p in self.probes:
            if p.met and p.rate == self.max_rate:
                return p.summary
        return None


def capacity_search(configs: list[Config], workload: WorkloadOptions, run: RunConfig,
                    slos: dict[str, float], runner: Runner,
                    params: SearchParams | None = None,
                    progress: ProgressBar | None = None) -> list[CapacityEntry]:
    """Search every configuration's capacity; entries in `configs` order."""
    params = params or SearchParams()
    searches = [RateSearch(params.start, params.tol, params.min_rate, params.max_rate)
                for _ in configs]
    probes: list[list[Probe]] = [[] for _ in configs]
    while True:
        batch = [(i, r) for i, s in enumerate(searches) if (r := s.next_rate()) is not None]
        if not batch:
            break
        jobs = [SimJob(dataclasses.replace(workload, rate=r), run, configs[i])
                for i, r in batch]
        if progress is not None:
            progress.add(len(jobs))
        for (i, r), res in zip(batch, runner.map(jobs, progress=progress), strict=True):
            ok = meets(res.summary, slos)
            searches[i].report(r, ok)
            probes[i].append(Probe(r, ok, res.summary))
    return [CapacityEntry(c, s.capacity, s.capped, sorted(p, key=lambda x: x.rate))
            for c, s, p in zip(configs, searches, probes, strict=True)]


def recommend(entries: list[CapacityEntry]) -> CapacityEntry | None:
    """Highest capacity; ties (the searches share one rate lattice) -> lower P99 TTFT,
    then configuration order. None if no configuration met the SLOs at any rate."""
    ok = [e for e in entries if e.max_rate > 0]
    if not ok:
        return None
    return min(ok, key=lambda e: (-e.max_rate, e.at_max["p99_ttft_ms"], e.config.sort_key))

"""Capacity for fleets: which split of G GPUs sustains the highest rate, and the fewest GPUs
that sustain a target rate (`sim capacity --gpus G` / `--target-rate R`).

Both run on `capacity.capacity_search`, the one rate search:
- `split_ranking` orders the entries of a search over `fleets.gpu_splits(G)` x the grid
  by capacity (ties: lower P99 TTFT at capacity, then configuration order).
- `fewest_gpus` asks, for a GPU count G, whether some split of G meets the SLOs at the
  target rate R: a capacity search pinned to R (start = min = max = R, no verify probes)
  is exactly one probe of R under every seed, judged by the median-seed rule. G doubles
  from 1 until some split meets R, then bisects between the last count that missed and
  the first that met, so the answer G has been judged to meet R and G - 1 to miss it
  (G - 1 = 0 for one GPU). The bisection assumes more GPUs never hurt (a count above
  the answer is not judged again once a larger one met R); every count it judged is
  kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from chunksim.sweep.capacity import CapacityEntry, SearchParams


def split_ranking(entries: list[CapacityEntry]) -> list[CapacityEntry]:
    """Entries best first: highest capacity, then lower P99 TTFT at capacity, then
    configuration order; a configuration that never met the SLOs last."""
    def key(e: CapacityEntry):
        ttft = e.at_max["p99_ttft_ms"] if e.at_max else float("inf")
        return (-e.max_rate, ttft, e.config.sort_key)

    return sorted(entries, key=key)


def pinned(params: SearchParams, rate: float) -> SearchParams:
    """`params` narrowed to one probe at `rate` (met or missed, nothing else)."""
    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"--target-rate {rate}: must be a finite rate > 0, req/s")
    return dataclasses.replace(params, start=rate, min_rate=rate, max_rate=rate, verify=(),
                               service_rate=None, share=False)


@dataclass
class GpuTrial:
    """Every split of one GPU count judged at the target rate."""

    gpus: int
    entries: list[CapacityEntry]
    """One per configuration (split x policy x chunk); max_rate = target if it met it."""

    @property
    def meeting(self) -> list[CapacityEntry]:
        """The configurations that met the SLOs at the target, best first (lower P99 TTFT
        there, then configuration order)."""
        return split_ranking([e for e in self.entries if e.max_rate > 0])

    @property
    def met(self) -> bool:
        return bool(self.meeting)


@dataclass
class GpuSearch:
    """The fewest-GPU search's outcome."""

    target: float
    max_gpus: int
    trials: dict[int, GpuTrial] = field(default_factory=dict)
    """Every GPU count judged, by count."""

    @property
    def answer(self) -> int | None:
        """The fewest GPUs judged to meet the target (None: not even `max_gpus`)."""
        return min((g for g, t in self.trials.items() if t.met), default=None)


def fewest_gpus(target: float, max_gpus: int,
                judge_at: Callable[[int], list[CapacityEntry]]) -> GpuSearch:
    """Double G from 1 (capped at `max_gpus`) until `judge_at(G)` has a configuration
    meeting the target, then bisect down to the fewest. `judge_at(G)` returns the entries
    of G's configurations searched at the pinned target (`pinned`)."""
    if max_gpus < 1:
        raise ValueError(f"--max-gpus {max_gpus}: must be >= 1")
    out = GpuSearch(target, max_gpus)

    def met(g: int) -> bool:
        if g not in out.trials:
            out.trials[g] = GpuTrial(g, judge_at(g))
        return out.trials[g].met

    lo, g = 0, 1  # lo: the largest count known to miss (0: none)
    while not met(g):
        if g >= max_gpus:
            return out
        lo, g = g, min(2 * g, max_gpus)
    hi = g
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if met(mid):
            hi = mid
        else:
            lo = mid
    return out



def gpu_answer(target: float, max_gpus: int, specs, chunks: list[int], template,
               workload, run, slos: dict[str, float], params: SearchParams,
               seeds: list[int], runner, max_reject_pct: float = 0.0,
               progress=None) -> GpuSearch:
    """`sim capacity --target-rate` as one library call: the fewest GPUs (up to
    `max_gpus`) whose best split of `specs` x `chunks` (routers and link from `template`)
    meets `slos` at `target` req/s, each split probed at the target only."""
    from chunksim.sweep.capacity import capacity_search
    from chunksim.sweep.configs import make_configs
    from chunksim.sweep.fleets import gpu_splits

    at_target = pinned(params, target)
    return fewest_gpus(target, max_gpus, lambda g: capacity_search(
        make_configs(specs, chunks, gpu_splits(g, template)), workload, run, slos, runner,
        at_target, progress, seeds=seeds, max_reject_pct=max_reject_pct))

"""`sim capacity` (and `--gpus`) as one library call: every configuration's capacity
search over the seeds, and the verdict read at each capacity, from settings already
parsed. The command parses its flags, calls `capacity_answer`, and prints and writes what
comes back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from chunksim.progress import ProgressBar
from chunksim.sim.run import RunConfig
from chunksim.sweep.capacity import (
    CapacityEntry,
    SearchParams,
    capacity_search,
    recommend,
    window_note,
)
from chunksim.sweep.configs import Config
from chunksim.sweep.runner import Runner
from chunksim.sweep.verdict import Verdict, decide
from chunksim.workloads.options import WorkloadOptions


@dataclass
class CapacityAnswer:
    """What `sim capacity` reports."""

    entries: list[CapacityEntry]
    """Each configuration's search, in configuration order."""
    verdict: Verdict
    best: CapacityEntry | None
    """The verdict's recommendation (None: no configuration met the SLOs)."""
    window: str
    """How long each probe was, and whether that supports a P99."""
    splits: list[CapacityEntry] | None = None
    """With `rank_splits` (`--gpus`): the entries as splits of the GPUs, best first
    (`gpus.split_ranking`)."""


def capacity_answer(configs: list[Config], workload: WorkloadOptions, run: RunConfig,
                    slos: Mapping[str, float], slos_given: bool, params: SearchParams,
                    seeds: Sequence[int], runner: Runner, max_reject_pct: float,
                    progress: ProgressBar | None = None,
                    rank_splits: bool = False) -> CapacityAnswer:
    """Search every configuration's capacity on `runner` and decide the verdict, whose
    trade-offs are read at each configuration's capacity (its lowest probe if none);
    `rank_splits`: the configurations are splits of a GPU count (`--gpus`), ranked."""
    entries = capacity_search(configs, workload, run, slos, runner, params, progress,
                              seeds=seeds, max_reject_pct=max_reject_pct)
    top = recommend(entries)
    window = window_note(params, workload,
                         top.at_max["completed"] if top and top.at_max else None)
    runs = [(e.probe_at_max or e.probes[0]).runs for e in entries]
    verdict = decide(configs, runs, slos, slos_given, seeds,
                     [(e.max_rate, e.capacity_range) for e in entries], max_reject_pct)
    by_label = {e.config.label: e for e in entries}
    best = by_label.get(verdict.recommended.label) if verdict.recommended else None
    splits = None
    if rank_splits:
        from chunksim.sweep.gpus import split_ranking

        splits = split_ranking(entries)
    return CapacityAnswer(entries, verdict, best, window, splits)

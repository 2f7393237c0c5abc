"""A capacity probe: one rate of one configuration under every seed, and how its seeds'
summaries are judged (the median-seed rule, `judge`) and folded (`probe_summary`).

A seed's summary is a full run's, a run stopped once a bound certainly failed
(`sim.engine.settle`, `stopped`), or `DEFERRED`: not run, because the seeds run before it
already failed the probe (`probe_drive`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chunksim.sim.records.rejections import MAX_REJECT_PCT_DEFAULT, all_within, within
from chunksim.sweep.early import decide, failed_keys, rejected_too_many, stopped
from chunksim.sweep.seeds import fold
from chunksim.sweep.slos import meets


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
    seeds_met: list[bool | None] = field(default_factory=list)
    """Whether each seed alone met the SLOs (None: not run here, `DEFERRED`)."""
    judged: list[bool | None] | None = None
    """`seeds_met` as it stood when the verdict was known, before the runs that only fill
    in the figures of a passed probe (`probe_drive`); what later probes order their seeds
    by, so that the order does not depend on when those runs end."""


def judge(runs: Sequence[Mapping], slos: Mapping[str, float],
          max_reject_pct: float = MAX_REJECT_PCT_DEFAULT) -> bool:
    """The median-seed rule: every bound holds for the median over seeds of its metric
    (a seed that completed nothing counts as missing every bound); and no seed rejected
    more than `max_reject_pct` % of its requests (`sim.records.rejections`). Seeds that stopped
    early (`early.decide`) must leave it decided."""
    verdict = partial_verdict(runs, slos, max_reject_pct)
    if verdict is None:
        raise ValueError("judge: stopped seeds leave the verdict open (run them in full)")
    return verdict


def partial_verdict(runs: Sequence[Mapping], slos: Mapping[str, float],
                    max_reject_pct: float) -> bool | None:
    """`judge`'s verdict, None while stopped seeds leave it open. A seed that ran in full
    and rejected too much fails the probe; a stopped seed's rejections are unknown, so it
    is run in full whenever the verdict is not already a miss (`probe_drive`)."""
    if rejecting(runs, max_reject_pct):
        return False
    return decide(runs, slos)


DEFERRED = {"stopped": True, "deferred": True, "stopped_key": None, "completed": None}
"""A seed not run (yet) at a probe the others already failed (`probe_drive`): unknown on
every bound, like a stopped seed on the bounds it did not settle. Placed as a copy."""


def deferred(summary: Mapping) -> bool:
    return bool(summary.get("deferred"))


def seed_met(summary: Mapping, slos: Mapping[str, float], max_reject_pct: float
             ) -> bool | None:
    """Whether one seed met the SLOs (None: not run, `DEFERRED`)."""
    if deferred(summary):
        return None
    return meets(summary, slos) and within(summary, max_reject_pct)


def seeds_met(runs: Sequence[Mapping], slos: Mapping[str, float],
              max_reject_pct: float) -> list[bool | None]:
    """`seed_met` of each seed's summary, in seed order."""
    return [seed_met(s, slos, max_reject_pct) for s in runs]


def probe_summary(runs: Sequence[Mapping]) -> dict:
    """The per-seed summaries folded to their medians; a probe with a seed that stopped
    early reports its decision only (`stopped`, which seeds), never partial figures."""
    if not any(stopped(s) for s in runs):
        return fold(runs).median
    ran = [s for s in runs if not deferred(s)]
    out = {"stopped": True, "completed": None, "workload": ran[0].get("workload"),
           "stopped_seeds": [k for k, s in enumerate(runs) if stopped(s) and not deferred(s)],
           "stopped_keys": sorted(set().union(*(failed_keys(s) for s in ran)))}
    if len(ran) < len(runs):
        out["deferred_seeds"] = [k for k, s in enumerate(runs) if deferred(s)]
    return out


def rejecting(runs: Sequence[Mapping], max_reject_pct: float) -> bool:
    """Some seed of a probe rejected more than `max_reject_pct` % of its requests."""
    return rejected_too_many(runs) or not all_within(
        [s for s in runs if not stopped(s)], max_reject_pct)


@dataclass(frozen=True)
class SeedProbe:
    """One seed alone at one rate, below a search's probes."""

    rate: float
    seed: int
    """The seed's index in the search's seeds."""
    met: bool
    summary: dict

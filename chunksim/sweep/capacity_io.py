"""capacity.json and capacity_probes.csv: the search's outcome as data."""

from __future__ import annotations

import dataclasses

from chunksim.latency.profile import Profile
from chunksim.sim.metrics.metric_registry import view
from chunksim.sweep.capacity import CapacityEntry, SearchParams
from chunksim.sweep.compare import config_keys
from chunksim.sweep.probes import deferred
from chunksim.sweep.slos import violations
from chunksim.sweep.table import cell, columns_of, csv_text, flatten
from chunksim.sweep.verdict import Verdict
from chunksim.workloads.options import WorkloadOptions

_PROBE_KEYS = view("probe")  # `sim.metrics.metric_registry`


def _seed_run(s: dict, slos: dict[str, float], max_reject_pct: float | None) -> dict:
    """One seed's run: its SLO'd metrics, the bounds it missed, where it stopped."""
    return {**{m: s.get(m) for m in (*_PROBE_KEYS, *slos)},
            "violations": violations(s, slos, max_reject_pct),
            **({"stopped_at_s": s["stopped_at_s"]} if s.get("stopped") else {})}


def _probe(p, slos: dict[str, float], seeds: list[int],
           max_reject_pct: float | None = None) -> dict:
    return {
        "rate": p.rate, "met": p.met, "seeds_met": p.seeds_met,
        "median": {k: p.summary.get(k) for k in (*_PROBE_KEYS, *slos) if k in p.summary},
        "by_seed": [{"seed": k, "met": None, "not_run": True} if deferred(s) else
                    {"seed": k, "met": ok, **_seed_run(s, slos, max_reject_pct)}
                    for k, ok, s in zip(seeds, p.seeds_met, p.runs, strict=True)],
        **({"stopped": True} if p.summary.get("stopped") else {}),
    }


def entry_document(e: CapacityEntry, slos: dict[str, float], seeds: list[int],
                   max_reject_pct: float | None = None) -> dict:
    lo, hi = e.capacity_range
    return {
        **config_keys(e.config),
        "max_rate": e.max_rate, "capped": e.capped,
        # max_rate is offered: where requests were rejected at it, what was served
        "served_rate_at_max": e.served_at_max[0] if e.served_at_max else None,
        "rejected_pct_at_max": e.served_at_max[1] if e.served_at_max else 0.0,
        "max_rate_by_seed": dict(zip(map(str, seeds), e.seed_capacities(), strict=True)),
        "max_rate_range": [lo, hi],
        "non_monotone_rates": e.non_monotone,
        "rejected_below_rate": e.rejected_below,
        "first_miss_rate": min((p.rate for p in e.probes
                                if not p.met and p.rate > e.max_rate), default=None),
        "first_miss_violations": next((violations(p.summary, slos, max_reject_pct)
                                       for p in e.probes
                                       if not p.met and p.rate > e.max_rate), []),
        "summary_at_max_rate": e.at_max,
        "probes": [_probe(p, slos, seeds, max_reject_pct) for p in e.probes],
        "seed_probes": [{"rate": q.rate, "seed": seeds[q.seed], "met": q.met,
                         **_seed_run(q.summary, slos, max_reject_pct)}
                        for q in e.seed_probes],
    }


def verdict_document(v: Verdict) -> dict:
    """The verdict as data: recommendation, runner-up, whether the seeds separate them."""
    def who(c):
        if c is None:
            return None
        out = {"config": c.label, "meets_slos": c.meets, "seeds_met": c.seeds_met,
               "slo_headroom": c.headroom, "slo_headroom_range": list(c.headroom_range)}
        if c.capacity is not None:
            out["capacity"] = c.capacity
            out["capacity_range"] = list(c.score_range)
        if c.regret is not None:
            out["regret"] = c.regret
            out["regret_range"] = list(c.regret_range)
        for m in v.metrics:
            med, lo, hi = c.metric(m)
            out[m.label] = {"median": med, "min": lo, "max": hi}
        return out

    return {"slos_ms": v.slos, "slos_given": v.slos_given,
            "max_reject_pct": v.max_reject_pct, "seeds": v.seeds,
            "basis": v.basis, "decided_by": v.decided_by, "clear": v.clear,
            "recommended": who(v.recommended), "runner_up": who(v.runner_up),
            "tied": [c.label for c in v.tied]}


def capacity_document(entries: list[CapacityEntry], best: CapacityEntry | None,
                      slos: dict[str, float], params: SearchParams, profile: Profile,
                      workload: WorkloadOptions, seeds: list[int] | None = None,
                      verdict: Verdict | None = None, window: str | None = None) -> dict:
    """Everything `sim capacity` found, JSON-ready and deterministic."""
    seeds = seeds or [workload.seed]
    rec = None
    if best is not None:
        ties = [e.config.label for e in entries if e.max_rate == best.max_rate]
        rec = {**config_keys(best.config), "max_rate": best.max_rate,
               "p99_ttft_ms": best.at_max["p99_ttft_ms"],
               "reason": "highest max_rate" + (f"; tied with {', '.join(ties)} -> lowest "
                                               "P99 TTFT" if len(ties) > 1 else "")}
        if verdict is not None and verdict.recommended is not None:
            rec["reason"] = ("the verdict: highest capacity on the median seed"
                             + ("" if verdict.decided_by == "score" else
                                "; capacities overlap over seeds -> smallest trade-off regret"))
    return {
        "slos_ms": slos,
        "seeds": seeds,
        "rule": "a probe rate passes when every SLO holds for the median seed and no seed "
                "rejects more than max_reject_pct % of its requests",
        "window": window,
        "search": dataclasses.asdict(params),
        "workload_options": {k: cell(v) if not isinstance(v, (int, float, bool)) else v
                             for k, v in dataclasses.asdict(workload).items()
                             if v is not None},
        "profile": {"label": profile.label, "sha256": profile.sha256},
        "recommendation": rec,
        "verdict": verdict_document(verdict) if verdict is not None else None,
        "configurations": [entry_document(e, slos, seeds, verdict.max_reject_pct
                                          if verdict is not None else None)
                           for e in entries],
    }


def probes_csv(entries: list[CapacityEntry]) -> str:
    """Every probe and seed: configuration, rate, whether the median seed met the SLOs
    (`met`; empty for a seed run alone below the probes, `seed_probes`), whether this
    seed did (`seed_met`), then the seed's summary."""
    rows = []
    for e in entries:
        rows += [flatten(s, {**config_keys(e.config), "rate": p.rate, "met": p.met,
                             "seed_met": ok})
                 for p in e.probes
                 for s, ok in zip(p.runs or [p.summary], p.seeds_met or [p.met],
                                  strict=True)]
        rows += [flatten(q.summary, {**config_keys(e.config), "rate": q.rate, "met": None,
                                     "seed_met": q.met}) for q in e.seed_probes]
    cols = columns_of(rows) if rows else ["config", "policy", "chunk", "rate", "met", "seed_met"]
    return csv_text(rows, cols)

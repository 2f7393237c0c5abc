"""capacity.json and capacity_probes.csv: the search's outcome as data."""

from __future__ import annotations

import dataclasses

from chunksim.latency.profile import Profile
from chunksim.sweep.capacity import CapacityEntry, SearchParams
from chunksim.sweep.slos import violations
from chunksim.sweep.table import cell, csv_text, flatten
from chunksim.workloads.options import WorkloadOptions


def _entry(e: CapacityEntry, slos: dict[str, float]) -> dict:
    return {
        "config": e.config.label, "policy": e.config.policy.label, "chunk": e.config.chunk,
        "max_rate": e.max_rate, "capped": e.capped,
        "first_miss_rate": min((p.rate for p in e.probes if not p.met), default=None),
        "first_miss_violations": next((violations(p.summary, slos) for p in e.probes
                                       if not p.met), []),
        "summary_at_max_rate": e.at_max,
    }


def capacity_document(entries: list[CapacityEntry], best: CapacityEntry | None,
                      slos: dict[str, float], params: SearchParams, profile: Profile,
                      workload: WorkloadOptions) -> dict:
    """Everything `sim capacity` found, JSON-ready and deterministic."""
    rec = None
    if best is not None:
        ties = [e.config.label for e in entries if e.max_rate == best.max_rate]
        rec = {"config": best.config.label, "policy": best.config.policy.label,
               "chunk": best.config.chunk, "max_rate": best.max_rate,
               "p99_ttft_ms": best.at_max["p99_ttft_ms"],
               "reason": "highest max_rate" + (f"; tied with {', '.join(ties)} -> lowest "
                                               "P99 TTFT" if len(ties) > 1 else "")}
    return {
        "slos_ms": slos,
        "search": dataclasses.asdict(params),
        "workload_options": {k: cell(v) if not isinstance(v, (int, float, bool)) else v
                             for k, v in dataclasses.asdict(workload).items()
                             if v is not None},
        "profile": {"label": profile.label, "sha256": profile.sha256},
        "recommendation": rec,
        "configurations": [_entry(e, slos) for e in entries],
    }


def probes_csv(entries: list[CapacityEntry]) -> str:
    """Every probe: configuration, rate, whether it met the SLOs, then its summary."""
    rows = [flatten(p.summary, {"config": e.config.label, "policy": e.config.policy.label,
                                "chunk": e.config.chunk, "rate": p.rate, "met": p.met})
            for e in entries for p in e.probes]
    cols = list(rows[0]) if rows else ["config", "policy", "chunk", "rate", "met"]
    return csv_text(rows, cols)

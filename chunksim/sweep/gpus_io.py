"""splits.csv and gpus.json: `sim capacity --gpus` / `--target-rate` outcomes as data."""

from __future__ import annotations

from chunksim.sim.metrics.metric_registry import view
from chunksim.sweep.capacity import CapacityEntry
from chunksim.sweep.capacity_io import entry_document
from chunksim.sweep.compare import config_keys
from chunksim.sweep.gpus import GpuSearch
from chunksim.sweep.table import csv_text

_METRICS = view("splits")  # `sim.metrics.metric_registry`
SPLIT_COLUMNS = ("rank", "config", "policy", "chunk", "fleet_layout", "gpus", "max_rate",
                 "capped", "max_rate_per_gpu", *_METRICS, "served_rate", "rejected_pct")
"""max_rate is the rate offered; served_rate (requests completed per second on the median
seed) and rejected_pct (worst seed) are filled where requests were rejected at it."""

def split_rows(ranked: list[CapacityEntry], devices: int = 1) -> list[dict]:
    """One row per configuration, best first (`gpus.split_ranking`): its capacity, that
    per GPU, and the median-seed metrics at the capacity (empty if it never met the
    SLOs). `devices`: GPUs per engine (`Profile.devices`)."""
    rows = []
    for k, e in enumerate(ranked, 1):
        s = e.at_max or {}
        gpus = devices * (e.config.fleet.gpus if e.config.fleet is not None else 1)
        rows.append({"rank": k, **config_keys(e.config), "gpus": gpus,
                     "max_rate": e.max_rate, "capped": e.capped,
                     "max_rate_per_gpu": e.max_rate / gpus,
                     **{m: s.get(m) for m in _METRICS},
                     "served_rate": e.served_at_max[0] if e.served_at_max else None,
                     "rejected_pct": e.served_at_max[1] if e.served_at_max else 0.0})
    return rows


def splits_csv(ranked: list[CapacityEntry], devices: int = 1) -> str:
    rows = [{k: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))
             for k, v in r.items()} for r in split_rows(ranked, devices)]
    return csv_text(rows, list(SPLIT_COLUMNS))


def gpu_search_document(search: GpuSearch, slos: dict[str, float], seeds: list[int]) -> dict:
    """The fewest-GPU search: target, answer, and every GPU count judged with each of its
    configurations at the target (met or not, the median-seed metrics, each seed's
    verdict)."""
    best = None
    if search.answer is not None:
        top = search.trials[search.answer].meeting[0]
        best = {**config_keys(top.config), "gpus": search.answer,
                "summary_at_target": top.at_max}
    return {
        "target_rate": search.target, "max_gpus": search.max_gpus, "slos_ms": slos,
        "seeds": seeds,
        "rule": ("a GPU count meets the target when some split of it meets every SLO at the "
                 "target rate on the median seed"),
        "fewest_gpus": search.answer,
        "best_at_fewest": best,
        "trials": [{"gpus": g, "met": t.met,
                    "meeting": [e.config.label for e in t.meeting],
                    "configurations": [entry_document(e, slos, seeds) for e in t.entries]}
                   for g, t in sorted(search.trials.items())],
    }

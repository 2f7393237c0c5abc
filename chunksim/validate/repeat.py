"""How much real execution differs from itself: the noise floor under the simulator's error.

A deterministic simulator predicts one figure per metric; live runs of the very same
workload (same arrivals, lengths, policy, code) on the same machine give several. Their
spread bounds what any prediction can be judged to: when two live runs differ by 20 %, one
of them is at least ~10 % off any single prediction. `sim validate --live-runs N` measures
it in one command; `benchmarks/fidelity_repeatability.py` reads it off recorded suite runs.

spread_pct = (max / min - 1) * 100 over the runs' measured values; pairwise_pct = median
of |a - b| / b * 100 over ordered pairs of runs (the typical difference between two runs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from chunksim.validate.compare import TARGET_KEYS, metric_keys, rel_error_pct


def spread_of(values: Sequence[float]) -> dict:
    """{spread_pct, pairwise_pct} of one metric over runs (None where undefined: fewer
    than two runs, or a value that is not positive and finite)."""
    v = [float(x) for x in values]
    if len(v) < 2 or not all(math.isfinite(x) and x > 0 for x in v):
        return {"spread_pct": None, "pairwise_pct": None}
    pairs = [abs(a - b) / b * 100.0 for a, b in itertools.permutations(v, 2)]
    return {"spread_pct": (max(v) / min(v) - 1.0) * 100.0,
            "pairwise_pct": float(np.median(pairs))}


def summarize_spreads(metrics: Mapping[str, Mapping], keys: Sequence[str] = TARGET_KEYS,
                      ) -> dict:
    """Median and worst `spread_pct` over `keys` (those with one), and its metric."""
    have = [(k, metrics[k]["spread_pct"]) for k in keys
            if metrics[k]["spread_pct"] is not None]
    if not have:
        return {"median_spread_pct": None, "worst_spread_pct": None, "worst_spread_metric": None}
    worst = max(have, key=lambda kv: kv[1])
    return {"median_spread_pct": float(np.median([s for _, s in have])),
            "worst_spread_pct": worst[1], "worst_spread_metric": worst[0]}


def live_repeatability(live_summaries: Sequence[Mapping], sim_summary: Mapping) -> dict:
    """validation.json's `live_repeatability` for live runs of one workload (the first is
    the one the rest of the report describes) against the one simulation: per metric the
    measured values, their spread, the simulator's error against each run and whether
    the prediction lies within the live runs' range; then a summary over the targets."""
    metrics = {}
    for key in metric_keys():
        measured = [float(s[key]) for s in live_summaries]
        predicted = float(sim_summary[key])
        metrics[key] = {
            "measured": measured,
            **spread_of(measured),
            "error_pct_runs": [rel_error_pct(predicted, m) for m in measured],
            "predicted_in_range": bool(min(measured) <= predicted <= max(measured)),
        }
    inside = [k for k in TARGET_KEYS if metrics[k]["predicted_in_range"]]
    return {"runs": len(live_summaries), "metrics": metrics, **summarize_spreads(metrics),
            "targets_in_range": inside}

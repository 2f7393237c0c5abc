"""Definitions printed in every report: each metric's (`sim.metrics.metric_registry`, as `vllm
bench serve` defines them), then the answers'."""

from __future__ import annotations

from chunksim.sim.metrics.metric_registry import metric_definitions

DEFINITIONS: tuple[tuple[str, str], ...] = metric_definitions() + (
    ("capacity", "the highest probed request rate at which every --slo bound holds for the "
     "median seed (per bound, the median over seeds of its metric), found by doubling then "
     "geometric bisection on the rate, then probing above the bracket; each probe spans at "
     "least 1,000 requests unless --duration / --num-requests say otherwise."),
    ("median [min–max]", "over the seeds (--seeds, default 3): the median run's value and "
     "the range of all of them. A metric marked † varies more from seed to seed than between "
     "configurations."),
    ("verdict", "feasible = meets every SLO on the median seed; ranked by capacity when it was "
     "searched, else every-seed before median-seed feasibility; configurations the SLOs "
     "cannot separate are decided by the smallest regret on worst stall and the longest "
     "requests' TTFT (the largest factor by which a configuration is worse than the best "
     "on either); overlapping regret (or capacity) ranges over seeds = no clear winner."),
    ("SLO headroom", "the largest fraction of any SLO bound a configuration uses (1 = at a "
     "bound)."),
)

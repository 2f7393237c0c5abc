"""The verdict: which configuration to run, the runner-up, and whether the seeds can tell
them apart. A pure function of per-seed summaries (and capacities, when searched).

The rule, in order:
1. Feasible = meets every SLO on the median seed (with a capacity search: capacity > 0).
2. Rank the feasible by the primary score: the capacity on the median seed (higher is
   better) when it was searched; else, at the one load compared, whether the SLOs hold on
   every seed or only on the median one. An SLO is a pass/fail bound: at a load every
   configuration meets, how far below the bound each one sits (its headroom, shown on the
   page) is mostly set by a handful of tail requests and reorders from seed to seed, so it
   is not used to rank. More load (the capacity search) is what separates them.
3. Tied = the feasible configurations whose primary range over seeds overlaps the best
   one's. If that is the best alone, it is the recommendation, separated on every seed.
4. Otherwise the SLOs cannot separate the tied ones, so the choice rests on the
   trade-off metrics that are stable across seeds: the worst decode stall and the TTFT of
   the longest requests (their class, when the workload has classes). Among the tied, the
   recommendation has the smallest regret: the largest factor by which it is worse than
   the tied group's best on any trade-off metric, per seed. When the recommendation's and
   the runner-up's regret ranges over seeds overlap, there is no clear winner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chunksim.sim.metrics.metric_registry import shown
from chunksim.sim.records.rejections import MAX_REJECT_PCT_DEFAULT, within
from chunksim.sweep.configs import Config
from chunksim.sweep.seeds import SeedStats, fold, median_value, overlap


@dataclass(frozen=True)
class Metric:
    """A summary value by path (("max_decode_stall_ms",) or ("by_class", "long",
    "p99_ttft_ms")), with a human label."""

    path: tuple[str, ...]
    label: str

    def value(self, summary: Mapping) -> float:
        v: object = summary
        for p in self.path:
            if not isinstance(v, Mapping) or p not in v:
                return math.nan
            v = v[p]
        return float(v) if isinstance(v, (int, float)) and v is not None else math.nan


def long_class(summary: Mapping) -> str | None:
    """The request class with the longest mean prompt (None without two or more classes)."""
    classes = summary.get("by_class") or {}
    if len(classes) < 2:
        return None

    def mean_prompt(c: str) -> float:
        s = classes[c]
        return s.get("total_input_tokens", 0) / max(1, s.get("completed", 0))

    return max(sorted(classes), key=mean_prompt)


def tradeoff_metrics(summary: Mapping) -> list[Metric]:
    """The stable trade-off: worst stall, and the longest requests' TTFT."""
    stall, p99_ttft = shown("tradeoff")  # `sim.metrics.metric_registry`
    cls = long_class(summary)
    if cls is None:
        ttft = Metric((p99_ttft.key,), p99_ttft.label)
    else:
        n = (summary.get("by_class") or {}).get(cls, {}).get("completed", 0)
        label = (f"the {cls} request's TTFT" if n == 1
                 else f"{cls} requests' {p99_ttft.label}")
        ttft = Metric(("by_class", cls, p99_ttft.key), label)
    return [Metric((stall.key,), stall.label), ttft]


def headroom(summary: Mapping, slos: Mapping[str, float]) -> float:
    """The largest fraction of any SLO bound used (inf if the run completed nothing)."""
    return max(median_value([summary], k) / b for k, b in slos.items())


@dataclass
class Candidate:
    """One configuration as the verdict sees it."""

    config: Config
    runs: list[dict]
    """Per-seed summaries the trade-offs are read from."""
    stats: SeedStats
    meets: bool
    """Meets every SLO on the median seed."""
    seeds_met: int
    """Seeds that meet every SLO on their own."""
    score: float
    """The primary score on the median seed: the capacity, or (no capacity search) 0 when
    every seed meets the SLOs, 1 when only the median seed does, 2 otherwise."""
    score_range: tuple[float, float]
    headroom: float
    """The largest fraction of any SLO bound used, on the median seed."""
    headroom_range: tuple[float, float]
    capacity: float | None = None
    regret: float | None = None
    regret_range: tuple[float, float] | None = None

    @property
    def label(self) -> str:
        return self.config.label

    def metric(self, m: Metric) -> tuple[float, float, float]:
        """(median, min, max) over seeds."""
        import numpy as np

        v = [m.value(s) for s in self.runs]
        v = [x for x in v if math.isfinite(x)] or [math.nan]
        return float(np.median(v)), min(v), max(v)


@dataclass
class Verdict:
    slos: dict[str, float]
    slos_given: bool
    """False: the documented defaults (`slos.DEFAULT_SLOS`) were used."""
    seeds: list[int]
    basis: str
    """"capacity" or "headroom"."""
    candidates: list[Candidate]
    """Every configuration, in configuration order."""
    ranked: list[Candidate]
    """The feasible ones, best first (tie group by regret, then the rest by score)."""
    tied: list[Candidate]
    """The feasible ones the primary score cannot separate from the best (incl. it)."""
    metrics: list[Metric] = field(default_factory=list)
    max_reject_pct: float = MAX_REJECT_PCT_DEFAULT
    """A configuration whose run rejects more than this % of requests on a seed fails."""

    @property
    def recommended(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def runner_up(self) -> Candidate | None:
        return self.ranked[1] if len(self.ranked) > 1 else None

    @property
    def clear(self) -> bool:
        """Whether the recommendation beats the runner-up on every seed."""
        a, b = self.recommended, self.runner_up
        if a is None or b is None:
            return a is not None
        if len(self.tied) == 1 or b not in self.tied:
            return not overlap(a.score_range, b.score_range)
        return not overlap(a.regret_range, b.regret_range)

    @property
    def decided_by(self) -> str:
        """"score" (the SLO basis separated the winner) or "tradeoff" (regret)."""
        return "score" if len(self.tied) <= 1 else "tradeoff"


def decide(configs: Sequence[Config], runs: Sequence[Sequence[dict]],
           slos: Mapping[str, float], slos_given: bool, seeds: Sequence[int],
           capacities: Sequence[tuple[float, tuple[float, float]]] | None = None,
           max_reject_pct: float = MAX_REJECT_PCT_DEFAULT) -> Verdict:
    """The verdict over `configs`, each with its per-seed summaries `runs[i]` (at the
    compared load; with a capacity search, `capacities[i]` = (capacity on the median seed,
    (min, max) over seeds)). A seed that rejects more than `max_reject_pct` % of its
    requests misses the SLOs, whatever its latencies."""
    cands = []
    for i, (cfg, rs) in enumerate(zip(configs, runs, strict=True)):
        st = fold(rs)
        per_seed_h = [headroom(s, slos) for s in rs]
        served = [within(s, max_reject_pct) for s in rs]
        med_ok = all(median_value(rs, k) <= b for k, b in slos.items()) and all(served)
        seeds_met = sum(h <= 1.0 and ok for h, ok in zip(per_seed_h, served, strict=True))
        h = max(median_value(rs, k) / b for k, b in slos.items())
        h_rng = (min(per_seed_h), max(per_seed_h))
        if capacities is None:
            cls = 0.0 if seeds_met == len(rs) else (1.0 if med_ok else 2.0)
            cands.append(Candidate(cfg, list(rs), st, med_ok, seeds_met, cls, (cls, cls),
                                   h, h_rng))
        else:
            cap, rng = capacities[i]
            cands.append(Candidate(cfg, list(rs), st, cap > 0, seeds_met, cap, rng, h, h_rng,
                                   capacity=cap))
    by_cap = capacities is not None
    feasible = [c for c in cands if c.meets]
    feasible.sort(key=lambda c: ((-c.score if by_cap else c.score), c.config.sort_key))
    metrics = tradeoff_metrics(runs[0][0]) if runs and runs[0] else []
    tied: list[Candidate] = []
    if feasible:
        best = feasible[0]
        tied = [c for c in feasible if overlap(c.score_range, best.score_range)]
        if len(tied) > 1:
            _regrets(tied, metrics)
            tied.sort(key=lambda c: (c.regret, c.config.sort_key))
        rest = [c for c in feasible if c not in tied]
        feasible = tied + rest
    return Verdict(dict(slos), slos_given, list(seeds), "capacity" if by_cap else "headroom",
                   cands, feasible, tied, metrics, max_reject_pct)


def _regrets(group: list[Candidate], metrics: list[Metric]) -> None:
    """Per seed: the largest factor by which each candidate is worse than the group's best
    on any metric; stored as the median and range over seeds."""
    import numpy as np

    n = min(len(c.runs) for c in group)
    per: dict[int, list[float]] = {id(c): [] for c in group}
    for k in range(n):
        for c in group:
            worst = 1.0
            for m in metrics:
                vals = [m.value(o.runs[k]) for o in group]
                vals = [v for v in vals if math.isfinite(v) and v > 0]
                v = m.value(c.runs[k])
                if vals and math.isfinite(v):
                    worst = max(worst, v / min(vals))
            per[id(c)].append(worst)
    for c in group:
        r = per[id(c)]
        c.regret = float(np.median(r))
        c.regret_range = (min(r), max(r))


def swamped(stats: Sequence[SeedStats], key: str) -> bool:
    """Whether the seed-to-seed spread swamps the differences between configurations on
    `key`: the ranges of more than half the pairs of configurations overlap."""
    rng = [(s.lo.get(key), s.hi.get(key)) for s in stats]
    rng = [(a, b) for a, b in rng if isinstance(a, (int, float)) and isinstance(b, (int, float))]
    if len(rng) < 2 or all(a == b for a, b in rng):
        return False
    pairs = [(x, y) for i, x in enumerate(rng) for y in rng[i + 1:]]
    return sum(overlap(x, y) for x, y in pairs) > len(pairs) / 2

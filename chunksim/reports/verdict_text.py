"""The verdict in words: the box at the top of every compare and capacity page, and the
console's closing lines. Numbers are the median over seeds with [min–max]."""

from __future__ import annotations

from chunksim.reports.capacity_plot import metric_name
from chunksim.sim.records.rejections import all_within, reject_pct, rejection_text, worst
from chunksim.sweep.verdict import Candidate, Verdict


def num(x: float) -> str:
    """A latency or rate, to the precision that matters."""
    if x != x:  # NaN
        return "–"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def ranged(med: float, lo: float, hi: float, unit: str = "", n: int = 2) -> str:
    """`518 ms [496–530]`, or `518 ms` when the seeds agree (or there is one)."""
    u = f" {unit}" if unit else ""
    if n < 2 or num(lo) == num(hi):
        return f"{num(med)}{u}"
    return f"{num(med)}{u} [{num(lo)}–{num(hi)}]"


def slo_text(v: Verdict) -> str:
    parts = ", ".join(f"{metric_name(k)} ≤ {b:g} ms" for k, b in v.slos.items())
    return parts + ("" if v.slos_given else " (defaults; set yours with --slo)")


def seeds_text(v: Verdict, trace: bool = False) -> str:
    n = len(v.seeds)
    if n > 1:
        return (f"{n} seeds ({', '.join(map(str, v.seeds))}); every number is the median "
                "over seeds with [min–max]")
    if trace:
        return ("one seed: a trace replay is one fixed sequence of requests, so one seed is "
                "the whole sample (the seed only drives jitter)")
    return ("one seed: differences smaller than the seed-to-seed spread cannot be told "
            "apart; a long run makes one seed enough, otherwise use --seeds 0,1,2")


def _metric(c: Candidate, m, n: int, unit: str = "ms") -> str:
    med, lo, hi = c.metric(m)
    return ranged(med, lo, hi, unit, n)


def _capacity(c: Candidate, n: int) -> str:
    """`362 req/s`, or where requests were rejected at it `740 req/s offered (88 req/s
    served, 87 % rejected)`: a capacity is what is served."""
    lo, hi = c.score_range
    return ranged(c.capacity or 0.0, lo, hi, "req/s", n) + served_note(c.capacity, c.runs)


def served_note(offered: float | None, runs) -> str:
    """` offered (88 req/s served, 87 % rejected)` when a seed of `runs` rejected requests
    at the rate `offered`, else ``."""
    import numpy as np

    w = worst(runs)
    if not offered or w is None or not w.get("rejected"):
        return ""
    served = float(np.median([float(s.get("request_throughput") or 0.0) for s in runs]))
    return f" offered ({num(served)} req/s served, {reject_pct(w):.3g} % rejected)"


def _profile_line(c: Candidate, v: Verdict, n: int) -> str:
    parts = [f"{m.label} {_metric(c, m, n)}" for m in v.metrics]
    if c.capacity is not None:
        parts.insert(0, f"capacity {_capacity(c, n)}")
    return ", ".join(parts)


def _best_on(group: list[Candidate], m) -> Candidate:
    return min(group, key=lambda c: (_med(c, m), c.config.sort_key))


def _med(c: Candidate, m) -> float:
    """The median over seeds of `m` (+inf when there is none: it is best on nothing)."""
    x = c.metric(m)[0]
    return x if x == x else float("inf")


def _is_best(c: Candidate, group: list[Candidate], m) -> bool:
    """Whether no configuration of `group` has a lower median on `m` than `c` (a tie is
    best too), `c` having a value."""
    a = _med(c, m)
    return a != float("inf") and all(a <= _med(o, m) for o in group)


def beaten(c: Candidate, m, candidates: list[Candidate]) -> bool:
    """Whether another configuration of the table has a lower median on `m` than `c`."""
    a = _med(c, m)
    return any(o is not c and _med(o, m) < a for o in candidates)


def _among(v: Verdict, group: list[Candidate]) -> str:
    return ("among the tied configurations" if len(v.tied) > 1 and group is v.tied
            else "among the configurations meeting the SLOs")


def _best_text(c: Candidate, ms: list, group: list[Candidate], v: Verdict,
               values: bool = False) -> str:
    """`best on worst stall (7.2 ms) and on P99 TTFT (215 ms)`, with `among …` when another
    configuration of the table beats `c` on one of them."""
    n = len(v.seeds)
    parts = [f"{m.label}" + (f" ({_metric(c, m, n)})" if values else "") for m in ms]
    text = "best on " + " and on ".join(parts)
    if any(beaten(c, m, v.candidates) for m in ms):
        text += f" {_among(v, group)}"
    return text


def _costs(c: Candidate, group: list[Candidate], v: Verdict) -> list[str]:
    """What `c` costs against the group's best on each trade-off metric it is not best
    on, and in capacity against the group's highest."""
    out = []
    for m in v.metrics:
        best = _best_on(group, m)
        if _is_best(c, group, m):
            continue
        a, b = c.metric(m)[0], best.metric(m)[0]
        if b > 0 and a == a:
            out.append(f"{m.label} +{(a / b - 1) * 100:.0f} % vs {best.label}")
    if c.capacity is not None:
        top = max(group, key=lambda x: x.capacity or 0.0)
        if top is not c and top.capacity and (c.capacity or 0.0) < top.capacity:
            out.append(f"capacity {((c.capacity or 0.0) / top.capacity - 1) * 100:+.0f} % vs "
                       f"{top.label}")
    return out


def _give_up(c: Candidate, group: list[Candidate], v: Verdict) -> str:
    """What `c` is best on, and what it costs against the group's best elsewhere."""
    bests = [m for m in v.metrics if _is_best(c, group, m)]
    parts = ([_best_text(c, bests, group, v)] if bests else []) + _costs(c, group, v)
    return "; ".join(parts)


def _extremes(group: list[Candidate], v: Verdict, skip: tuple) -> list[str]:
    """One clause per configuration outside `skip` that is best on a trade-off metric:
    what it is best on, and what it costs (or why it ranks lower)."""
    n = len(v.seeds)
    out = []
    seen: list[Candidate] = []
    for m in v.metrics:
        b = _best_on(group, m)
        if b in skip or b in seen:
            continue
        seen.append(b)
        bests = [x for x in v.metrics if _is_best(b, group, x)]
        costs = _costs(b, group, v)
        if not costs:
            rec = v.recommended
            costs = ([f"meets the SLOs on {b.seeds_met} of {n} seeds"] if b.seeds_met < n
                     else [f"ranks after {rec.label}"])
        out.append(f"{b.label} is {_best_text(b, bests, group, v, values=True)} but "
                   + "; ".join(costs))
    return out


def _rejects(c: Candidate, v: Verdict) -> str:
    """` (148 of 200 requests rejected ...)` when rejections fail `c`, else ``."""
    s = worst(c.runs)
    if s is None or all_within(c.runs, v.max_reject_pct):
        return ""
    return (f" ({rejection_text(s)}; more than --max-reject-pct {v.max_reject_pct:g} % fails "
            "the SLOs)")


def verdict_lines(v: Verdict, capacity_searched: bool, trace: bool = False) -> list[str]:
    """The box's lines (Markdown inline: **bold**, `code`)."""
    n = len(v.seeds)
    rec, ru = v.recommended, v.runner_up
    lines: list[str] = []
    if rec is None:
        lines += _none_meets(v, capacity_searched, trace)
        return lines
    group = v.tied if len(v.tied) > 1 else [c for c in v.ranked]
    if v.decided_by == "score":
        if v.basis == "capacity":
            why = (f"the highest capacity under the SLOs, {_capacity(rec, n)}"
                   + (", above every other configuration on every seed"
                      if v.clear and n > 1 and ru is not None else ""))
        else:
            why = ("the only configuration compared" if len(v.candidates) == 1 else
                   "the only configuration that meets every SLO on every seed"
                   if rec.seeds_met == n else "the only configuration that meets the SLOs")
        lines.append(f"**Recommended: {rec.label}** — {why}. {_profile_line(rec, v, n)}.")
    else:
        k = len(v.tied)
        if v.basis == "capacity":
            top = max(v.tied, key=lambda c: c.capacity or 0.0)
            tie = (f"{k} configurations' capacities overlap over the seeds (highest: "
                   f"{top.label}, {_capacity(top, n)})")
        else:
            every = all(c.seeds_met == n for c in v.tied)
            tie = (f"{k} configurations meet every SLO" + (" on every seed" if every else "")
                   + ", so the SLOs do not separate them at this load")
        names = " and ".join(m.label for m in v.metrics)
        lines.append(
            f"**Recommended: {rec.label}** — {tie}; the choice rests on what holds across "
            f"seeds: {names}. {rec.label} is within ×{rec.regret:.2f} of the best on each: "
            f"{_profile_line(rec, v, n)}.")
    if ru is not None:
        lines.append(f"**Runner-up: {ru.label}** — {_profile_line(ru, v, n)}.")
        lines.append(f"**What you give up.** {rec.label}: {_give_up(rec, group, v) or '–'}. "
                     f"{ru.label}: {_give_up(ru, group, v) or '–'}.")
        extremes = _extremes(group, v, (rec, ru))
        if extremes:
            lines.append("Extremes: " + "; ".join(extremes) + ".")
        if v.clear:
            if n > 1:
                lines.append(f"{rec.label} beats {ru.label} on each of the {n} seeds.")
        else:
            what = "capacity" if v.decided_by == "score" else "trade-off regret"
            a = rec.score_range if v.decided_by == "score" else rec.regret_range
            b = ru.score_range if v.decided_by == "score" else ru.regret_range
            more = ("a longer probe window (--duration) or more seeds (--seeds)"
                    if capacity_searched else
                    "more load (add --slo to run the capacity search, or raise --rate), a "
                    "longer run (--duration), or more seeds (--seeds)")
            lines.append(
                f"**No clear winner between {rec.label} and {ru.label}**: their {what} "
                f"ranges over the {n} seeds overlap ([{num(a[0])}–{num(a[1])}] vs "
                f"[{num(b[0])}–{num(b[1])}]). What would separate them: {more}.")
    infeasible = [c.label + _rejects(c, v) for c in v.candidates if not c.meets]
    if infeasible:
        lines.append("Missing the SLOs on the median seed: " + ", ".join(infeasible) + ".")
    lines.append(f"SLOs: {slo_text(v)}. Seeds: {seeds_text(v, trace)}.")
    return lines


def _none_meets(v: Verdict, capacity_searched: bool, trace: bool) -> list[str]:
    """The verdict when no configuration meets the SLOs, said plainly: every one rejects
    too many requests, or the one closest to its bounds (among those that serve) and how
    far off it is."""
    from chunksim.sweep.seeds import median_value

    where = " at any probed rate" if capacity_searched else " at this load"
    rejecting = [c for c in v.candidates if _rejects(c, v)]
    serving = [c for c in v.candidates if c not in rejecting]
    lines = []
    if not serving:
        every = "every configuration" if len(v.candidates) > 1 else v.candidates[0].label
        shown = sorted(rejecting, key=lambda c: -reject_pct(worst(c.runs)))[:3]
        lines.append(
            f"**No configuration meets the SLOs**{where}: {every} rejects more than "
            f"--max-reject-pct {v.max_reject_pct:g} % of its requests ("
            + "; ".join(f"{c.label}: {rejection_text(worst(c.runs))}" for c in shown)
            + (f"; and {len(rejecting) - len(shown)} more" if len(rejecting) > len(shown)
               else "") + ").")
        lines.append("What to do: serve those requests (raise --max-model-len or the token "
                     "budget, --chunks), or accept them as errors with --max-reject-pct.")
    else:
        closest = min(serving, key=lambda c: (c.headroom, c.config.sort_key))
        h = closest.headroom
        if h != h or h == float("inf"):
            how = "it completed no request"
        else:
            key = max(v.slos, key=lambda k: median_value(closest.runs, k) / v.slos[k])
            how = (f"{metric_name(key)} {num(median_value(closest.runs, key))} ms against "
                   f"its bound of {v.slos[key]:g} ms ({h:.2f}×)" if h > 1 else
                   "within its bounds on the median seed, not on enough seeds")
        lines.append(f"**No configuration meets the SLOs** on the median seed{where}. "
                     f"Closest: **{closest.label}**, {how}.")
        if rejecting:
            lines.append("Rejecting more than --max-reject-pct "
                         f"{v.max_reject_pct:g} %: " + ", ".join(
                             c.label + _rejects(c, v) for c in rejecting) + ".")
        lines.append("What to do: lower --rate, relax --slo, or run `sim capacity` to "
                     "find the rate each configuration sustains.")
    lines.append(f"SLOs: {slo_text(v)}. Seeds: {seeds_text(v, trace)}.")
    return lines

"""Metrics as `vllm bench serve` defines them, computed from a run's records only.

TTFT = arrival -> first token; E2EL = arrival -> last token; TPOT per request =
(E2EL - TTFT) / (output_tokens - 1) over requests with > 1 output token; ITL = every gap
between consecutive tokens of a request, all requests pooled. Percentiles use numpy's
default (linear) method, as vLLM does. Seconds inside, `_ms` keys at the edge.

With speculative decoding a step emits its accepted drafts and one sampled token to a
request at once: one streamed chunk. ITL then counts one gap per chunk (the gap between
chunks), as `vllm bench serve` appends one ITL entry per chunk it receives, while TPOT
still divides by tokens; the engine records gaps so (`EngineCore.end_step`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from chunksim.sim.metrics.metric_registry import (
    GOODPUT_FAMILIES,
    PERCENTILES,
    SUMMARY,
    Family,
    parse_bounds,
)
from chunksim.sim.records.quantiles import Samples
from chunksim.sim.records.records import StepTotals

SLO_METRICS = GOODPUT_FAMILIES
"""Goodput SLOs are per request: ttft, tpot, e2el, and itl (the request's worst gap)."""


def parse_slos(items: list[str] | None, flag: str = "--goodput",
               prefix: str = "") -> dict[str, float]:
    """`["ttft=500", "tpot:50"]` (ms) -> {"ttft": 0.5, "tpot": 0.05} (seconds); errors
    name `flag` and show each value after `prefix` (`--class-slo` passes its CLASS:).
    The spelling is `--slo`'s (`metric_registry.parse_bounds`), over the per-request
    families."""
    ms, _ = parse_bounds(
        items, flag, SLO_METRICS,
        f"METRIC=MS with METRIC one of {', '.join(SLO_METRICS)} (e.g. {flag} {prefix}ttft=500)",
        prefix, normalize=lambda k: k.removesuffix("_ms"), what="the SLO")
    return {k: v / 1000.0 for k, v in ms.items()}


def parse_class_slos(items: list[str] | None) -> dict[str, dict[str, float]]:
    """`["interactive:ttft=200", "batch:e2el=60000"]` -> {"interactive": {"ttft": 0.2}, ...}."""
    out: dict[str, dict[str, float]] = {}
    for item in items or []:
        cls, sep, rest = item.partition(":")
        if not sep or not cls or not rest:
            raise ValueError(
                f"--class-slo {item!r}: use CLASS:METRIC=MS, e.g. --class-slo interactive:ttft=200")
        out.setdefault(cls, {}).update(parse_slos([rest], "--class-slo", f"{cls}:"))
    return out


def _stats(name: str, samples: Samples, none: bool = False) -> dict[str, float | None]:
    """Mean, median, std and percentiles in ms (all None when `none`: no request
    completed, so there is no latency to report). Exact samples give numpy's figures; a
    streamed run's histogram gives percentiles within its REL_ERROR and exact moments."""
    if none:
        keys = ["mean", "median", "std", *(f"p{p}" for p in PERCENTILES)]
        return {f"{k}_{name}_ms": None for k in keys}
    if not samples.exact:
        if not len(samples):
            return _stats(name, Samples(np.zeros(0)))
        h = samples.hist
        pct = h.percentile([50, *PERCENTILES]) * 1000.0
        out = {
            f"mean_{name}_ms": h.mean * 1000.0,
            f"median_{name}_ms": float(pct[0]),
            f"std_{name}_ms": h.std * 1000.0,
        }
        for p, v in zip(PERCENTILES, pct[1:], strict=True):
            out[f"p{p}_{name}_ms"] = float(v)
        return out
    # sorted first: the moments then sum the same values in the same order however the
    # run pooled them (a bulk stretch pools its gaps otherwise than stepping does), and
    # the percentiles read a sorted array faster than they partition an unsorted one.
    # One copy in all (a run's token gaps number millions): scaled in place, and the
    # order statistics taken last, partitioning it in place (they do not depend on the
    # order, the moments do)
    ms = np.sort(samples.values)
    ms *= 1000.0
    if len(ms) == 0:
        ms = np.zeros(1)
    mean, std = float(np.mean(ms)), float(np.std(ms))
    median = float(np.median(ms, overwrite_input=True))
    out = {f"mean_{name}_ms": mean, f"median_{name}_ms": median, f"std_{name}_ms": std}
    pct = np.percentile(ms, PERCENTILES, overwrite_input=True)
    for p, v in zip(PERCENTILES, pct, strict=True):
        out[f"p{p}_{name}_ms"] = float(v)
    return out


def step_facts(steps: StepTotals) -> tuple[int, float, int, int]:
    """(steps, busy seconds, extrapolated steps, peak KV blocks) of every step of a run."""
    return steps.n, steps.busy_s, steps.extrapolated, steps.peak_kv_blocks


_COLUMNS = ("arrival_s", "prompt_tokens", "first_scheduled_s", "first_token_s",
            "finish_s", "generated_tokens", "preemptions", "recomputed_tokens", "max_itl_s",
            "rejected")
"""The request columns a summary reads (`EngineCore.request_columns`)."""


def _columns(requests, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The summary's columns of `requests` (a DataFrame, or its columns by name) as
    arrays."""
    return {c: np.asarray(requests[c]) for c in (*_COLUMNS, *extra)}


def _rows(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {c: v[mask] for c, v in cols.items()}


def _completed(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows of requests that were not rejected (the columns themselves when none
    was: no copy of a million-row table)."""
    rejected = cols["rejected"]
    return _rows(cols, ~rejected) if rejected.any() else cols


def per_request(requests) -> dict[str, np.ndarray]:
    """TTFT, E2EL, TPOT, scheduling delay (seconds) of the completed requests
    (`requests`: a DataFrame, or its columns by name)."""
    return _per_request(_completed(_columns(requests)))


def _per_request(done: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    arrival = done["arrival_s"]
    ttft = done["first_token_s"] - arrival
    e2el = done["finish_s"] - arrival
    out_tokens = done["generated_tokens"]
    multi = out_tokens > 1
    tpot = (e2el[multi] - ttft[multi]) / (out_tokens[multi] - 1)
    return {
        "ttft": ttft, "e2el": e2el, "tpot": tpot, "tpot_mask": multi,
        "sched": done["first_scheduled_s"] - arrival,
        "max_itl": done["max_itl_s"],
    }


def summarize(requests, steps: StepTotals, itl_s: Samples,
              slos: Mapping[str, float] | None = None, meta: Mapping | None = None,
              duration_s: float | None = None) -> dict:
    """The run's summary, keys named like `vllm bench serve --save-result`. Throughputs
    divide by `duration_s` (default: first arrival to last finish of these requests).
    When no request completed, latencies, duration and busy fraction are None (there is
    nothing to measure) and throughputs 0. `requests`: a DataFrame, or its columns by
    name."""
    return _summarize(_columns(requests), steps, itl_s, slos, meta, duration_s)


def _summarize(cols: dict[str, np.ndarray], steps: StepTotals, itl_s: Samples,
               slos: Mapping[str, float] | None, meta: Mapping | None,
               duration_s: float | None, by_class: bool = False) -> dict:
    """The summary of `cols`; `by_class`: a class's section, without the run-wide
    metrics (`Metric.run_wide`)."""
    slos = dict(slos or {})
    done = _completed(cols)
    m = _per_request(done)
    n_done = len(done["arrival_s"])
    start = float(cols["arrival_s"].min())
    end = float(np.nanmax(done["finish_s"])) if n_done else start
    duration = max(end - start if duration_s is None else duration_s, 1e-12)
    none = n_done == 0
    in_tok = int(done["prompt_tokens"].sum())
    out_tok = int(done["generated_tokens"].sum())
    good = np.ones(n_done, dtype=bool)
    for key, limit in slos.items():
        if key == "tpot":
            ok = np.ones(n_done, dtype=bool)
            ok[m["tpot_mask"]] = m["tpot"] <= limit
        else:
            ok = {"ttft": m["ttft"], "e2el": m["e2el"], "itl": m["max_itl"]}[key] <= limit
        good &= ok
    run = _Run(cols, done, m, n_done, duration, none, in_tok, out_tok, slos, good, itl_s,
               *step_facts(steps))
    values = {"ttft": Samples(m["ttft"]), "tpot": Samples(m["tpot"]), "itl": itl_s,
              "e2el": Samples(m["e2el"]), "sched_delay": Samples(m["sched"])}
    summary: dict = {}
    for entry in SUMMARY:  # `sim.metrics.metric_registry`: the schema, in summary.json's order
        if isinstance(entry, Family):
            summary.update(_stats(entry.name, values[entry.name], none))
        elif not (by_class and entry.run_wide):
            summary[entry.key] = COMPUTE[entry.key](run)
    if meta:
        summary.update(meta)
    return summary


def summarize_classes(requests, itl_by_class: Mapping[str, Samples],
                      slos: Mapping[str, float] | None = None,
                      class_slos: Mapping[str, Mapping[str, float]] | None = None) -> dict:
    """Per request-class summaries: each class's requests, its own pooled ITL, and its
    SLOs (the global ones, overridden per class); throughputs over the whole run's
    duration. Empty when there is only one class."""
    raw = requests["request_class"]
    names = sorted(set(raw.tolist() if hasattr(raw, "tolist") else raw))
    if len(names) < 2:  # (known from a set of the names: no array of a million strings)
        return {}
    cols = _columns(requests)
    classes = np.asarray(raw)
    class_slos = class_slos or {}
    unknown = set(class_slos) - set(names)
    if unknown:
        raise ValueError(
            f"--class-slo names class(es) {sorted(unknown)} that the workload lacks; its "
            f"classes: {names}")
    steps0 = _EMPTY_STEPS
    done = _completed(cols)
    run_s = (float(np.nanmax(done["finish_s"])) if len(done["finish_s"]) else 0.0) - float(
        cols["arrival_s"].min())
    out = {}
    for cls in names:
        merged = {**(slos or {}), **class_slos.get(cls, {})}
        out[str(cls)] = _summarize(_rows(cols, classes == cls), steps0,
                                   itl_by_class.get(cls, Samples(np.zeros(0))), merged, None,
                                   run_s, by_class=True)
    return out


_EMPTY_STEPS = StepTotals()
"""Per-class summaries have no steps of their own (steps are run-wide)."""


def max_concurrent(arrival_s: np.ndarray, finish_s: np.ndarray) -> int:
    """The most requests in any one-second bucket from the first arrival, a request in
    every bucket from its arrival's to its finish's (`vllm bench serve`'s
    max_concurrent_requests); 0 for none."""
    if not len(arrival_s):
        return 0
    t0 = arrival_s.min()
    first = np.floor(arrival_s - t0).astype(np.int64)
    last = np.floor(finish_s - t0).astype(np.int64)
    n = int(last.max()) + 2
    starts = np.bincount(first, minlength=n)
    ends = np.bincount(last + 1, minlength=n)
    return int(np.cumsum(starts - ends).max())


@dataclass(frozen=True)
class _Run:
    """What a metric's computation reads: the run's request columns (`cols`; `done`, the
    completed requests'), their per-request latencies (`per`, `_per_request`), and the
    step totals."""

    cols: dict[str, np.ndarray]
    done: dict[str, np.ndarray]
    per: dict[str, np.ndarray]
    n_done: int
    duration: float
    """Seconds the throughputs divide by (> 0)."""
    none: bool
    """No request completed: there is no latency, duration or busy fraction."""
    in_tok: int
    out_tok: int
    slos: dict[str, float]
    good: np.ndarray
    """Per completed request: whether it met every goodput SLO."""
    itl_s: Samples
    n_steps: int
    busy_s: float
    extrapolated: int
    peak_kv: int


COMPUTE: dict[str, Callable[[_Run], object]] = {
    "completed": lambda r: r.n_done,
    "rejected": lambda r: int(r.cols["rejected"].sum()),
    "total_input_tokens": lambda r: r.in_tok,
    "total_output_tokens": lambda r: r.out_tok,
    "duration": lambda r: None if r.none else r.duration,
    "request_throughput": lambda r: r.n_done / r.duration,
    "output_throughput": lambda r: r.out_tok / r.duration,
    "total_token_throughput": lambda r: (r.in_tok + r.out_tok) / r.duration,
    "max_concurrent_requests": lambda r: max_concurrent(r.done["arrival_s"],
                                                        r.done["finish_s"]),
    "request_goodput": lambda r: float(r.good.sum()) / r.duration if r.slos else None,
    "goodput_slos_ms": lambda r: {k: v * 1000.0 for k, v in r.slos.items()},
    "max_decode_stall_ms": lambda r: None if r.none else r.itl_s.max * 1000.0,
    "preemptions": lambda r: int(r.cols["preemptions"].sum()),
    "recomputed_tokens": lambda r: int(r.cols["recomputed_tokens"].sum()),
    "steps": lambda r: r.n_steps,
    "extrapolated_steps": lambda r: r.extrapolated,
    "busy_fraction": lambda r: None if r.none else r.busy_s / r.duration,
    "mean_step_ms": lambda r: r.busy_s / max(r.n_steps, 1) * 1000.0,
    "peak_kv_blocks_used": lambda r: r.peak_kv,
}
"""Each summary metric's computation (`sim.metrics.metric_registry.SUMMARY` declares it), by key."""

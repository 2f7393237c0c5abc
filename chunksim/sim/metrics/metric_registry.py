"""The schema of a run's summary: every metric declared once, with its summary key, label,
unit, print format and definition, in the order summary.json lists them (`SUMMARY`);
`sim.metrics.metrics` holds each one's computation (`metrics.COMPUTE`, one function per key) and
builds the summary by walking `SUMMARY`. The facts a run reports besides its metrics
(its settings, the engine's counters, a fleet's rows) are declared in `FACTS`.

Who reads what from here: the console (`reports.console`: the run's table, the comparison
and per-class tables), the report tables (`reports.tables`), the definitions printed on
every page (`reports.definitions`), the SLO flags (`parse_bounds`: `--slo` takes any key
in ms, `--goodput` a per-request family), capacity's probe rows (`sweep.capacity_io`),
validation's compared keys (`validate.compare`, `validate.against`).

A new metric is one declaration in `SUMMARY` plus its function in `metrics.COMPUTE` (none,
for another percentile of a latency family: every family's percentiles are computed);
`VIEWS` makes it a column of a table."""

from __future__ import annotations

import math
from dataclasses import dataclass

PERCENTILES = (50, 90, 95, 99)
"""Percentiles of every latency family, besides mean, median and std."""
STATS = ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))
"""A family's statistics, in the order summary.json lists them."""
_STAT_LABELS = {"mean": "mean", "median": "P50", "std": "std"}


@dataclass(frozen=True)
class Metric:
    """One summary value as people see it."""

    key: str
    """Its summary.json key."""
    label: str
    unit: str = "ms"
    """Printed after the label in table headers ('' for a count or a rate named in the
    label)."""
    fmt: str = "{:.1f}"
    definition: str = ""
    """What it means."""
    run_wide: bool = False
    """A fact of the run's engines (steps, KV blocks), not of a request class: left out of
    each class's section (`by_class`)."""
    group: str = ""
    """The metrics read together: `throughput` (the three rates validation compares)."""

    @property
    def header(self) -> str:
        return f"{self.label} {self.unit}" if self.unit else self.label


@dataclass(frozen=True)
class Family:
    """A latency measured per request or per token gap, summarized as
    `{mean,median,std,p50,p90,p95,p99}_{name}_ms`."""

    name: str
    """The middle of its summary keys (`ttft` in `p99_ttft_ms`)."""
    label: str
    definition: str
    formats: tuple[tuple[str, str], ...] = ()
    """(stat, format) where a statistic prints other than `Metric.fmt`'s default."""
    per_request: bool = True
    """Whether a request has one value of it, so that `--goodput NAME=MS` can bound it
    per request (itl: the request's worst gap)."""

    def key(self, stat: str) -> str:
        return f"{stat}_{self.name}_ms"

    def metric(self, stat: str) -> Metric:
        label = _STAT_LABELS.get(stat, stat.upper())
        return Metric(self.key(stat), f"{label} {self.label}", "ms",
                      dict(self.formats).get(stat, "{:.1f}"), self.definition)

    def metrics(self) -> tuple[Metric, ...]:
        return tuple(self.metric(s) for s in STATS)


FAMILIES: tuple[Family, ...] = (
    Family("ttft", "TTFT", "time to first token: arrival → first output token (the step "
           "that computes the prompt's last chunk emits it).", formats=(("p99", "{:.0f}"),)),
    Family("tpot", "TPOT", "time per output token, per request: (E2EL − TTFT) / (output "
           "tokens − 1), over requests with more than one output token; stats are over "
           "requests.", formats=(("mean", "{:.2f}"),)),
    Family("itl", "ITL", "inter-token latency: every gap between consecutive output tokens "
           "of a request, all requests pooled; stats are over gaps. P99 ITL is where prefill "
           "stalls show (Sarathi-Serve's P99 TBT). With speculative decoding a step streams "
           "its accepted tokens as one chunk, and ITL is the gap between chunks, as `vllm "
           "bench serve` records one gap per chunk received (TPOT still divides by tokens)."),
    Family("e2el", "E2EL", "end-to-end latency: arrival → last output token."),
    Family("sched_delay", "sched delay", "scheduling delay: arrival → the first step that "
           "computes any of the request's tokens (Sarathi-Serve bounds its median at 2 s for "
           "capacity).", per_request=False),
)
"""In the order summary.json lists them."""

_BEFORE_FAMILIES: tuple[Metric, ...] = (
    Metric("completed", "done", "", "{:.0f}", "requests that finished."),
    Metric("rejected", "rejected", "", "{:.0f}", "requests refused at arrival (too long for "
           "the token budget, the KV cache or --max-model-len); they are in no latency."),
    Metric("total_input_tokens", "prompt tokens", "", "{:.0f}",
           "prompt tokens of the completed requests."),
    Metric("total_output_tokens", "output tokens", "", "{:.0f}",
           "output tokens of the completed requests."),
    Metric("duration", "duration", "s", "{:.1f}", "first arrival → last finish, s (None when "
           "nothing completed)."),
    Metric("request_throughput", "req/s", "", "{:.2f}",
           "completed requests/s, output tokens/s, (prompt + output) tokens/s over the run "
           "(first arrival → last finish).", group="throughput"),
    Metric("output_throughput", "tok/s", "", "{:.0f}", "output tokens/s over the run.",
           group="throughput"),
    Metric("total_token_throughput", "total tok/s", "", "{:.0f}",
           "(prompt + output) tokens/s over the run.", group="throughput"),
    Metric("max_concurrent_requests", "peak concurrency", "", "{:.0f}",
           "the most completed requests in flight within one second of the run, as `vllm "
           "bench serve` counts them: a request is in every whole second from its arrival's "
           "to its finish's, counted from the first arrival."),
    Metric("request_goodput", "goodput req/s", "", "{:.2f}",
           "requests/s that meet every --goodput SLO (ttft, tpot, e2el, or itl = the "
           "request's worst gap)."),
    Metric("goodput_slos_ms", "goodput SLOs ms", "", "{}",
           "the --goodput bounds the goodput counts against, ms per family."),
)
_AFTER_FAMILIES: tuple[Metric, ...] = (
    Metric("max_decode_stall_ms", "worst stall", fmt="{:.0f}",
           definition="the longest single gap between two tokens of any request in the run "
           "(max ITL): every request decoding at that moment waited that long."),
    Metric("preemptions", "preempt", "", "{:.0f}", "requests evicted from the KV cache and "
           "recomputed later (each eviction counts)."),
    Metric("recomputed_tokens", "recomputed", "", "{:.0f}",
           "tokens computed again after a preemption."),
    Metric("steps", "steps", "", "{:.0f}", "engine steps (forward passes) of the run.",
           run_wide=True),
    Metric("extrapolated_steps", "extrapolated", "", "{:.0f}", "steps priced outside the "
           "profile's measured grid.", run_wide=True),
    Metric("busy_fraction", "busy", "", "{:.0%}", "the share of the run a step was in "
           "flight (not a utilisation: back-to-back small steps read 100 %).",
           run_wide=True),
    Metric("mean_step_ms", "mean step", definition="the mean step's duration.",
           run_wide=True),
    Metric("peak_kv_blocks_used", "peak KV blocks", "", "{:.0f}",
           "the most KV blocks in use at once.", run_wide=True),
)

SUMMARY: tuple[Metric | Family, ...] = (*_BEFORE_FAMILIES, *FAMILIES, *_AFTER_FAMILIES)
"""summary.json's metrics, in its order; the run's facts (`FACTS`) follow them."""

ENGINE_METRICS: tuple[Metric, ...] = (
    Metric("spec_mean_acceptance_length", "acceptance length", "", "{:.2f}",
           "speculative decoding, as vLLM reports it: acceptance length = the mean tokens a "
           "verified decode emits, its accepted drafts plus the one token sampled after "
           "them (1 + k x acceptance rate); acceptance rate (spec_acceptance_rate, a "
           "fraction; vLLM prints %) = accepted / drafted tokens; per-position acceptance "
           "(spec_position_acceptance) = accepted at position i / verified decodes."),
)
"""Metrics the engine reports itself, when it runs what they measure (`sim.engine.core`)."""


def _all_metrics() -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for entry in (*SUMMARY, *ENGINE_METRICS):
        for m in entry.metrics() if isinstance(entry, Family) else (entry,):
            out[m.key] = m
    return out


METRICS: dict[str, Metric] = _all_metrics()
"""Every declared metric by key (each family's statistics included)."""


def metric(key: str) -> Metric:
    """The declaration of summary key `key`."""
    return METRICS[key]


def summary_keys() -> tuple[str, ...]:
    """The metric keys of summary.json, in its order."""
    return tuple(m.key for e in SUMMARY
                 for m in (e.metrics() if isinstance(e, Family) else (e,)))


def group(name: str) -> tuple[str, ...]:
    """The keys of group `name` (`Metric.group`), in summary order."""
    return tuple(k for k in summary_keys() if METRICS[k].group == name)


def ms_keys() -> tuple[str, ...]:
    """Every summary metric in ms that a bound can apply to (its families' statistics,
    the worst stall, the mean step), in summary order."""
    return tuple(k for k in summary_keys() if METRICS[k].unit == "ms")


VIEWS: dict[str, tuple[str, ...]] = {
    "console": ("median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p90_itl_ms", "p99_itl_ms",
                "max_decode_stall_ms", "request_throughput", "output_throughput",
                "request_goodput"),
    "seeds": ("median_ttft_ms", "p99_ttft_ms", "p90_itl_ms", "p99_itl_ms",
              "max_decode_stall_ms", "p99_tpot_ms", "request_throughput", "request_goodput",
              "preemptions", "rejected"),
    "classes": ("completed", "median_ttft_ms", "p99_ttft_ms", "p99_itl_ms",
                "max_decode_stall_ms"),
    "console_classes": ("completed", "mean_ttft_ms", "p99_ttft_ms", "p99_itl_ms",
                        "mean_tpot_ms", "request_goodput"),
    "glossary": ("max_decode_stall_ms", "request_throughput", "request_goodput",
                 "spec_mean_acceptance_length"),
    "board": ("p99_ttft_ms", "p99_itl_ms"),
    "probe": ("completed", "rejected", "p99_itl_ms", "p99_ttft_ms", "median_sched_delay_ms",
              "max_decode_stall_ms", "request_throughput"),
    "splits": ("p99_ttft_ms", "p99_itl_ms", "median_sched_delay_ms"),
    "validate": (*(f"{s}_{f}_ms" for f in ("ttft", "itl", "tpot", "e2el")
                   for s in ("mean", "median", "p90", "p99")), *group("throughput")),
    "validate_target": tuple(f"{s}_{f}_ms" for f in ("ttft", "itl", "tpot")
                             for s in ("mean", "p99")),
    "validate_counts": ("completed", "rejected", "steps", "preemptions", "recomputed_tokens",
                        "busy_fraction", "mean_step_ms", "peak_kv_blocks_used", "duration"),
    "run_line": ("completed", "rejected", "duration", "request_throughput",
                 "output_throughput", "request_goodput", "steps", "busy_fraction",
                 "max_decode_stall_ms", "preemptions", "extrapolated_steps"),
    "tradeoff": ("max_decode_stall_ms", "p99_ttft_ms"),
}
"""The columns of each table, in order: `console` (the comparison table of `sim compare`
/ `sim capacity`), `seeds` (the report's table over seeds), `classes` (its per-class
rows), `console_classes` (`sim run`'s per-class table); `glossary`: the metrics each
report defines beside the families; `probe`: a capacity probe's row (`sweep.capacity_io`),
`splits`: a GPU split's (`sweep.gpus_io`); `validate`: what validation compares (latency
statistics, then throughputs), `validate_target` the figures its fidelity target (<= 5 %
error) applies to, `validate_counts` the tallies it reports side by side; `board`: the
run board's latencies beside its own figures (`reports.run_board`); `run_line`: the
lines of prose under `sim run`'s table (`reports.console.print_summary`); `tradeoff`: the
verdict's trade-off metrics, the worst stall and the longest requests' TTFT
(`sweep.verdict`)."""


def view(name: str) -> tuple[str, ...]:
    """The keys of view `name` (`VIEWS`), in order."""
    return VIEWS[name]


def shown(view: str) -> tuple[Metric, ...]:
    """The metrics that are columns of `view` (`VIEWS`), in table order."""
    return tuple(METRICS[k] for k in VIEWS[view])


def metric_definitions() -> tuple[tuple[str, str], ...]:
    """(label, meaning) of every family and of each metric of the glossary."""
    return (tuple((f.label, f.definition) for f in FAMILIES)
            + tuple((m.label, m.definition) for m in shown("glossary")))


def parse_bounds(items: list[str] | None, flag: str, keys: tuple[str, ...], example: str,
                 prefix: str = "", off: bool = False, normalize=lambda k: k,
                 what: str = "the bound") -> tuple[dict[str, float], set[str]]:
    """The one SLO spelling, `KEY=MS` (`KEY:MS`, vLLM's `--goodput` form, reads the same),
    comma- or space-separated, the flag repeated: ({key: ms}, keys switched off). `keys`:
    what KEY may be (after `normalize`); `off`: whether `KEY=off` drops a bound. Errors
    name `flag` and show each value after `prefix` (`--class-slo` passes its CLASS:)."""
    bounds: dict[str, float] = {}
    dropped: set[str] = set()
    for item in items or []:
        for bare in item.replace(",", " ").split():
            part = prefix + bare
            key, sep, val = bare.replace(":", "=").partition("=")
            key = normalize(key.strip().lower())
            if not sep or key not in keys:
                raise ValueError(f"{flag} {part!r}: use {example}")
            if off and val.strip().lower() in ("off", "none", "inf"):
                dropped.add(key)
                continue
            try:
                ms = float(val)
            except ValueError:
                raise ValueError(f"{flag} {part!r}: {val!r} is not a number of ms") from None
            if not (ms > 0 and math.isfinite(ms)):
                raise ValueError(f"{flag} {part!r}: {what} must be a finite number > 0 ms")
            bounds[key] = ms
    return bounds, dropped


GOODPUT_FAMILIES: tuple[str, ...] = ("ttft", "tpot", "e2el", "itl")
"""What `--goodput` bounds per request (itl: the request's worst gap), in the order its
help names them."""
assert set(GOODPUT_FAMILIES) == {f.name for f in FAMILIES if f.per_request}

FACTS: dict[str, str] = {
    "policy": "the scheduling policy's name.",
    "policy_params": "the policy's settings.",
    "workload": "the workload's name.",
    "workload_params": "the workload's settings.",
    "workload_notes": "what the workload's builder said about it.",
    "kv_blocks": "KV-cache blocks of an engine.",
    "max_model_len": "the longest request an engine admits, tokens.",
    "rejected_reasons": "rejected requests by reason.",
    "block_size": "tokens per KV block.",
    "preemption_only_steps": "steps that only preempted (computed nothing).",
    "prefix_caching": "whether prefix caching was on.",
    "prefix_cache_hit_rate": "prompt tokens found in the prefix cache / prompt tokens.",
    "priority_scheduling": "whether the waiting queue ran by priority.",
    "waiting_order": "the waiting queue's discipline.",
    "speculative": "speculative decoding's settings.",
    "spec_drafts": "decodes that drafted tokens.",
    "spec_draft_tokens": "tokens drafted.",
    "spec_accepted_tokens": "drafted tokens accepted.",
    "spec_acceptance_rate": "accepted / drafted tokens.",
    "spec_accepted_per_position": "accepted drafts by position in the draft.",
    "spec_position_acceptance": "accepted at each position / verified decodes.",
    "kv_offload_blocks": "KV blocks of the CPU tier.",
    "kv_offload_link_gb_per_s": "the CPU tier's link, GB/s.",
    "kv_offload_link_latency_us": "the CPU tier's link latency, µs.",
    "host_cache_hit_rate": "prompt tokens found in the CPU tier / prompt tokens looked up.",
    "host_cache_hit_tokens": "prompt tokens found in the CPU tier.",
    "prefix_cache_hit_tokens": "prompt tokens found in the GPU prefix cache.",
    "host_blocks_dropped": "KV blocks the CPU tier evicted to make room.",
    "host_blocks_stored": "KV blocks written to the CPU tier (write-through: as computed; "
    "write-back: as the GPU evicts them).",
    "kv_offload_write_policy": "when the CPU tier is written: write-through (vLLM's "
    "offloading connector) or write-back (SGLang HiCache's write_back).",
    "kv_loads": "loads from the CPU tier.",
    "kv_loaded_blocks": "KV blocks loaded from the CPU tier.",
    "kv_loaded_bytes": "bytes loaded from the CPU tier.",
    "mean_kv_load_wait_ms": "the mean wait of a step for a load from the CPU tier, ms.",
    "p99_kv_load_wait_ms": "P99 of a step's wait for a load from the CPU tier, ms.",
    "profile_sha256": "the profile's content hash.",
    "jitter": "whether step times were jittered.",
    "async_scheduling": "whether the next step was scheduled while one ran.",
    "wake_up_steps": "steps that paid the idle engine's wake-up.",
    "seed": "the run's seed.",
    "step_overhead_s": "the profile's fixed time per step, s.",
    "step_overhead_per_request_s": "the profile's time per running request per step, s.",
    "fleet": "a fleet's layout: replicas, routers, link.",
    "replicas": "one row per replica of a fleet.",
    "kv_transfer": "P/D: KV transfers from prefill to decode replicas.",
    "profile": "the profile's file name.",
    "profile_label": "the profile's label.",
    "profile_kind": "whole-step or components.",
    "profile_filled_cells": "cells of the profile's grid filled in when loaded.",
    "policy_defaults": "the settings the policy chose itself, and why.",
    "by_class": "the summary of each request class (two classes or more).",
    "warnings": "what the run warns about.",
}
"""The run's facts besides its metrics: its settings, the engine's counters and a fleet's
rows (written by the engine, `sim.engine.core`, `sim.fleet_run`,
`sim.run_summary`), by key."""

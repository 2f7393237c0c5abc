"""Every metric a run reports, declared once: its summary key, label, unit, print format,
where it is shown and what it means. `sim.metrics` computes the values; the console
(`reports.console`), the report tables (`reports.tables`) and the definitions printed on
every page (`reports.definitions`) read their columns and wording from here. A new metric
is one declaration here plus its computation in `sim.metrics` (none, for another
percentile of a latency family: every family's percentiles are computed)."""

from __future__ import annotations

from dataclasses import dataclass

PERCENTILES = (50, 90, 95, 99)
"""Percentiles of every latency family, besides mean, median and std."""


@dataclass(frozen=True)
class Family:
    """A latency measured per request or per token gap, summarized as
    `{mean,median,std,p50,p90,p95,p99}_{name}_ms`."""

    name: str
    """The middle of its summary keys (`ttft` in `p99_ttft_ms`)."""
    label: str
    definition: str

    def key(self, stat: str) -> str:
        return f"{stat}_{self.name}_ms"


FAMILIES: tuple[Family, ...] = (
    Family("ttft", "TTFT", "time to first token: arrival → first output token (the step "
           "that computes the prompt's last chunk emits it)."),
    Family("tpot", "TPOT", "time per output token, per request: (E2EL − TTFT) / (output "
           "tokens − 1), over requests with more than one output token; stats are over "
           "requests."),
    Family("itl", "ITL", "inter-token latency: every gap between consecutive output tokens "
           "of a request, all requests pooled; stats are over gaps. P99 ITL is where prefill "
           "stalls show (Sarathi-Serve's P99 TBT). With speculative decoding a step streams "
           "its accepted tokens as one chunk, and ITL is the gap between chunks, as `vllm "
           "bench serve` records one gap per chunk received (TPOT still divides by tokens)."),
    Family("e2el", "E2EL", "end-to-end latency: arrival → last output token."),
    Family("sched_delay", "sched delay", "scheduling delay: arrival → the first step that "
           "computes any of the request's tokens (Sarathi-Serve bounds its median at 2 s for "
           "capacity)."),
)
"""In the order summary.json lists them."""


@dataclass(frozen=True)
class Metric:
    """One summary value as people see it."""

    key: str
    """Its summary.json key."""
    label: str
    unit: str = "ms"
    """Printed after the label in table headers ('' for a count)."""
    fmt: str = "{:.1f}"
    shown: frozenset[str] = frozenset()
    """Where it is a column: `console` (the comparison table of `sim compare` / `sim
    capacity`), `seeds` (the report's table over seeds), `classes` (its per-class rows)."""
    definition: str | None = None
    """What it means, when no family's definition says it."""

    @property
    def header(self) -> str:
        return f"{self.label} {self.unit}" if self.unit else self.label


def _shown(*views: str) -> frozenset[str]:
    return frozenset(views)


METRICS: tuple[Metric, ...] = (
    Metric("completed", "done", "", "{:.0f}", _shown("classes")),
    Metric("median_ttft_ms", "P50 TTFT", fmt="{:.1f}",
           shown=_shown("console", "seeds", "classes")),
    Metric("p99_ttft_ms", "P99 TTFT", fmt="{:.0f}", shown=_shown("console", "seeds", "classes")),
    Metric("median_itl_ms", "P50 ITL", shown=_shown("console")),
    Metric("p90_itl_ms", "P90 ITL", shown=_shown("console", "seeds")),
    Metric("p99_itl_ms", "P99 ITL", shown=_shown("console", "seeds", "classes")),
    Metric("max_decode_stall_ms", "worst stall", fmt="{:.0f}",
           shown=_shown("console", "seeds", "classes"),
           definition="the longest single gap between two tokens of any request in the run "
           "(max ITL): every request decoding at that moment waited that long."),
    Metric("p99_tpot_ms", "P99 TPOT", shown=_shown("seeds")),
    Metric("request_throughput", "req/s", "", "{:.2f}", _shown("console", "seeds"),
           definition="completed requests/s, output tokens/s, (prompt + output) tokens/s "
           "over the run (first arrival → last finish)."),
    Metric("output_throughput", "tok/s", "", "{:.0f}", _shown("console")),
    Metric("request_goodput", "goodput req/s", "", "{:.2f}", _shown("console", "seeds"),
           definition="requests/s that meet every --goodput SLO (ttft, tpot, e2el, or itl = "
           "the request's worst gap)."),
    Metric("preemptions", "preempt", "", "{:.0f}", _shown("seeds")),
    Metric("rejected", "rejected", "", "{:.0f}", _shown("seeds")),
    Metric("spec_mean_acceptance_length", "acceptance length", "", "{:.2f}",
           definition="speculative decoding, as vLLM reports it: acceptance length = the "
           "mean tokens a verified decode emits, its accepted drafts plus the one token "
           "sampled after them (1 + k x acceptance rate); acceptance rate "
           "(spec_acceptance_rate, a fraction; vLLM prints %) = accepted / drafted tokens; "
           "per-position acceptance (spec_position_acceptance) = accepted at position i / "
           "verified decodes."),
)
"""In the order tables show them."""


def shown(view: str) -> tuple[Metric, ...]:
    """The metrics that are columns of `view` (`Metric.shown`), in table order."""
    return tuple(m for m in METRICS if view in m.shown)


def metric_definitions() -> tuple[tuple[str, str], ...]:
    """(label, meaning) of every family and every metric that has its own definition."""
    return (tuple((f.label, f.definition) for f in FAMILIES)
            + tuple((m.label, m.definition) for m in METRICS if m.definition))

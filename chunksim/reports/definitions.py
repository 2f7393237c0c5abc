"""Metric definitions printed in every report (as `vllm bench serve` defines them)."""

from __future__ import annotations

DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("TTFT", "time to first token: arrival → first output token (the step that computes "
     "the prompt's last chunk emits it)."),
    ("ITL", "inter-token latency: every gap between consecutive output tokens of a request, "
     "all requests pooled; stats are over gaps. P99 ITL is where prefill stalls show "
     "(Sarathi-Serve's P99 TBT)."),
    ("TPOT", "time per output token, per request: (E2EL − TTFT) / (output tokens − 1), "
     "over requests with more than one output token; stats are over requests."),
    ("E2EL", "end-to-end latency: arrival → last output token."),
    ("sched delay", "scheduling delay: arrival → the first step that computes any of the "
     "request's tokens (Sarathi-Serve bounds its median at 2 s for capacity)."),
    ("max decode stall", "the longest single ITL gap of the run."),
    ("throughput", "completed requests/s, output tokens/s, (prompt + output) tokens/s over "
     "the run (first arrival → last finish)."),
    ("goodput", "requests/s that meet every --goodput SLO (ttft, tpot, e2el, or itl = the "
     "request's worst gap)."),
    ("capacity", "the highest request rate at which every --slo bound holds, found by "
     "doubling then geometric bisection on the rate with a fixed workload seed."),
)

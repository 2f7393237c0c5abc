"""Metric definitions printed in every report (as `vllm bench serve` defines them)."""

from __future__ import annotations

DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("TTFT", "time to first token: arrival → first output token (the step that computes "
     "the prompt's last chunk emits it)."),
    ("ITL", "inter-token latency: every gap between consecutive output tokens of a request, "
     "all requests pooled; stats are over gaps. P99 ITL is where prefill stalls show "
     "(Sarathi-Serve's P99 TBT). With speculative decoding a step streams its accepted "
     "tokens as one chunk, and ITL is the gap between chunks, as `vllm bench serve` "
     "records one gap per chunk received (TPOT still divides by tokens)."),
    ("TPOT", "time per output token, per request: (E2EL − TTFT) / (output tokens − 1), "
     "over requests with more than one output token; stats are over requests."),
    ("E2EL", "end-to-end latency: arrival → last output token."),
    ("sched delay", "scheduling delay: arrival → the first step that computes any of the "
     "request's tokens (Sarathi-Serve bounds its median at 2 s for capacity)."),
    ("max decode stall", "the longest single ITL gap of the run."),
    ("accepted tokens per step", "speculative decoding: the mean tokens a decode emits "
     "per step, its accepted drafts plus the token sampled after them (vLLM's mean "
     "acceptance length); acceptance rate = accepted / drafted tokens."),
    ("throughput", "completed requests/s, output tokens/s, (prompt + output) tokens/s over "
     "the run (first arrival → last finish)."),
    ("goodput", "requests/s that meet every --goodput SLO (ttft, tpot, e2el, or itl = the "
     "request's worst gap)."),
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
    ("worst stall", "the longest single gap between two tokens of any request in the run "
     "(max ITL): every request decoding at that moment waited that long."),
)

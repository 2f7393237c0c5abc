"""Where a capacity search starts when no --rate is given: near the rate the profile can
serve at all, so the search spends no probes on rates far below the answer.

A passing probe runs to its end, while a hopeless one stops within seconds of simulated
time (`sim.engine.settle`); so the search is cheapest started just above the capacity and
walking down. The start is the engine's *service rate* on the workload's mean request:
with B requests decoding at once (the seat cap, or as many as the KV cache holds), each
request needs `output` decode steps, and at balance each step also carries
`prompt * B / output` prefill tokens; so B requests finish every `output` steps of that
cost. In steady state no SLO makes an engine serve more than that, so it bounds the
capacity from above, up to the batch shape priced (a window too short to build a queue
can pass a higher rate; the search then doubles up from the start). The start is that
rate rounded down to a power of two, so every search still walks the lattice
`2^(k / 2^j)` a start of 1 req/s walks, and ends on the same rates. A fleet of N
engines serves about N engines' worth, and a prefill/decode split, each engine doing
one kind of work, may serve more: its search starts at N times the rate rounded *up*
to a power of two (`SearchParams.start_for`), on the same lattice, so that it starts
above the capacity rather than at a rate that passes.
"""

from __future__ import annotations

import math

import numpy as np

from chunksim.core.shape import BatchShape
from chunksim.core.spec import Workload
from chunksim.latency.profile import Profile
from chunksim.sim.build import RunConfig, engine_parts


def mean_lengths(workload: Workload) -> tuple[float, float]:
    """The workload's mean prompt and output lengths, tokens."""
    reqs = workload.requests
    return float(np.mean(reqs.prompt_tokens)), float(np.mean(reqs.output_tokens))


def service_rate(workload: Workload, profile: Profile, run: RunConfig) -> float:
    """Requests/s one engine of `run` on `profile` serves at most on the workload's mean
    request (see the module docstring)."""
    parts = engine_parts(workload, profile, run)
    prompt, output = mean_lengths(workload)
    output = max(output, 1.0)
    kv_tokens = parts.kv.num_blocks * parts.kv.block_size
    seats = run.make_policy(parts.device).max_num_seqs
    batch = max(1, min(seats, int(kv_tokens // max(prompt + output, 1.0))))
    prefill = round(prompt * batch / output)
    step_s, _ = parts.latency.step_s(BatchShape(
        prefill_tokens=prefill, prior_tokens=0.0, decode_count=batch,
        decode_kv_tokens=prompt + output / 2))
    step_s += parts.latency.overhead(batch + (1 if prefill else 0))
    return batch / (output * step_s)


def on_lattice(rate: float, min_rate: float, max_rate: float, up: bool = False) -> float:
    """`rate` rounded down (`up`: up) to a power of two, within [min_rate, max_rate]
    (1 req/s when it is no rate at all)."""
    if not math.isfinite(rate) or rate <= 0:
        return min(max(1.0, min_rate), max_rate)
    k = math.log2(rate)
    return min(max(2.0 ** (math.ceil(k) if up else math.floor(k)), min_rate), max_rate)

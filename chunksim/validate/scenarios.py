"""The validation suite: each policy (`whole`, `chunk 256`, `budget 512`) under light,
medium and heavy load, plus the `long-prompt` scenario, sized for the `tiny` model on one
CPU thread (each live run 15-30 s, the whole suite well under 15 minutes).

Loads are Poisson streams of short chat requests (prompts lognormal mean 256 tokens in
[32, 1024], outputs mean 64 in [8, 256]). On `tiny` with 1 thread the engine is about a
third busy at 4 req/s (light) and about 80 % at 10 req/s (medium); heavy (16 req/s) keeps
it busy nearly all the time and its KV cache is cut to 96 blocks (1536 tokens), so
requests queue for KV and running ones are preempted and recomputed. `long-prompt` is
the stock scenario: one 8192-token prompt at 10 s into an 8 req/s chat stream for 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadKind, WorkloadOptions

POLICIES: tuple[tuple[str, str, int | None], ...] = (
    ("whole", "whole", None),
    ("chunk256", "chunk", 256),
    ("budget512", "budget", 512),
)
"""(label, policy family, chunk or budget tokens)."""

CHAT = WorkloadOptions(prompt_mean=256, prompt_std=192, prompt_min=32, prompt_max=1024,
                       output_mean=64, output_std=48, output_min=8, output_max=256)

LOADS: dict[str, tuple[WorkloadOptions, int | None]] = {
    "light": (replace(CHAT, rate=4.0, duration_s=15.0), None),
    "medium": (replace(CHAT, rate=10.0, duration_s=15.0), None),
    "heavy": (replace(CHAT, rate=16.0, duration_s=15.0), 96),
    "long-prompt": (WorkloadOptions(workload=WorkloadKind.LONG_PROMPT), None),
}
"""load -> (workload flags, KV blocks; None = ample, i.e. 65536 blocks of 16 tokens)."""

AMPLE_KV_BLOCKS = 65536
"""KV blocks when a load does not limit them (1M tokens: never the bottleneck here)."""


@dataclass(frozen=True)
class Scenario:
    """One validation run: a policy on a workload with a KV size."""

    name: str
    """`policy-label/load`, e.g. `chunk256/heavy`."""
    workload: WorkloadOptions
    """The workload flags (same seed on both sides)."""
    run: RunConfig
    """Policy, knobs and KV blocks (prefix caching off)."""


def suite(seed: int = 0, loads: tuple[str, ...] = tuple(LOADS),
          policies: tuple[str, ...] | None = None) -> list[Scenario]:
    """Every (policy, load) scenario, policies outer; `policies` filters by label."""
    out = []
    for label, family, chunk in POLICIES:
        if policies is not None and label not in policies:
            continue
        for load in loads:
            opts, blocks = LOADS[load]
            cfg = RunConfig(policy=family, chunk=chunk, block_size=16,
                            kv_blocks=blocks or AMPLE_KV_BLOCKS, prefix_caching=False)
            out.append(Scenario(f"{label}/{load}", replace(opts, seed=seed), cfg))
    return out


VALIDATION_GRID = {
    "chunk_lens": "0,16,32,64,128,256,384,512,768,1024,2048,4096,8192",
    "decode_counts": "0,1,2,4,8,16,32",
    "kv_lens": "1,256,512,1024,2048,4096",
    "prior_lens": "256,512,1024,2048,4096,8192",
}
"""Profile axes covering the suite's steps: chunks to 8192 (the long prompt, whole),
dense up to 1024 (chunk/budget steps and chat prompts), up to 32 decodes over 4096-token
contexts, prior context to 8192 (the long prompt's last chunks). Each extra round-robin pass
re-times every point, so the profiling time grows with the passes."""


def medium_rate(profile, opts: WorkloadOptions, cfg: RunConfig, share: float = 0.5,
                tol: float = 0.05) -> tuple[float, float]:
    """"Medium load" for a device known only from its table: `share` of the simulated
    capacity, Sarathi-Serve's definition (the highest Poisson rate whose median
    scheduling delay stays within 2 s), found by the capacity search. Returns (rate,
    capacity) in req/s.

    Not "the engine is X % busy": where a step costs the same for 1 and 256 decodes (a
    GPU below its compute roof, or a launch-bound eager loop such as the 8B model's on an
    H200), one running request keeps the engine busy, so a busy-fraction target picks a
    nearly idle rate (docs/results/h200.md)."""
    from chunksim.sim.run import simulate
    from chunksim.sweep.search import find_max_rate
    from chunksim.sweep.slos import DEFAULT_SCHED_DELAY_MS, SCHED_DELAY_KEY
    from chunksim.workloads.options import build_workload

    if not 0 < share <= 1:
        raise ValueError(f"share={share}: the fraction of capacity must be in (0, 1]")

    def feasible(rate: float) -> bool:
        _, s = simulate(build_workload(replace(opts, rate=rate)), profile, cfg)
        return bool(s["completed"]) and s[SCHED_DELAY_KEY] <= DEFAULT_SCHED_DELAY_MS

    capacity = find_max_rate(feasible, start=1.0, tol=tol, max_rate=4096.0).capacity
    if capacity <= 0:
        raise ValueError("the simulated engine cannot keep up with even 0.001 req/s of this "
                         "workload; check the profile and the workload's lengths")
    return round(share * capacity, 2), capacity

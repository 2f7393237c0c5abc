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

from chunksim.policies import PolicyKnobs
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
            cfg = RunConfig(policy=family, knobs=PolicyKnobs(chunk=chunk),
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
contexts, prior context to 8192 (the long prompt's last chunks). About 3.5 minutes on
one CPU thread for `tiny`, plus ~25 s per extra round-robin pass."""


def rate_for_busy(profile, opts: WorkloadOptions, cfg: RunConfig, target_busy: float = 0.7,
                  lo: float = 0.25, hi: float = 256.0, iters: int = 10) -> float:
    """The Poisson rate (req/s) at which the simulator keeps the engine `target_busy` busy
    on `profile`: "medium load" for a device whose speed is known only from its table.
    Bisection in log space (busy fraction grows with the rate)."""
    from chunksim.sim.run import simulate
    from chunksim.workloads.options import build_workload

    for _ in range(iters):
        mid = (lo * hi) ** 0.5
        _, s = simulate(build_workload(replace(opts, rate=mid)), profile, cfg)
        lo, hi = (mid, hi) if s["busy_fraction"] < target_busy else (lo, mid)
    return round((lo * hi) ** 0.5, 2)

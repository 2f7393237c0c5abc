"""Synthetic shared-prefix workload for prefix-caching experiments.

`num_prefixes` system prompts of `prefix_tokens` tokens each; a `share_fraction` of the
requests start with one of them (chosen uniformly), followed by a unique user part whose
length the base config samples. Hashes cover full `block_tokens` blocks only, as vLLM's
prefix cache does: a system prompt's full blocks hash identically across requests, every
later block gets a fresh id.

With `match_min_tokens`, a request matches its system prompt only for its first m tokens,
m uniform in [match_min_tokens, prefix_tokens], and its own tokens follow (the prompt
length is unchanged): prompts of one family share the blocks wholly inside the shorter
match, so they diverge anywhere, not only where a hash block ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chunksim.core.spec import Workload
from chunksim.workloads.build import workload_from_arrays
from chunksim.workloads.synthetic import SyntheticConfig, generate

DEFAULT_BLOCK_TOKENS = 16
"""vLLM's default KV block size."""


@dataclass(frozen=True)
class SharedPrefixConfig:
    """System prompts shared across a synthetic stream."""

    base: SyntheticConfig
    """Arrivals and the unique (user) part of each prompt, plus outputs."""
    num_prefixes: int = 8
    """Distinct system prompts."""
    prefix_tokens: int = 1024
    """Tokens in each system prompt."""
    share_fraction: float = 1.0
    """Fraction of requests that start with a system prompt, in [0, 1]."""
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    """Tokens per prefix hash block."""
    match_min_tokens: int | None = None
    """Each sharing request matches its system prompt for a uniform number of tokens in
    [this, prefix_tokens] (None: all of it)."""

    def __post_init__(self) -> None:
        if self.num_prefixes < 1 or self.prefix_tokens < 1 or self.block_tokens < 1:
            raise ValueError(
                f"num_prefixes={self.num_prefixes}, prefix_tokens={self.prefix_tokens}, "
                f"block_tokens={self.block_tokens}; each must be >= 1"
            )
        m = self.match_min_tokens
        if m is not None and not 0 <= m <= self.prefix_tokens:
            raise ValueError(f"prefix match min {m} must lie in [0, prefix_tokens="
                             f"{self.prefix_tokens}] (--prefix-match-min)")
        if not 0.0 <= self.share_fraction <= 1.0:
            raise ValueError(f"share_fraction={self.share_fraction} must lie in [0, 1]")


def shared_prefix(config: SharedPrefixConfig) -> Workload:
    """The shared-prefix workload (deterministic in `config`)."""
    c = config
    base = generate(c.base)
    n = len(base)
    # A fourth child stream, so the base draws stay identical to `generate(c.base)`.
    rng = np.random.default_rng(np.random.SeedSequence(c.base.seed).spawn(4)[3])
    shares = rng.random(n) < c.share_fraction
    which = rng.integers(0, c.num_prefixes, size=n)
    user = np.array([r.prompt_tokens for r in base.requests])
    prompt = user + np.where(shares, c.prefix_tokens, 0)
    match = np.full(n, c.prefix_tokens)
    if c.match_min_tokens is not None:  # drawn last: the other draws stay as they were
        match = rng.integers(c.match_min_tokens, c.prefix_tokens + 1, size=n)

    shared_blocks = c.prefix_tokens // c.block_tokens
    next_id = c.num_prefixes * shared_blocks  # ids below this belong to system prompts
    hashes: list[tuple[int, ...]] = []
    for i in range(n):
        full = int(prompt[i]) // c.block_tokens
        head = (
            list(range(which[i] * shared_blocks, (which[i] + 1) * shared_blocks))
            if shares[i]
            else []
        )
        head = head[: min(full, int(match[i]) // c.block_tokens)]
        tail = list(range(next_id, next_id + full - len(head)))
        next_id += len(tail)
        hashes.append(tuple(int(h) for h in head) + tuple(tail))

    return workload_from_arrays(
        f"shared-prefix-{c.num_prefixes}x{c.prefix_tokens}tok-{base.name}",
        [r.arrival_s for r in base.requests],
        prompt,
        [r.output_tokens for r in base.requests],
        prefix_hashes=hashes,
        request_class=[r.request_class for r in base.requests],
        prefix_block_tokens=c.block_tokens,
        params={
            **c.base.to_params(),
            "generator": "shared-prefix",
            "num_prefixes": c.num_prefixes,
            "prefix_tokens": c.prefix_tokens,
            "share_fraction": c.share_fraction,
            "block_tokens": c.block_tokens,
            **({"match_min_tokens": c.match_min_tokens}
               if c.match_min_tokens is not None else {}),
        },
    )

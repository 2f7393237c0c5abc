"""KV storage: a pool of equal-capacity sequence slots (gpt-fast's static cache, slotted).

Layout per layer is `[slots, n_kv_heads, capacity_tokens, head_dim]`, head-major, so one
sequence's keys for one head are contiguous and a run of adjacent slots is a zero-copy
`[B, H, L, D]` view that batched decode attention reads directly. A serving loop owns
which slot belongs to which request and how many tokens each holds (counters live with the
request, not here); a step writes the new tokens' K/V at the positions its plan names, so
re-running the same step is idempotent (the profiler relies on that to repeat a step).

Deviation from vLLM: no paging. A loop that mixes very long and short sequences can use
several pools (e.g. one long-context pool), since a step may name slots in any of them.
"""

from __future__ import annotations

import torch

from chunksim.decoder.config import ModelConfig


class KVPool:
    """Preallocated K and V tensors for `slots` sequences of up to `capacity_tokens` each."""

    def __init__(self, cfg: ModelConfig, slots: int, capacity_tokens: int,
                 device: torch.device | str, dtype: torch.dtype, fill_seed: int | None = None):
        if slots < 1 or capacity_tokens < 1:
            raise ValueError(f"KVPool: slots={slots}, capacity_tokens={capacity_tokens}; "
                             f"both must be >= 1")
        if capacity_tokens > cfg.max_position:
            raise ValueError(f"KVPool: capacity_tokens={capacity_tokens} exceeds model "
                             f"{cfg.name!r} max_position={cfg.max_position}; use a smaller "
                             f"capacity")
        self.cfg = cfg
        self.slots = slots
        self.capacity_tokens = capacity_tokens
        shape = (slots, cfg.n_kv_heads, capacity_tokens, cfg.head_dim)
        # Zeros for a serving loop; a seeded fill (no zeroing pass first) for the profiler.
        alloc = torch.zeros if fill_seed is None else torch.empty
        self.k = [alloc(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        self.v = [alloc(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)]
        if fill_seed is not None:
            self._fill_random(fill_seed)

    @property
    def nbytes(self) -> int:
        """Bytes held by the pool's K and V tensors."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def _fill_random(self, seed: int) -> None:
        """Stand-in cache contents for timing: one random `[H, L, D]` block, made on the
        pool's device, copied into every slot of every layer (memcpy speed, where a full
        random fill of GBs takes seconds; latency does not depend on the values)."""
        first = self.k[0]
        gen = torch.Generator(device=first.device).manual_seed(seed)
        block = torch.rand(first.shape[1:], generator=gen, device=first.device)
        block = (block * 2 - 1).to(first.dtype).expand_as(first)
        for t in self.k + self.v:
            t.copy_(block)

    def fits(self, slots: int, capacity_tokens: int) -> bool:
        """Whether a step needing `slots` slots of `capacity_tokens` can use this pool."""
        return slots <= self.slots and capacity_tokens <= self.capacity_tokens


def kv_pool_bytes(cfg: ModelConfig, slots: int, capacity_tokens: int, dtype: object) -> int:
    """Bytes a `KVPool(cfg, slots, capacity_tokens, dtype=...)` would allocate."""
    return slots * capacity_tokens * cfg.kv_bytes_per_token(dtype)

"""Paged KV cache accounting: a number of fixed-size blocks, allocated incrementally.

vLLM V1 semantics: a request holds `ceil(num_computed_tokens / block_size)` blocks after a
step (slots for the step's new tokens are allocated before it runs); nothing is reserved
for future output tokens; preemption frees every block of the victim.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.sim.request import Request


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` tokens of KV."""
    return -(-tokens // block_size)


@dataclass(frozen=True, slots=True)
class KVConfig:
    """Size of the paged KV cache."""

    num_blocks: int
    """Capacity in blocks (vLLM's `num_gpu_blocks`)."""
    block_size: int = 16
    """Tokens per block (vLLM default 16)."""

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ValueError(f"kv num_blocks={self.num_blocks} must be >= 1 (see --kv-blocks)")
        if self.block_size < 1:
            raise ValueError(f"kv block_size={self.block_size} must be >= 1 (see --block-size)")


class KVCache:
    """Block accounting for the engine. Policies only read it (via `KVLedger`)."""

    __slots__ = ("num_blocks", "block_size", "free_blocks")

    def __init__(self, config: KVConfig) -> None:
        self.num_blocks = config.num_blocks
        self.block_size = config.block_size
        self.free_blocks = config.num_blocks

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    def extra_blocks(self, req: Request, new_tokens: int) -> int:
        """Blocks `req` must gain to hold `new_tokens` more tokens of KV."""
        need = -(-(req.num_computed_tokens + new_tokens) // self.block_size)
        return need - req.num_blocks if need > req.num_blocks else 0

    def cached_tokens(self, req: Request) -> int:
        """Prefix-cache hit, in tokens, a waiting request would get (no prefix cache: 0)."""
        return 0

    def grow(self, req: Request, new_tokens: int) -> None:
        """Allocate blocks so `req` can hold `new_tokens` more tokens."""
        extra = self.extra_blocks(req, new_tokens)
        if extra > self.free_blocks:
            raise RuntimeError(
                f"request {req.request_id} needs {extra} blocks, {self.free_blocks} free: the "
                "policy planned beyond KV capacity (a bug in the policy)"
            )
        self.free_blocks -= extra
        req.num_blocks += extra

    def free(self, req: Request) -> None:
        """Release every block of `req` (finish or preemption)."""
        self.free_blocks += req.num_blocks
        req.num_blocks = 0

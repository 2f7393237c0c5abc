"""KV memory of a live run: which `KVPool` slot holds which request.

`KVPool` slots have one fixed capacity (no paging), so requests are grouped by the most
tokens they can ever hold (prompt + output - 1: the last output token's KV is never
computed) into power-of-two size classes, one pool per class. A pool has as many slots as
can ever run at once: the class's request count, capped by the seat cap and by the KV
block count (every running request holds at least one block). The block accounting itself
stays in `EngineCore` (shared with the simulator); this only maps requests to memory.

A slot is taken when a request is admitted and returned when it finishes or is preempted;
the recompute after a preemption re-writes the KV from position 0 into its new slot.
Lowest free slot first keeps decode batches on adjacent slots (a zero-copy view for
attention) as often as possible. Deviation from vLLM: no paging, so decode batches over
scattered slots pay a gather copy that paged attention does not.
"""

from __future__ import annotations

import heapq

import torch

from chunksim.profiler.config import ModelConfig
from chunksim.profiler.kv import KVPool, kv_pool_bytes
from chunksim.workloads.spec import Workload

MIN_CLASS_TOKENS = 256
"""Smallest slot capacity (a class per power of two above it)."""


def size_class(tokens: int, max_position: int) -> int:
    """Slot capacity for a request that holds at most `tokens` tokens of KV."""
    cap = MIN_CLASS_TOKENS
    while cap < tokens:
        cap *= 2
    return min(cap, max_position)


class SlotTable:
    """Pools per size class and the request -> (pool, slot) map."""

    def __init__(self, cfg: ModelConfig, workload: Workload, max_running: int,
                 device: str, dtype: torch.dtype, bytes_budget: float) -> None:
        self.class_of: dict[int, int] = {}
        counts: dict[int, int] = {}
        for spec in workload.requests:
            need = spec.prompt_tokens + spec.output_tokens - 1
            if need > cfg.max_position:
                continue  # rejected by max_model_len before it could run
            cap = size_class(need, cfg.max_position)
            self.class_of[spec.request_id] = cap
            counts[cap] = counts.get(cap, 0) + 1
        shapes = {cap: (min(n, max_running), cap) for cap, n in sorted(counts.items())}
        total = sum(kv_pool_bytes(cfg, s, c, dtype) for s, c in shapes.values())
        if total > bytes_budget:
            desc = ", ".join(f"{s} x {c} tokens" for s, c in shapes.values())
            raise ValueError(
                f"live KV pools need {total / 2**30:.2f} GiB ({desc} slots) but only "
                f"{max(bytes_budget, 0) / 2**30:.2f} GiB are free for KV; lower --max-num-seqs "
                "or --kv-blocks (they bound how many requests run at once)")
        self.pools: list[KVPool] = []
        self.pool_of_class: dict[int, int] = {}
        self.free: list[list[int]] = []
        for cap, (slots, _) in shapes.items():
            self.pool_of_class[cap] = len(self.pools)
            self.pools.append(KVPool(cfg, slots, cap, device, dtype))
            self.free.append(list(range(slots)))  # already a heap
        self.where: dict[int, tuple[int, int]] = {}
        self.nbytes = total

    def acquire(self, request_id: int) -> tuple[int, int]:
        """Give `request_id` the lowest free slot of its class; returns (pool, slot)."""
        if request_id in self.where:
            raise RuntimeError(f"request {request_id} already holds a KV slot")
        pool = self.pool_of_class[self.class_of[request_id]]
        if not self.free[pool]:
            raise RuntimeError(
                f"no free KV slot of {self.pools[pool].capacity_tokens} tokens for request "
                f"{request_id}: more requests running than the seat cap or KV blocks allow")
        slot = heapq.heappop(self.free[pool])
        self.where[request_id] = (pool, slot)
        return pool, slot

    def release(self, request_id: int) -> None:
        """Return the request's slot (finish or preemption); no-op if it holds none."""
        held = self.where.pop(request_id, None)
        if held is not None:
            heapq.heappush(self.free[held[0]], held[1])

    def retain(self, running_ids: set[int]) -> None:
        """Release every slot whose request is no longer running."""
        for rid in [r for r in self.where if r not in running_ids]:
            self.release(rid)

    def describe(self) -> list[dict]:
        """Pool shapes, for the run's metadata."""
        return [{"slots": p.slots, "capacity_tokens": p.capacity_tokens} for p in self.pools]

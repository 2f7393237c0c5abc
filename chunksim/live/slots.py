"""KV memory of a live run: which `KVPool` slot holds which request.

`KVPool` slots have one fixed capacity (no paging), so requests are grouped by the most
tokens they can ever hold (prompt + output - 1: the last output token's KV is never
computed) into power-of-two size classes, one pool per class. A pool has as many slots as
can ever run at once: the class's request count, capped by the seat cap and by the KV
block count (every running request holds at least one block). The block accounting itself
stays in `EngineCore` (shared with the simulator); this only maps requests to memory.

A slot is taken when a request is admitted and returned when it finishes or is preempted;
the recompute after a preemption re-writes the KV from position 0 into its new slot.
Each pool is kept compact: the requests of a class occupy slots 0 .. n-1, and when one
leaves, the request in slot n-1 moves into its slot (its KV copied). A decode batch is then
a run of adjacent slots, the zero-copy attention view the profiler measures, instead of a
gather copy of every decode's KV each step (which the profiled steps never pay). Deviation
from vLLM: no paging; paged attention needs neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from chunksim.core.spec import Workload
from chunksim.decoder.config import ModelConfig
from chunksim.decoder.kv import KVPool, kv_pool_bytes

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
        self.shrunk = total > bytes_budget
        """Whether the pools were cut to fit memory (fewer slots than could run at once)."""
        if self.shrunk:
            # Many requests over a long run (an 8B model on a GPU at tens of req/s) would
            # need more slots than memory holds, though far fewer ever run at once: scale
            # every class down alike; `acquire` says so if a run ever outgrows them.
            # every class keeps one slot; the memory beyond those is shared in proportion
            base = sum(kv_pool_bytes(cfg, 1, c, dtype) for c in shapes)
            scale = max(bytes_budget - base, 0) / (total - base)
            shapes = {cap: (1 + int((s - 1) * scale), cap) for cap, (s, _) in shapes.items()}
            total = sum(kv_pool_bytes(cfg, s, c, dtype) for s, c in shapes.values())
        if total > bytes_budget:
            desc = ", ".join(f"{s} x {c} tokens" for s, c in shapes.values())
            raise ValueError(
                f"live KV pools need {total / 2**30:.2f} GiB ({desc} slots) but only "
                f"{max(bytes_budget, 0) / 2**30:.2f} GiB are free for KV; lower --max-num-seqs "
                "or --kv-blocks (they bound how many requests run at once)")
        self.pools: list[KVPool] = []
        self.pool_of_class: dict[int, int] = {}
        self.occupant: list[list[int]] = []  # per pool: request id in slot 0 .. n-1
        for cap, (slots, _) in shapes.items():
            self.pool_of_class[cap] = len(self.pools)
            self.pools.append(KVPool(cfg, slots, cap, device, dtype))
            self.occupant.append([])
        self.where: dict[int, tuple[int, int]] = {}
        self.nbytes = total
        self.moves = 0
        """KV copies made to keep the pools compact."""

    def acquire(self, request_id: int) -> tuple[int, int]:
        """Give `request_id` the first free slot of its class; returns (pool, slot)."""
        if request_id in self.where:
            raise RuntimeError(f"request {request_id} already holds a KV slot")
        pool = self.pool_of_class[self.class_of[request_id]]
        occ = self.occupant[pool]
        if len(occ) == self.pools[pool].slots:
            why = ("the pools were cut to fit device memory; lower --max-num-seqs or "
                   "--kv-blocks" if self.shrunk else
                   "more requests running than the seat cap or KV blocks allow")
            raise RuntimeError(
                f"no free KV slot of {self.pools[pool].capacity_tokens} tokens for request "
                f"{request_id}: {why}")
        self.where[request_id] = (pool, len(occ))
        occ.append(request_id)
        return pool, len(occ) - 1

    def release(self, request_id: int, cached_tokens: Callable[[int], int]) -> None:
        """Free the request's slot (finish or preemption; no-op if it holds none) and move
        the pool's last request into it; `cached_tokens(rid)` says how much KV to copy."""
        held = self.where.pop(request_id, None)
        if held is None:
            return
        pool_idx, slot = held
        occ = self.occupant[pool_idx]
        last = occ.pop()
        if last == request_id:
            return
        n = cached_tokens(last)
        if n:
            pool = self.pools[pool_idx]
            for t in pool.k + pool.v:
                t[slot, :, :n] = t[len(occ), :, :n]
            self.moves += 1
        occ[slot] = last
        self.where[last] = (pool_idx, slot)

    def retain(self, running: Mapping[int, int]) -> None:
        """Release every slot whose request is not in `running` (request id -> its cached
        tokens, for the moves)."""
        leaving = [r for r in self.where if r not in running]
        # highest slots first, so the request moved into a freed slot is never leaving too
        for rid in sorted(leaving, key=lambda r: self.where[r][1], reverse=True):
            self.release(rid, running.__getitem__)

    def describe(self) -> list[dict]:
        """Pool shapes, for the run's metadata."""
        return [{"slots": p.slots, "capacity_tokens": p.capacity_tokens} for p in self.pools]

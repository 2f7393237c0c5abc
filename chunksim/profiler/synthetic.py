"""Synthetic steps for grid points: KV pools with stand-in contents, random tokens, a plan.

A point (chunk_len, prior_len, decode_count, kv_len) becomes one `StepBatch`: the chunk's
sequence in a one-slot pool holding prior_len + chunk_len tokens, and the decodes in
adjacent slots of a second pool of kv_len + 1 tokens each (two pools because one uniform
pool would need (decodes + 1) x the longest sequence: 276 GB for an 8B model at 256 decodes
next to an 8192-token chunk). Pools grow and are reused across points; when the grown pair
would not fit the memory budget they are rebuilt at exactly the point's size.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch

from chunksim.decoder.device import free_cached
from chunksim.decoder.kv import KVPool, kv_pool_bytes
from chunksim.decoder.model import LlamaModel
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step
from chunksim.profiler.grid import GridPoint

Shape = tuple[int, int]  # (slots, capacity_tokens)


class PointStepper:
    """Turns grid points into ready-to-time step closures over reusable pools."""

    def __init__(self, model: LlamaModel, device: str, dtype: torch.dtype,
                 kv_budget_bytes: float, seed: int = 0):
        self.model = model
        self.device = device
        self.dtype = dtype
        self.kv_budget_bytes = kv_budget_bytes
        self.seed = seed
        self.pools: dict[str, KVPool] = {}

    def _bytes(self, shape: Shape | None) -> int:
        return 0 if shape is None else kv_pool_bytes(self.model.cfg, *shape, self.dtype)

    def _ensure_pools(self, needs: dict[str, Shape | None]) -> None:
        plan: dict[str, Shape | None] = {}
        for name, need in needs.items():
            cur = self.pools.get(name)
            cur_shape = None if cur is None else (cur.slots, cur.capacity_tokens)
            if need is None or (cur is not None and cur.fits(*need)):
                plan[name] = cur_shape
            elif cur_shape is None:
                plan[name] = need
            else:
                plan[name] = (max(need[0], cur_shape[0]), max(need[1], cur_shape[1]))
        if sum(self._bytes(s) for s in plan.values()) > self.kv_budget_bytes:
            plan = dict(needs)  # no headroom: exactly this point's pools, nothing kept
        for name, shape in plan.items():
            cur = self.pools.get(name)
            if cur is not None and (cur.slots, cur.capacity_tokens) != shape:
                del self.pools[name]
                del cur
                gc.collect()
                free_cached(self.device)
        for name, shape in plan.items():
            if shape is not None and name not in self.pools:
                self.pools[name] = KVPool(self.model.cfg, shape[0], shape[1], self.device,
                                          self.dtype, fill_seed=self.seed)

    def step_fn(self, point: GridPoint) -> Callable[[], torch.Tensor]:
        """A closure running `point`'s forward step; the planning is done here, untimed.
        The closure holds the pools it runs on: drop the previous one before asking for
        the next, or pools this point must rebuild stay allocated beside the new ones."""
        needs: dict[str, Shape | None] = {
            "chunk": (1, point.prior_len + point.chunk_len) if point.chunk_len else None,
            "decode": (point.decode_count, point.kv_len + 1) if point.decode_count else None,
        }
        self._ensure_pools(needs)
        pools: list[KVPool] = []
        seqs: list[SeqSlice] = []
        if point.chunk_len:
            pools.append(self.pools["chunk"])
            seqs.append(SeqSlice(slot=0, cached_tokens=point.prior_len,
                                 new_tokens=point.chunk_len, pool=len(pools) - 1))
        if point.decode_count:
            pools.append(self.pools["decode"])
            seqs.extend(SeqSlice(slot=i, cached_tokens=point.kv_len, new_tokens=1,
                                 pool=len(pools) - 1) for i in range(point.decode_count))
        batch = StepBatch(tuple(seqs))
        prepared = prepare_step(batch, pools, self.device)
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        tokens = torch.randint(0, self.model.cfg.vocab_size, (batch.total_tokens,),
                               generator=gen, device=self.device)
        model = self.model
        return lambda: model.forward_step(tokens, prepared, pools)

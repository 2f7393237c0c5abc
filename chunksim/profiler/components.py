"""Time a step's components on one decoder layer at the model's real (or sharded) shapes.

`LayerBench` holds a one-layer model of the shapes being profiled (the layer's weights,
the embedding and the LM head, never the whole model) and times, each with the
profiler's warm-up-and-repeat `measure`:

- `dense(T)`: `Block.dense_in` + `Block.dense_out` on T tokens (attention stood in by q);
- `prefill_attn(L, c)`: `attend` of one chunk of L tokens over c cached ones;
- `decode_attn(D, lengths)`: `attend` of D decodes at the given contexts, adjacent slots
  of one pool (the live loop's decode group, padded and masked when lengths differ);
- `embed(T)`: `LlamaModel.embed_step`; `head(n)`: `LlamaModel.head_step` on n rows;
- of a MoE model, `dense(T)` leaves the routed experts out (router, dispatch and shared
  experts stay in), and `expert(n)` times `MoeFFN.expert_apply`: one expert on n routed
  rows, gathered, through its SwiGLU, added back.

The closures run exactly the model code a whole forward pass runs, so the composition
prices the same kernels.

Cold, as in a whole step: between two runs of a closure, untimed, the bench reads an
eviction buffer as large as what the rest of a forward pass reads (the other layers'
weights and the LM head: `evict_bytes`, capped at `EVICT_CAP_BYTES`). Timed back to back,
one layer's weights and a small step's KV stay in the processor's cache; in a whole
model they do not (the next use of layer i's weights comes a whole step later), so a
warm small step's layer is timed cheaper than it runs inside the model.

After the layer before it, on CPU (`prime`): inside a step, a layer runs right after the
same work on the layer before it, so its own weights and KV are cold but the code every
op runs (torch's dispatch, the kernels' instructions, in the same caches as the data on
a CPU) is warm. The eviction read flushes that code too, so on CPU the bench then runs
the same closure on a second layer's weights and KV (untimed) before each timed run. A
GPU's eviction read leaves the host's caches alone, so there nothing is primed. What the
first layer of a step pays for its cold code is once per step: the fixed cost's fit on
whole steps holds it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from chunksim.decoder.attention import attend, sdpa_kernels
from chunksim.decoder.config import ModelConfig
from chunksim.decoder.kv import KVPool
from chunksim.decoder.model import build_model
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step
from chunksim.profiler.timing import Timing, measure

EVICT_CAP_BYTES = 128 * 2**20
"""Largest eviction read between two runs: above every GPU's L2 and a CPU core's L2; a
layer of a model whose weights exceed it is cold anyway."""


def evict_bytes(weights_bytes: int, layer_bytes: int) -> int:
    """What the rest of a forward pass reads between two uses of one layer's weights:
    the whole model's weights (embedding and head included) but that layer's, capped at
    `EVICT_CAP_BYTES`."""
    return max(0, min(EVICT_CAP_BYTES, weights_bytes - layer_bytes))


class LayerBench:
    """A one-layer model of `cfg`'s shapes and reusable KV pools, on `device`."""

    def __init__(self, cfg: ModelConfig, device: str, dtype: torch.dtype, seed: int,
                 sync: Callable[[], None], timing: dict, evict: int = 0,
                 prime: bool = False) -> None:
        """`evict`: bytes read between two runs of a timed closure (0: none, warm).
        `prime`: run a layer's closure on the layer before it first (module docstring);
        the bench then holds two layers."""
        from dataclasses import replace

        self.prime = prime
        self.cfg = replace(cfg, n_layers=2 if prime else 1)
        self.device, self.dtype, self.seed, self.sync = device, dtype, seed, sync
        self.timing = timing
        self.model = build_model(self.cfg, device, dtype, seed=seed)
        self.block = self.model.layers[0]
        self.pools: dict[str, KVPool] = {}
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.evict_bytes = evict
        self._evict = (torch.ones(max(1, evict // 4), dtype=torch.float32, device=device)
                       if evict > 0 else None)

    def _cold(self) -> None:
        self._evict.sum()

    def _pool(self, name: str, slots: int, capacity: int) -> KVPool:
        cur = self.pools.get(name)
        if cur is None or not cur.fits(slots, capacity):
            if cur is not None:
                slots, capacity = max(slots, cur.slots), max(capacity, cur.capacity_tokens)
                del self.pools[name], cur
            self.pools[name] = KVPool(self.cfg, slots, capacity, self.device, self.dtype,
                                      fill_seed=self.seed)
        return self.pools[name]

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, device=self.device).to(self.dtype)

    def _time(self, fn: Callable[[], object],
              before: Callable[[], object] | None = None) -> Timing:
        """Time `fn`; before each run, untimed: the eviction read, then `before` (the
        same work on the layer before, when primed)."""
        t = self.timing
        untimed = [f for f in (self._cold if self._evict is not None else None,
                               before if self.prime else None) if f is not None]
        between = (lambda: [f() for f in untimed]) if untimed else None
        with sdpa_kernels(self.model.sdpa_backends if self.device == "cuda" else None):
            return measure(fn, t["warmup"], t["repeats"], self.sync, min_repeats=3,
                           budget_s=t["point_budget_s"], min_timed_s=t["point_min_s"],
                           clock=t["clock"], between=between)

    def _step(self, seqs: list[SeqSlice], pools: list[KVPool]):
        return prepare_step(StepBatch(tuple(seqs)), pools, self.device)

    def _chunk_step(self, tokens: int, prior: int = 0):
        pool = self._pool("chunk", 1, prior + tokens)
        return self._step([SeqSlice(0, prior, tokens)], [pool]), [pool]

    def dense(self, tokens: int) -> Timing:
        step, pools = self._chunk_step(tokens)
        x = self._rand(tokens, self.cfg.hidden_size)
        _, cos, sin = self.model.embed_step(torch.zeros(tokens, dtype=torch.long,
                                                        device=self.device), step)
        layers = self.model.layers

        def run(i: int):
            return lambda: layers[i].dense_out(x, layers[i].dense_in(i, x, cos, sin, step,
                                                                     pools), routed=False)
        return self._time(run(0), run(1) if self.prime else None)

    def prefill_attn(self, chunk: int, prior: int) -> Timing:
        step, pools = self._chunk_step(chunk, prior)
        q = self._rand(chunk, self.cfg.n_heads, self.cfg.head_dim)
        return self._time(lambda: attend(0, q, step, pools),
                          lambda: attend(1, q, step, pools))

    def decode_attn(self, lengths: list[int]) -> Timing:
        pool = self._pool("decode", len(lengths), max(lengths) + 1)
        step = self._step([SeqSlice(i, c, 1) for i, c in enumerate(lengths)], [pool])
        q = self._rand(len(lengths), self.cfg.n_heads, self.cfg.head_dim)
        return self._time(lambda: attend(0, q, step, [pool]),
                          lambda: attend(1, q, step, [pool]))

    def expert(self, tokens: int) -> Timing:
        """One routed expert's FFN on `tokens` rows (a MoE model)."""
        h = self._rand(tokens, self.cfg.hidden_size)
        rows = torch.arange(tokens, device=self.device)
        weights = torch.ones(tokens, dtype=self.dtype, device=self.device)
        out = torch.zeros_like(h)
        layers = self.model.layers

        def run(i: int):
            return lambda: layers[i].moe.expert_apply(0, h, rows, weights, out)
        return self._time(run(0), run(1) if self.prime else None)

    def embed(self, tokens: int) -> Timing:
        step, _ = self._chunk_step(tokens)
        ids = torch.randint(0, self.cfg.vocab_size, (tokens,), generator=self.gen,
                            device=self.device)
        return self._time(lambda: self.model.embed_step(ids, step))

    def head(self, logits: int) -> Timing:
        # `logits` sequences, one token each: the head reads one row per sequence
        n = max(logits, 1)
        pool = self._pool("decode", n, 2)
        seqs = [SeqSlice(i, 0, 1, needs_logits=i < logits) for i in range(n)]
        step = self._step(seqs, [pool])
        x = self._rand(n, self.cfg.hidden_size)
        return self._time(lambda: self.model.head_step(x, step))

    def close(self) -> None:
        self.pools.clear()
        self._evict = None
        del self.model, self.block

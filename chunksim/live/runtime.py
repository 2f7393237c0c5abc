"""The live loop's execution environment: the profiled model on its device, dtype and
thread count, a synchronize, and a warm-up before the clock starts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from chunksim.decoder.device import device_memory_bytes, pin_host_allocator, synchronizer
from chunksim.decoder.kv import KVPool
from chunksim.decoder.model import build_model
from chunksim.decoder.step import PreparedStep, SeqSlice, StepBatch, prepare_step
from chunksim.live.settings import LiveSettings

# Warm-up shapes (cached tokens, new tokens) per sequence: a first chunk, a later chunk,
# decodes of unequal lengths on scattered slots, and a mixed step. They pay the one-off
# costs (allocator growth, kernel selection, cold caches) that the profiler's warm-up runs
# also keep out of its table.
_WARMUP_STEPS: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((0, 0, 256),),
    ((0, 256, 64),),
    tuple((s, 100 + 37 * s, 1) for s in (1, 3, 4, 6, 9, 10, 12, 15)),
    ((0, 0, 128),) + tuple((s, 200, 1) for s in range(1, 5)),
)


@contextlib.contextmanager
def pinned_threads(threads: int | None) -> Iterator[None]:
    """torch intra-op threads set for the block (CPU), restored afterwards."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Runtime:
    """Model + device facts for one live run."""

    def __init__(self, settings: LiveSettings) -> None:
        if settings.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("the profile was measured on CUDA but torch sees no CUDA device; "
                             "validate it on the machine it was profiled on")
        self.settings = settings
        self.device = settings.device
        self.dtype = getattr(torch, settings.dtype)
        # as the profiler runs (decoder.device.pin_host_allocator says why)
        self.host_allocator = pin_host_allocator() if self.device == "cpu" else None
        self.model = build_model(settings.model, settings.device, self.dtype,
                                 seed=settings.seed)
        self.sync = synchronizer(settings.device)

    def kv_bytes_budget(self) -> float:
        """Bytes the live KV pools may take: the memory share minus the weights."""
        s = self.settings
        return (s.memory_fraction * device_memory_bytes(s.device)
                - s.model.weights_bytes(s.dtype))

    def prepare(self, batch: StepBatch, token_ids: np.ndarray,
                pools: list[KVPool]) -> tuple[PreparedStep, torch.Tensor]:
        """Index tensors and input ids of one pass, on the device (per-step CPU work)."""
        ids = torch.from_numpy(token_ids).to(self.device, non_blocking=True)
        return prepare_step(batch, pools, self.device), ids

    def forward(self, prepared: PreparedStep, ids: torch.Tensor,
                pools: list[KVPool]) -> torch.Tensor:
        """Run one prepared pass; returns its logits (not synchronized)."""
        return self.model.forward_step(ids, prepared, pools)

    @torch.inference_mode()
    def warm_up(self) -> None:
        """Run each warm-up shape `warmup_steps` times on a scratch pool."""
        n = self.settings.warmup_steps
        if n == 0:
            return
        cfg = self.settings.model
        cap = min(512, cfg.max_position)
        pool = [KVPool(cfg, 16, cap, self.device, self.dtype)]
        rng = np.random.default_rng(0)
        for shape in _WARMUP_STEPS:
            seqs = tuple(SeqSlice(slot=s, cached_tokens=min(c, cap - t), new_tokens=t)
                         for s, c, t in shape)
            batch = StepBatch(seqs)
            ids = rng.integers(0, cfg.vocab_size, batch.total_tokens).astype(np.int64)
            for _ in range(n):
                self.forward(*self.prepare(batch, ids, pool), pool).argmax(-1).tolist()
        self.sync()

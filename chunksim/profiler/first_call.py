"""Does the machine charge for a step shape it has not run before?

The profiler times each grid point after a warm-up, so a cost paid once per new shape (an
attention library building a plan per shape, a kernel compiled on first use, an allocator
growing) never reaches the table; a serving loop meets a new KV length every step and
pays it every time. `first_call_ratios` runs steps of three kinds, each shape once (its
first call) and then each again (a repeat), and returns, per kind, the median first-call
time over the median repeat time: ~1 where novelty is free. `sim profile` records it
(`first_call` in the profile JSON) and warns above `WARN_RATIO`.

The known case: torch's default SDPA kernel on recent GPUs (cuDNN) builds a plan per new
shape, which is why the model excludes it (decoder.attention.SDPA_BACKENDS; what it cost
on an H200: docs/results/h200.md). This probe shows such a cost directly, with torch's
default kernels and with chunksim's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from chunksim.decoder.kv import KVPool
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step

WARN_RATIO = 1.5
"""A first call this many times its repeat makes `sim profile` warn: the table, timed
warm, then under-prices serving, where shapes are new every step."""

KINDS = ("decode", "decodes_unequal", "prefill_chunk")
"""One decode (no mask); two decodes of unequal lengths (masked, padded); a chunk of 64 +
i tokens over a cached prefix (lower-right causal)."""


def _batch(kind: str, i: int, kv_start: int) -> StepBatch:
    if kind == "decode":
        return StepBatch((SeqSlice(slot=0, cached_tokens=kv_start + i, new_tokens=1),))
    if kind == "decodes_unequal":
        return StepBatch((SeqSlice(slot=0, cached_tokens=kv_start + i, new_tokens=1),
                          SeqSlice(slot=1, cached_tokens=kv_start + i + 37, new_tokens=1)))
    return StepBatch((SeqSlice(slot=0, cached_tokens=kv_start, new_tokens=64 + i),))


def first_call_ratios(model, device: str, dtype: torch.dtype, sync: Callable[[], None],
                      count: int = 12, kv_start: int = 1500) -> dict:
    """Per kind: median first-call and repeat forward time (s) over `count` new shapes and
    their ratio, for `model` as it is set (its `sdpa_backends`). KV lengths are
    `kv_start + i` (+37), chunks 64 + i tokens over `kv_start`: pass a `kv_start` this
    process has not run (a shape cache is process-wide)."""
    cfg = model.cfg
    need = kv_start + 64 + count
    if need > cfg.max_position:
        raise ValueError(f"kv_start={kv_start}: shapes up to {need} tokens exceed the model's "
                         f"max_position {cfg.max_position}; pass a smaller kv_start")
    pools = [KVPool(cfg, 2, need, device, dtype)]
    out = {}
    with torch.inference_mode():
        for kind in KINDS:
            prepared = []
            for i in range(count):
                batch = _batch(kind, i, kv_start)
                ids = torch.zeros(batch.total_tokens, dtype=torch.long, device=device)
                prepared.append((prepare_step(batch, pools, device), ids))
            sync()
            first = [_timed(model, sync, p, ids, pools) for p, ids in prepared]
            again = [_timed(model, sync, p, ids, pools) for p, ids in prepared]
            f, a = float(np.median(first)), float(np.median(again))
            out[kind] = {"first_s": f, "repeat_s": a, "ratio": f / a if a > 0 else None}
    del pools
    return out


def _timed(model, sync, prepared, ids, pools) -> float:
    t0 = time.perf_counter()
    model.forward_step(ids, prepared, pools)
    sync()
    return time.perf_counter() - t0


def compare_kernels(model, device: str, dtype: torch.dtype, sync: Callable[[], None],
                    count: int = 12) -> dict:
    """`first_call_ratios` with torch's default SDPA kernels and with the project's
    (`decoder.attention.SDPA_BACKENDS`), on disjoint shapes; the model is left as found."""
    kept = model.sdpa_backends
    out = {}
    try:
        for label, backends, start in (("torch_default", None, 1500),
                                       ("chunksim", kept, 1700)):
            model.sdpa_backends = backends
            out[label] = {"sdpa_backends": None if backends is None else list(backends),
                          **first_call_ratios(model, device, dtype, sync, count, start)}
    finally:
        model.sdpa_backends = kept
    return out


def costly_kind(result: dict | None) -> tuple[str, float] | None:
    """(kind, ratio) of the largest first-call ratio in one `first_call_ratios` result
    when it reaches `WARN_RATIO` (what `sim profile` warns of and validation notes), else
    None (also for no result)."""
    if not result:
        return None
    kind = max(KINDS, key=lambda k: result[k]["ratio"] or 0.0)
    ratio = result[kind]["ratio"] or 0.0
    return (kind, ratio) if ratio >= WARN_RATIO else None


def format_first_call(result: dict) -> str:
    """A small table: rows = kernel sets, columns = kinds, cells = first / repeat."""
    head = f"{'SDPA kernels':<16}" + "".join(f"{k:>28}" for k in KINDS)
    lines = [head, "-" * len(head)]
    for label, r in result.items():
        cells = "".join(f"{r[k]['first_s'] * 1e3:.2f}/{r[k]['repeat_s'] * 1e3:.2f} ms "
                        f"{r[k]['ratio']:.2f}x".rjust(28) for k in KINDS)
        lines.append(f"{label:<16}{cells}")
    return "\n".join(lines)

"""Re-time a sample of a profile's points now, with the profiler's own synthetic steps: how
fast the machine is at validation time on the points the table holds (drift check)."""

from __future__ import annotations

import random

import numpy as np
import torch

from chunksim.live.replay import _median_s


def probe_rows(table, max_position: int, count: int = 30, below_s: float = 0.02,
               max_kv_tokens: int = 16384, seed: int = 0) -> list[int]:
    """`count` random fast, small rows of a profile table: at most `max_kv_tokens` of KV,
    so the stand-in pools stay a few MB, and within the model's `max_position`."""
    t = table
    kv_tokens = t["decode_count"] * (t["kv_len"] + 1) + t["prior_len"] + t["chunk_len"]
    longest = np.maximum(t["prior_len"] + t["chunk_len"], t["kv_len"] + 1)
    ok = (t["median_s"] < below_s) & (kv_tokens <= max_kv_tokens) & (longest <= max_position)
    fast = t.index[ok].tolist()
    return sorted(random.Random(seed).sample(fast, min(count, len(fast))))


def remeasure_points(runtime, table, rows: list[int], seed: int = 0) -> np.ndarray:
    """Re-time the given rows of a profile table (median s) with the profiler's own
    synthetic steps, now: how fast the machine is now on the points the table holds."""
    from chunksim.profiler.store import point_of
    from chunksim.profiler.synthetic import PointStepper

    stepper = PointStepper(runtime.model, runtime.device, runtime.dtype, runtime.kv_bytes_budget(),
                           seed=seed)
    out = np.empty(len(rows))
    with torch.inference_mode():
        for j, i in enumerate(rows):
            row = table.loc[i]
            point = point_of({k: str(int(row[k])) for k in ("chunk_len", "prior_len",
                                                               "decode_count", "kv_len")})
            out[j] = _median_s(stepper.step_fn(point), runtime.sync, 9)
    return out

"""Flat records the engine emits: one row per step, one per request, and pooled token gaps.

Columns grow in numpy arrays (amortized doubling) so the hot path writes scalars or slices.
"""

from __future__ import annotations

import numpy as np

STEP_COLUMNS: dict[str, type] = {
    "start_s": float,          # step start, seconds
    "duration_s": float,       # forward pass(es) + per-step overhead, seconds
    "prefill_tokens": int,     # prefill tokens over all chunks
    "prefill_requests": int,   # requests computing a chunk of > 1 token
    "prior_tokens": float,     # effective prior context of the prefill part (latency.py)
    "decodes": int,            # requests computing exactly one token
    "decode_kv_tokens": float, # mean context of the decodes
    "tokens_emitted": int,     # output tokens sampled at the end of the step
    "kv_blocks_used": int,     # KV blocks in use during the step
    "running": int,            # requests running in the step (after admission/preemption)
    "waiting": int,            # requests queued at the step's start
    "preempted": int,          # requests preempted right before the step
    "extrapolated": bool,      # latency lookup left the measured grid
}


class StepLog:
    """Column store for step records."""

    def __init__(self, capacity: int = 4096) -> None:
        self.n = 0
        self.cols = {k: np.zeros(capacity, dtype=t) for k, t in STEP_COLUMNS.items()}

    def reserve(self, extra: int) -> None:
        cap = len(self.cols["start_s"])
        if self.n + extra <= cap:
            return
        new = max(cap * 2, self.n + extra)
        for k, a in self.cols.items():
            b = np.zeros(new, dtype=a.dtype)
            b[: self.n] = a[: self.n]
            self.cols[k] = b

    def append(self, row: tuple) -> None:
        """One step, values in STEP_COLUMNS order."""
        self.reserve(1)
        i = self.n
        for a, v in zip(self.cols.values(), row, strict=True):
            a[i] = v
        self.n += 1

    def extend_decodes(self, start_s, duration_s, decodes: int, kv_tokens, kv_blocks_used,
                       extrapolated) -> None:
        """k decode-only steps of `decodes` requests each (the engine's bulk path). Columns
        not written stay 0, which is their value for such steps."""
        k = len(start_s)
        self.reserve(k)
        i, j = self.n, self.n + k
        c = self.cols
        c["start_s"][i:j] = start_s
        c["duration_s"][i:j] = duration_s
        c["decodes"][i:j] = decodes
        c["decode_kv_tokens"][i:j] = kv_tokens
        c["tokens_emitted"][i:j] = decodes
        c["kv_blocks_used"][i:j] = kv_blocks_used
        c["running"][i:j] = decodes
        c["extrapolated"][i:j] = extrapolated
        self.n = j

    def frame(self):
        import pandas as pd

        return pd.DataFrame({k: a[: self.n] for k, a in self.cols.items()})


class GapLog:
    """Pooled inter-token gaps (vLLM bench's ITL): single values and weighted runs."""

    def __init__(self) -> None:
        self.single: list[float] = []
        self.runs: list[tuple[np.ndarray, int]] = []  # (gaps, how many requests each)

    def values(self) -> np.ndarray:
        parts = [np.asarray(self.single, dtype=float)]
        parts += [np.repeat(g, w) for g, w in self.runs]
        return np.concatenate(parts) if parts else np.zeros(0)

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
    """Pooled inter-token gaps (vLLM bench's ITL): single values and runs of equal gaps
    shared by a set of requests; split per request class when there are several."""

    def __init__(self, num_classes: int = 1) -> None:
        self.split = num_classes > 1
        self.num_classes = num_classes
        self.single: list[float] = []
        self.single_cls: list[int] = []
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []  # (gaps, requests per class)

    def add(self, gap_s: float, cls: int) -> None:
        self.single.append(gap_s)
        if self.split:
            self.single_cls.append(cls)

    def add_run(self, gaps_s: np.ndarray, requests) -> None:
        """Every request in `requests` had each of `gaps_s` once."""
        if self.split:
            counts = np.bincount([r.class_idx for r in requests], minlength=self.num_classes)
        else:
            counts = np.array([len(requests)])
        self.runs.append((gaps_s, counts))

    def values(self, cls: int | None = None) -> np.ndarray:
        """All pooled gaps (or one class's)."""
        single = np.asarray(self.single, dtype=float)
        if cls is not None:
            single = single[np.asarray(self.single_cls, dtype=int) == cls]
        parts = [single]
        for g, counts in self.runs:
            w = int(counts.sum() if cls is None else counts[cls])
            if w:
                parts.append(np.tile(g, w))
        return np.concatenate(parts)

    def by_class(self, names: list[str]) -> dict[str, np.ndarray]:
        return {n: self.values(i) for i, n in enumerate(names)} if self.split else {}

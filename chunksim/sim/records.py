"""Flat records the engine emits: one row per step, one per request, pooled token gaps and
(optional) the schedule: one row per (step, request) and per preemption.

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


KIND_NEW, KIND_RESUMED, KIND_PREFILL, KIND_DECODE, KIND_PREEMPTED = range(5)
KINDS = ("new", "resumed", "prefill", "decode", "preempted")
"""Schedule-row kinds: admitted for the first time; re-admitted after a preemption; a
running request's next prefill chunk; a decode; preempted before the step."""

SCHEDULE_COLUMNS: dict[str, type] = {
    "step": int,            # row of steps.csv (a preemption: the step it precedes)
    "request_id": int,
    "kind": int,            # KINDS index (written as its name)
    "tokens": int,          # new tokens scheduled (0 for a preemption)
    "position": int,        # place in the step's batch, from 0 (-1 for a preemption)
    "computed_tokens": int, # KV tokens held before the step (after prefix hits); for a
                            # preemption, the computed tokens it loses
    "cached_tokens": int,   # prefix-cache hit taken at admission (new / resumed rows)
    "blocks": int,          # KV blocks held during the step (preemption: before it)
    "blocks_freed": int,    # blocks a preemption returned to the free pool
}


class ScheduleLog:
    """Column store for the schedule log (`--schedule-log`): every scheduling decision,
    so a policy's plans can be checked row by row."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.bulk: list[tuple] = []  # decode-all stretches, stored as arrays

    def add(self, step: int, request_id: int, kind: int, tokens: int, position: int,
            computed: int, cached: int, blocks: int, blocks_freed: int = 0) -> None:
        self.rows.append((step, request_id, kind, tokens, position, computed, cached,
                          blocks, blocks_freed))

    def add_decodes(self, first_step: int, request_ids, computed, blocks) -> None:
        """k decode-all steps from `first_step` on: `computed` and `blocks` are (requests,
        k) arrays of each request's context and blocks held in each step."""
        self.bulk.append((first_step, np.asarray(request_ids, dtype=np.int64),
                          np.asarray(computed, dtype=np.int64),
                          np.asarray(blocks, dtype=np.int64)))

    def frame(self):
        import pandas as pd

        names = list(SCHEDULE_COLUMNS)
        parts = [pd.DataFrame(self.rows, columns=names, dtype=np.int64)
                 if self.rows else pd.DataFrame({n: np.zeros(0, np.int64) for n in names})]
        for first, ids, computed, blocks in self.bulk:
            n, k = computed.shape
            parts.append(pd.DataFrame({
                "step": np.repeat(first + np.arange(k, dtype=np.int64), n),
                "request_id": np.tile(ids, k),
                "kind": np.full(n * k, KIND_DECODE, dtype=np.int64),
                "tokens": np.ones(n * k, dtype=np.int64),
                "position": np.tile(np.arange(n, dtype=np.int64), k),
                "computed_tokens": computed.T.reshape(-1),
                "cached_tokens": np.zeros(n * k, dtype=np.int64),
                "blocks": blocks.T.reshape(-1),
                "blocks_freed": np.zeros(n * k, dtype=np.int64),
            }))
        df = pd.concat(parts, ignore_index=True)
        # preemptions first within their step, then the batch in order
        df = df.sort_values(["step", "position"], kind="stable").reset_index(drop=True)
        df["kind"] = pd.Categorical.from_codes(df["kind"].to_numpy(), categories=list(KINDS))
        return df

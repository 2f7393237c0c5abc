"""A fleet's records: the replicas' records merged into one run's, plus per-replica rows.

Each replica's `EngineCore` sizes its per-request arrays by the whole workload, so a
request's row is taken from the replica that served it (`dest`). Steps keep their replica
in a `replica` column, ordered by start time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from chunksim.sim.engine import SimResult


def merge_results(results: list[SimResult], dest: np.ndarray) -> SimResult:
    """One run's records from the replicas' (`dest`: each request's replica)."""
    frames = [res.requests[dest == r] for r, res in enumerate(results)]
    requests = pd.concat(frames).sort_values("request_id", kind="stable")
    requests = requests.reset_index(drop=True)
    requests["replica"] = dest
    steps = merge_steps([res.steps for res in results])
    itl = np.concatenate([res.itl_s for res in results])
    by_class = {c: np.concatenate([res.itl_by_class_s[c] for res in results])
                for c in results[0].itl_by_class_s}
    return SimResult(requests, steps, itl, merged_meta([res.meta for res in results]),
                     by_class)


def merge_steps(frames: list) -> pd.DataFrame:
    """Every replica's steps with a `replica` column, by start time (ties: replica)."""
    parts = []
    for r, f in enumerate(frames):
        f = f.copy()
        f["replica"] = r
        parts.append(f)
    steps = pd.concat(parts).sort_values("start_s", kind="stable")
    return steps.reset_index(drop=True)


def merged_meta(metas: list[dict]) -> dict:
    """Replica 0's run facts, counters summed; KV blocks are per replica."""
    meta = dict(metas[0])
    meta["preemption_only_steps"] = sum(m["preemption_only_steps"] for m in metas)
    return meta


def replica_rows(results: list[SimResult], dest: np.ndarray, duration_s: float,
                 label: str = "replica") -> list[dict]:
    """Per replica: requests served, busy fraction (of the fleet run's duration),
    preemptions, P99 TTFT and ITL."""
    rows = []
    for r, res in enumerate(results):
        req = res.requests[(dest == r) & ~res.requests["rejected"].to_numpy()]
        ttft = (req["first_token_s"] - req["arrival_s"]).to_numpy() * 1000.0
        busy = float(res.steps["duration_s"].sum())
        rows.append({
            label: r,
            "requests": int((dest == r).sum()),
            "completed": len(req),
            "busy_fraction": busy / max(duration_s, 1e-12),
            "steps": len(res.steps),
            "preemptions": int(req["preemptions"].sum()),
            "p99_ttft_ms": float(np.percentile(ttft, 99)) if len(ttft) else 0.0,
            "p99_itl_ms": (float(np.percentile(res.itl_s, 99)) * 1000.0
                           if len(res.itl_s) else 0.0),
            "peak_kv_blocks_used": (int(res.steps["kv_blocks_used"].max())
                                    if len(res.steps) else 0),
        })
    return rows

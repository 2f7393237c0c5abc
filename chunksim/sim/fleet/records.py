"""A fleet's records: the replicas' records merged into one run's, plus per-replica rows.

Each replica's `EngineCore` sizes its per-request arrays by the whole workload, so a
request's row is taken from the replica that served it (`dest`). Steps keep their replica
in a `replica` column, ordered by start time.
"""

from __future__ import annotations

import numpy as np

from chunksim.core.speculative import merge_spec
from chunksim.sim.engine.engine import SimResult
from chunksim.sim.records.quantiles import Samples
from chunksim.sim.records.records import STEP_COLUMNS


def merge_results(results: list[SimResult], dest: np.ndarray) -> SimResult:
    """One run's records from the replicas' (`dest`: each request's replica)."""
    requests = _served_rows([res.request_columns for res in results], dest)
    requests["replica"] = dest
    parts = [_columns(res) for res in results]
    itl = Samples.pool([res.itl_s for res in results])
    by_class = {c: Samples.pool([res.itl_by_class_s[c] for res in results])
                for c in results[0].itl_by_class_s}
    return SimResult(requests, lambda: merge_steps(parts), itl,
                     merged_meta([res.meta for res in results]), by_class, step_parts=parts,
                     step_part_totals=[res.step_totals for res in results])


def _served_rows(tables: list, dest: np.ndarray) -> dict[str, np.ndarray]:
    """Each request's row from the table of the replica that served it (`dest`), in
    request order: every replica's table has a row for every request of the workload
    (`EngineCore.request_columns`), so a column is replica 0's with the others' rows laid
    over it where `dest` names them."""
    out = {}
    for name in tables[0]:
        col = _array(tables[0][name]).copy()
        for r in range(1, len(tables)):
            mine = dest == r
            if mine.any():
                col[mine] = _array(tables[r][name])[mine]
        out[name] = col
    return out


def _array(col) -> np.ndarray:
    """A column as an array; text as objects, not fixed-width strings, so that a longer
    one laid over it stays whole."""
    arr = np.asarray(col)
    return arr.astype(object) if arr.dtype.kind == "U" else arr


def _columns(res: SimResult):
    """An engine's steps as the merge reads them: its columns, unbuilt, where it kept
    them (`SimResult.step_columns`), else its frame."""
    return res.step_columns if res.step_columns is not None else res.steps


def merge_steps(frames: list) -> dict[str, np.ndarray]:
    """Every replica's steps (frames or `records.StepColumns`) with a `replica` column,
    by start time (ties: replica), as columns by name (`SimResult.steps` makes the
    frame of them when read)."""
    # one stable argsort and one take per column (as concat + sort_values, without
    # copying every replica's frame first)
    order = np.argsort(np.concatenate([np.asarray(f["start_s"]) for f in frames]),
                       kind="stable")
    cols = {c: np.concatenate([np.asarray(f[c]) for f in frames])[order]
            for c in frames[0].columns}
    cols["replica"] = np.repeat(np.arange(len(frames), dtype=np.int64),
                                [len(f) for f in frames])[order]
    return cols


def no_steps() -> dict[str, np.ndarray]:
    """`merge_steps`' columns without rows: the steps of a fleet that keeps none."""
    cols = {c: np.zeros(0, dtype=t) for c, t in STEP_COLUMNS.items()}
    cols["replica"] = np.zeros(0, dtype=np.int64)
    return cols


def merged_meta(metas: list[dict]) -> dict:
    """Replica 0's run facts, counters summed; KV blocks are per replica."""
    meta = dict(metas[0])
    meta["preemption_only_steps"] = sum(m["preemption_only_steps"] for m in metas)
    meta.update(merge_spec(metas))  # speculative decoding: every engine's drafts
    return meta


def replica_rows(results: list[SimResult], dest: np.ndarray, duration_s: float,
                 label: str = "replica") -> list[dict]:
    """Per replica: requests served, busy fraction (of the fleet run's duration),
    preemptions, P99 TTFT and ITL."""
    rows = []
    for r, res in enumerate(results):
        cols = res.request_columns
        done = (dest == r) & ~np.asarray(cols["rejected"])
        ttft = (np.asarray(cols["first_token_s"])[done]
                - np.asarray(cols["arrival_s"])[done]) * 1000.0
        steps = _columns(res)
        busy = float(np.asarray(steps["duration_s"]).sum())
        rows.append({
            label: r,
            "requests": int((dest == r).sum()),
            "completed": int(done.sum()),
            "busy_fraction": busy / max(duration_s or 0.0, 1e-12),
            "steps": len(steps),
            "preemptions": int(np.asarray(cols["preemptions"])[done].sum()),
            "p99_ttft_ms": float(np.percentile(ttft, 99)) if len(ttft) else 0.0,
            "p99_itl_ms": (float(res.itl_s.percentile([99])[0]) if len(res.itl_s)
                           else 0.0) * 1000.0,
            "peak_kv_blocks_used": (int(np.asarray(steps["kv_blocks_used"]).max())
                                    if len(steps) else 0),
        })
    return rows


def merge_pd(prefill: list[SimResult], pdest: np.ndarray, decode: list[SimResult],
             ddest: np.ndarray, transfer_s: np.ndarray, kv_bytes: np.ndarray,
             output_tokens: np.ndarray) -> SimResult:
    """One run's records from a P/D fleet's: each request's prefill-instance row (its
    scheduling delay; TTFT too for a one-token request) and decode-instance row (its tokens,
    the first included), with `prefill_replica`, `decode_replica` (-1: none, a one-token
    request or one rejected before), `kv_transfer_s`, `kv_bytes`. Computed tokens add up
    both (the decode instance recomputes the prompt's last token). Steps number the
    instances prefill first: replica P + j is decode instance j."""
    p = merge_results(prefill, pdest)
    has_d = ddest >= 0
    d = merge_results(decode, np.where(has_d, ddest, 0)) if decode else None
    req = dict(p.request_columns)
    del req["replica"]
    req["output_tokens"] = output_tokens
    if d is not None:
        dr = d.request_columns
        for col in ("first_token_s", "finish_s", "generated_tokens", "max_itl_s"):
            req[col] = np.where(has_d, dr[col], req[col])
        for col in ("computed_tokens", "recomputed_tokens", "cached_tokens", "preemptions"):
            req[col] = req[col] + np.where(has_d, dr[col], 0)
        rej = has_d & dr["rejected"]
        req["rejected"] = req["rejected"] | rej
        req["reject_reason"] = np.where(rej, dr["reject_reason"], req["reject_reason"])
    req["prefill_replica"] = pdest
    req["decode_replica"] = ddest
    req["kv_transfer_s"] = transfer_s
    req["kv_bytes"] = kv_bytes
    parts = [_columns(r) for r in prefill] + [_columns(r) for r in decode]
    itl = Samples.pool([r.itl_s for r in prefill + decode])
    by_class = {c: Samples.pool([r.itl_by_class_s[c] for r in prefill + decode])
                for c in prefill[0].itl_by_class_s}
    meta = merged_meta([r.meta for r in prefill + decode])
    return SimResult(req, lambda: merge_steps(parts), itl, meta, by_class, step_parts=parts,
                     step_part_totals=[r.step_totals for r in prefill + decode])


def transfer_stats(transfer_s: np.ndarray, kv_bytes: np.ndarray) -> dict:
    """KV handoffs of a P/D run: count, bytes moved, transfer time percentiles (ms)."""
    t = transfer_s[np.isfinite(transfer_s)] * 1000.0
    out = {"transfers": len(t), "kv_bytes_moved": int(kv_bytes.sum())}
    if len(t):
        out.update(mean_transfer_ms=float(t.mean()), median_transfer_ms=float(np.median(t)),
                   p99_transfer_ms=float(np.percentile(t, 99)),
                   max_transfer_ms=float(t.max()))
    return out

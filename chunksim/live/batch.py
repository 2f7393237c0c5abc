"""A plan -> the forward pass(es) it runs: `StepBatch`es plus the token ids they consume.

Each scheduled (request, n) becomes a `SeqSlice`: its slot, `cached_tokens` = its
`num_computed_tokens` before the step, `new_tokens` = n, logits iff the step completes
its uncomputed tokens (that is when it samples). Input ids are positions
`cached .. cached + n - 1` of prompt + generated ids, so a decode feeds the token sampled
last and a recompute re-feeds everything it had.

Row order: prefill chunks in plan order, then the decodes sorted by (pool, slot), so a run
of adjacent slots is one zero-copy attention view, as in the profiler's measured steps.
The order only packs rows; `LivePass.logit_requests` maps logits back to requests.
A two-pass plan with both parts runs the prefill part and the decode part as two passes,
as `StepShape.batch_shapes` times them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chunksim.core.plan import Plan
from chunksim.decoder.step import SeqSlice, StepBatch
from chunksim.live.slots import SlotTable
from chunksim.live.tokens import TokenBook


@dataclass(frozen=True)
class LivePass:
    """One forward pass of a live step."""

    batch: StepBatch
    """Sequences in packed-row order."""
    token_ids: np.ndarray
    """`[batch.total_tokens]` input ids in row order (int64)."""
    logit_requests: tuple[int, ...]
    """Request id of each logits row, in row order."""


def build_passes(plan: Plan, slots: SlotTable, book: TokenBook) -> list[LivePass]:
    """The passes of `plan`; call after `EngineCore.begin_step` (slots held, counters not
    yet advanced)."""
    prefill: list[tuple[tuple[int, int], SeqSlice, int, np.ndarray, bool]] = []
    decode: list[tuple[tuple[int, int], SeqSlice, int, np.ndarray, bool]] = []
    for req, n in plan.scheduled:
        rid = req.request_id
        c = req.num_computed_tokens
        pool, slot = slots.where[rid]
        logits = c + n == req.num_tokens
        entry = ((pool, slot), SeqSlice(slot=slot, cached_tokens=c, new_tokens=n,
                                        needs_logits=logits, pool=pool),
                 rid, book.inputs(rid, c, n), logits)
        (decode if plan.is_decode(req) else prefill).append(entry)
    decode.sort(key=lambda e: e[0])
    if plan.two_pass and prefill and decode:
        return [_pass(prefill), _pass(decode)]
    return [_pass(prefill + decode)]


def _pass(entries) -> LivePass:
    ids = entries[0][3] if len(entries) == 1 else np.concatenate([e[3] for e in entries])
    return LivePass(StepBatch(tuple(e[1] for e in entries)), ids,
                    tuple(e[2] for e in entries if e[4]))

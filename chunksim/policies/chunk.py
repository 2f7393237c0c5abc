"""Fixed per-request chunk, three real variants.

- `mixed` models Sarathi (2023) / the classic "chunked prefill" of tutorials and the seed's
  mini-runtime: each prefilling request advances by min(chunk, remaining) per step, a
  per-step prefill budget bounds how many chunks join one step, and every running decode
  rides along in the same forward pass (decodes are not charged to the prefill budget).
- `two-pass` is the same plan run as two forward passes (prefill part, then decode part),
  as a teaching runtime does; step time = T(prefill part) + T(decode part).
- `alternate` models Sarathi-Serve's `simple_chunking` scheduler: prefill-only steps of at
  most `chunk` tokens alternate with decode-only steps.

Prefills go in order: running requests mid-prefill first, then waiting requests FCFS.
Decode growth preempts the most recently admitted request (recompute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chunksim.core.knobs import knob
from chunksim.core.ledger import KVLedger, preempt_until_fits
from chunksim.core.plan import Plan, SchedulerState
from chunksim.core.request import is_decode
from chunksim.policies.common import PolicyBase


@dataclass(frozen=True)
class FixedChunkPolicy(PolicyBase):
    """Fixed per-request chunk (Sarathi 2023): prompts advance a chunk per step."""

    chunk: int = knob(1024, "--chunk", min=1)
    """Prefill tokens per request per step (default 1024)."""
    variant: str = knob("mixed", "--variant")
    """mixed (Sarathi 2023: decodes ride along), two-pass (a prefill pass then a decode
    pass per step) or alternate (Sarathi-Serve simple_chunking: prefill-only and
    decode-only steps take turns)."""
    prefill_budget: int = knob(8192, "--prefill-budget", min=1)
    """Prefill tokens per step over all chunks (default 8192; alternate uses --chunk, as
    Sarathi-Serve does)."""
    max_num_seqs: int = knob(256, "--max-num-seqs", min=1)
    """Most requests running at once, the seat cap (default by device, as the modelled
    vLLM: 1024 on GPUs of 70 GiB or more, A100 excepted; 128 per device on CPU; else 256)."""

    name: ClassVar[str] = "chunk"
    variants: ClassVar[tuple[str, ...]] = ("mixed", "two-pass", "alternate")
    chunk_knob: ClassVar[str | None] = "chunk"
    bulk_decode: ClassVar[bool] = True  # decode-all with nothing waiting is a fixed point

    def __post_init__(self) -> None:
        if self.variant not in self.variants:
            raise ValueError(
                f"--variant {self.variant!r} does not apply to --policy chunk; choose one of "
                f"{', '.join(self.variants)}"
            )
        if self.chunk < 1 or self.prefill_budget < 1 or self.max_num_seqs < 1:
            raise ValueError(
                f"chunk={self.chunk}, prefill_budget={self.prefill_budget}, "
                f"max_num_seqs={self.max_num_seqs} must all be >= 1"
            )

    def plan(self, state: SchedulerState) -> Plan:
        if self.variant != "alternate":
            return self._plan(state, decodes=True, prefills=True, budget=self.prefill_budget)
        # Sarathi-Serve simple_chunking: turns alternate; a turn with nothing to do passes.
        prefill_turn = not state.last_step_prefill
        plan = self._plan(state, not prefill_turn, prefill_turn, self.chunk)
        if plan.scheduled or plan.pinned or plan.preempted:
            return plan
        return self._plan(state, prefill_turn, not prefill_turn, self.chunk)

    def _plan(self, state: SchedulerState, decodes: bool, prefills: bool, budget: int) -> Plan:
        ledger = KVLedger(state.kv)
        running = state.running  # (copied before a preemption removes a victim from it)
        scheduled: list[tuple] = []
        preempted: list = []
        block_size = state.kv.block_size
        # the bulk decode's pinned decodes (`SchedulerState.pinned`): what the loop below
        # does with such decodes, when this plan takes decodes (one token each, outside the
        # prefill budget, their slots taken); else it passes them
        i = state.pinned
        pinned = i if decodes else 0
        if pinned:
            ledger.take_decodes(state.pinned_blocks)
        while i < len(running):
            req = running[i]
            out = req.num_output_tokens
            remaining = req.spec.prompt_tokens + out - req.num_computed_tokens
            decode = out > 0 and remaining == 1  # request.is_decode(req), inlined
            if decode:
                if not decodes:
                    i += 1
                    continue
                if req.num_computed_tokens < req.num_blocks * block_size:
                    # its token fits the blocks it holds, and a running decode's prompt
                    # blocks are registered already: the ledger would change nothing
                    # (tests/test_decode_commit.py), as in the budget policy
                    scheduled.append((req, 1))
                    i += 1
                    continue
                want = 1
            else:
                if not prefills or budget <= 0:
                    i += 1
                    continue
                want = min(self.chunk, remaining, budget)
            if ledger.try_grow(req, want):  # it fits: no victim to look for
                scheduled.append((req, want))
                if not decode:
                    budget -= want
                i += 1
                continue
            if running is state.running:
                running = list(running)
            ok, removed = preempt_until_fits(req, want, running, ledger, scheduled, preempted)
            # decodes are not charged to the prefill budget; a removed prefill chunk is refunded
            budget += sum(n for r, n in removed if not is_decode(r))
            if not ok:
                break
            scheduled.append((req, want))
            if not decode:
                budget -= want
            i += 1
        admitted: list = []
        if prefills and not preempted:
            self._admit(state.waiting, ledger, budget,
                        self.max_num_seqs - len(running) - state.held_seats, scheduled,
                        admitted)
        return Plan(tuple(scheduled), tuple(admitted), tuple(preempted),
                    self.variant == "two-pass", pinned)

    def _admit(self, waiting, ledger: KVLedger, budget: int, seats: int, scheduled: list,
               admitted: list) -> None:
        """The waiting loop of `_plan`: admit in order, a chunk each, while the prefill
        budget left, the seats left and the KV (`ledger`) allow."""
        for req in waiting:
            if budget <= 0 or seats <= 0:
                break
            want = min(self.chunk, req.num_remaining - ledger.cached(req), budget)
            if not ledger.try_admit(req, want):
                break
            scheduled.append((req, want))
            admitted.append(req)
            budget -= want
            seats -= 1

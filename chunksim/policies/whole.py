"""Whole-prompt prefill, two real versions with very different ITL.

- `prefill-first` models vLLM V0's default scheduler (`vllm/core/scheduler.py`, v0.5–0.6,
  chunked prefill off): if any waiting prompt can be admitted the step is prefill-only
  (running decodes stall for it); otherwise it decodes every running request.
- `mixed` models Orca / vLLM V1 with chunking disabled: decodes first, then whole waiting
  prompts while they fit the remaining token budget. (Deviation: Orca reserves KV for
  max_model_len at admission; we allocate incrementally as V1 does.)

Admission is FCFS and stops at the first prompt that does not fit the token cap, the seats
or the KV blocks. Decode growth preempts the most recently admitted request (recompute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chunksim.core.knobs import knob
from chunksim.core.ledger import KVLedger, preempt_until_fits
from chunksim.core.plan import Plan, SchedulerState
from chunksim.policies.common import PolicyBase


@dataclass(frozen=True)
class WholePrefillPolicy(PolicyBase):
    """Unchunked prefill (vLLM V0 / Orca): every prompt (or recompute) runs in one step."""

    variant: str = knob("prefill-first", "--variant")
    """prefill-first (vLLM V0's default; prefill-only steps stall decodes) or mixed (Orca /
    vLLM V1 without chunking)."""
    max_num_batched_tokens: int = knob(16384, "--max-num-batched-tokens", min=1)
    """Token cap per step (V0: max(max_model_len, 2048)); longer prompts are rejected."""
    max_num_seqs: int = knob(256, "--max-num-seqs", min=1)
    """Most requests running at once, the seat cap (default by device, as the modelled
    vLLM: 1024 on GPUs of 70 GiB or more, A100 excepted; 128 per device on CPU; else 256)."""

    name: ClassVar[str] = "whole"
    variants: ClassVar[tuple[str, ...]] = ("prefill-first", "mixed")
    bulk_decode: ClassVar[bool] = True  # decode-all with nothing waiting is a fixed point

    def __post_init__(self) -> None:
        if self.variant not in self.variants:
            raise ValueError(
                f"--variant {self.variant!r} does not apply to --policy whole; choose one of "
                f"{', '.join(self.variants)}"
            )
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} and "
                f"max_num_seqs={self.max_num_seqs} must be >= 1"
            )

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        # A recompute after preemption re-prefills prompt + generated tokens, up to P + O - 1.
        if prompt_tokens + output_tokens - 1 > self.max_num_batched_tokens:
            return (
                f"prompt+output {prompt_tokens}+{output_tokens} tokens exceeds the whole-prefill "
                f"token cap {self.max_num_batched_tokens} (raise --max-num-batched-tokens)"
            )
        return None

    def _admit(self, state, ledger, running, budget, scheduled, admitted) -> int:
        seats = self.max_num_seqs - len(running) - state.held_seats
        for req in state.waiting:
            want = req.num_remaining - ledger.cached(req)
            if want > budget or seats <= 0 or not ledger.try_admit(req, want):
                break
            scheduled.append((req, want))
            admitted.append(req)
            budget -= want
            seats -= 1
        return budget

    def _decode_all(self, running, ledger, scheduled, preempted, budget, start=0) -> int:
        i = start
        while i < len(running) and budget > 0:
            req = running[i]
            if ledger.try_grow(req, 1):  # it fits: no victim to look for
                scheduled.append((req, 1))
                budget -= 1
                i += 1
                continue
            ok, removed = preempt_until_fits(req, 1, running, ledger, scheduled, preempted)
            budget += sum(n for _, n in removed)
            if not ok:
                break
            scheduled.append((req, 1))
            budget -= 1
            i += 1
        return budget

    def plan(self, state: SchedulerState) -> Plan:
        ledger = KVLedger(state.kv)
        running = list(state.running)
        scheduled: list[tuple] = []
        admitted: list = []
        preempted: list = []
        budget = self.max_num_batched_tokens
        # the bulk decode's pinned decodes (`SchedulerState.pinned`): what `_decode_all`
        # does with such decodes, one token of the cap each while it lasts, their slots
        # taken
        pinned = min(state.pinned, budget)
        if self.variant == "prefill-first":
            self._admit(state, ledger, running, budget, scheduled, admitted)
            if admitted:
                return Plan(tuple(scheduled), tuple(admitted))
            if pinned:
                ledger.take_decodes(state.pinned_blocks)
            self._decode_all(running, ledger, scheduled, preempted, budget - pinned, pinned)
            return Plan(tuple(scheduled), (), tuple(preempted), False, pinned)
        if pinned:
            ledger.take_decodes(state.pinned_blocks)
        budget = self._decode_all(running, ledger, scheduled, preempted, budget - pinned,
                                  pinned)
        if not preempted:
            self._admit(state, ledger, running, budget, scheduled, admitted)
        return Plan(tuple(scheduled), tuple(admitted), tuple(preempted), False, pinned)

"""Token budget: vLLM V1's scheduler = Sarathi-Serve stall-free batching = FastGen SplitFuse.

Models `vllm/v1/core/sched/scheduler.py` (vLLM 0.8–0.11, chunked prefill on). The budget
counts decode tokens too; running requests (decodes and unfinished prefills, in admission
order) are served first, so "decode first" comes from list order and the prefill chunk is
whatever budget is left. Preemption is recompute, victim = most recently admitted; a step
that preempted admits nothing new.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chunksim.policies.base import KVLedger, Plan, SchedulerState, preempt_until_fits


@dataclass(frozen=True)
class TokenBudgetPolicy:
    """vLLM V1 token-budget scheduling with chunked prefill."""

    max_num_batched_tokens: int = 2048
    """Token budget per step, decodes included (vLLM: 8192 on H100/H200, 2048 on A100 and
    smaller; Sarathi-Serve used 512 strict / 2048 relaxed)."""
    max_num_seqs: int = 256
    """Seat cap: most requests running at once (vLLM: 1024 on H100/H200, else 256)."""
    long_prefill_token_threshold: int = 0
    """Cap on one request's new tokens per step (0 = off, vLLM's default)."""
    max_num_partial_prefills: int = 0
    """Most requests mid-prefill in one step (0 = unlimited, V1's behaviour; V0 default 1)."""
    reserve_full_prompt: bool = True
    """Admit a waiting request only if KV for its whole remaining prompt is free (newer
    vLLM's check); blocks are still allocated chunk by chunk."""
    priority_scheduling: bool = False
    """vLLM's `--scheduling-policy priority`: the engine keeps the waiting queue as a heap
    on (priority, arrival) and the preemption victim is the running request with the
    largest (priority, arrival); False = FCFS, victim = most recently admitted."""
    class_chunk_caps: tuple[tuple[str, int], ...] = ()
    """Per request-class cap on new tokens per step, e.g. (("interactive", 256),): smaller
    chunks for the customers in a hurry (a per-class long_prefill_token_threshold)."""
    name: str = "budget"

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"budget max_num_batched_tokens={self.max_num_batched_tokens} must be >= 1 "
                "(--chunk / --budget)"
            )
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs={self.max_num_seqs} must be >= 1 (--max-num-seqs)")
        for cls, cap in self.class_chunk_caps:
            if cap < 1:
                raise ValueError(f"class chunk cap {cls}={cap} must be >= 1 (--class-chunk)")
        if self.long_prefill_token_threshold < 0 or self.max_num_partial_prefills < 0:
            raise ValueError(
                f"long_prefill_token_threshold={self.long_prefill_token_threshold} and "
                f"max_num_partial_prefills={self.max_num_partial_prefills} must be >= 0 (0 = off)"
            )

    def params(self) -> dict:
        p = {k: v for k, v in asdict(self).items() if k != "name"}
        p["class_chunk_caps"] = dict(self.class_chunk_caps)
        return p

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        return None  # any prompt can be chunked through the budget

    def _cap(self, req, want: int) -> int:
        thr = self.long_prefill_token_threshold
        if thr and want > thr:
            want = thr
        for cls, cap in self.class_chunk_caps:
            if req.spec.request_class == cls and want > cap:
                want = cap
        return want

    @staticmethod
    def _victim_key(req) -> tuple:
        return (req.spec.priority, req.spec.arrival_s, req.request_id)

    def plan(self, state: SchedulerState) -> Plan:
        budget = self.max_num_batched_tokens
        ledger = KVLedger(state.kv)
        running = list(state.running)
        scheduled: list[tuple] = []
        preempted: list = []
        partial = 0
        max_partial = self.max_num_partial_prefills or 1 << 30
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            want = self._cap(req, req.num_remaining)
            if want > 1:
                if partial >= max_partial:
                    i += 1
                    continue
                partial += 1
            want = min(want, budget)
            n_preempted = len(preempted)
            ok, removed = preempt_until_fits(
                req, want, running, ledger, scheduled, preempted,
                self._victim_key if self.priority_scheduling else None)
            budget += sum(n for _, n in removed)
            if not ok:
                break
            if len(preempted) > n_preempted:  # a priority victim may have sat before req
                i = running.index(req)
            scheduled.append((req, want))
            budget -= want
            i += 1

        admitted: list = []
        if not preempted:
            seats = self.max_num_seqs - len(running)
            for req in state.waiting:
                if budget <= 0 or seats <= 0:
                    break
                remaining = req.num_remaining - ledger.cached(req)
                if remaining > 1 and partial >= max_partial:
                    break
                want = min(self._cap(req, remaining), budget)
                if not ledger.try_admit(req, want, remaining if self.reserve_full_prompt else 0):
                    break
                partial += remaining > 1
                scheduled.append((req, want))
                admitted.append(req)
                budget -= want
                seats -= 1
        return Plan(tuple(scheduled), tuple(admitted), tuple(preempted))

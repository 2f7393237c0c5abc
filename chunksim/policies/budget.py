"""Token budget: vLLM V1's scheduler = Sarathi-Serve stall-free batching = FastGen SplitFuse.

Models `vllm/v1/core/sched/scheduler.py` (vLLM 0.8–0.11). The budget counts decode tokens
too; running requests (decodes and unfinished prefills, in admission order) are served
first, so "decode first" comes from list order and the prefill chunk is whatever budget is
left. Preemption is recompute, victim = most recently admitted; a step that preempted
admits nothing new. `--long-prefill-token-threshold` caps each request's tokens in a step,
except in a step that starts with a single request running or waiting (vLLM 0.32).

With chunked prefill off (`--no-enable-chunked-prefill`, vLLM 0.32's check in the waiting
loop): admission stops at the first waiting prompt whose remaining tokens exceed the budget
left, and it is scheduled whole in a later step (vLLM 0.10 and 0.11 skipped it for the
step and admitted later prompts that fit, `skipped_waiting_requests`). vLLM refuses a
budget below `max_model_len` without chunking, so no request can outgrow it there; here a
request whose re-prefill (prompt + output - 1 tokens) exceeds the budget is rejected at
arrival.

`--max-num-partial-prefills` is not in released V1 (default 0 = unlimited); when set it
caps the prefills in a step, counted as vLLM V0's chunked-prefill scheduler (0.7+) counts
them: every request in its prefill stage, whole or partial, a prompt's 1-token tail and a
1-token resumed prompt included. (V0 also splits the budget evenly among those prefills;
that is not modelled: here the cap is the only effect.)

Speculative decoding (`core.speculative`): a decode schedules 1 + its draft tokens
(`num_tokens_with_spec - num_computed_tokens`, cut to the budget left, as vLLM cuts it),
and every KV allocation covers the lookahead slots too: a decode's, a running prefill
chunk's and an admission's (`allocate_slots(..., num_lookahead_tokens)` in both of
the modelled vLLM's scheduling loops; a request waiting for a CPU-tier load takes none). An
admission with one token left (a P/D decode instance's arrival, a prompt loaded whole from
the CPU tier, a resumed request whose cache holds all but its last token) is padded to
1 + k tokens when no running prefill chunk is scheduled in the step, as the modelled vLLM pads
it; its k placeholder drafts are all rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from chunksim.core.knobs import knob
from chunksim.core.ledger import KVLedger, preempt_until_fits
from chunksim.core.plan import Plan, SchedulerState
from chunksim.core.queues import FCFS, PRIORITY, QueueDiscipline
from chunksim.core.vllm_version import Device, vllm_defaults
from chunksim.policies.common import PolicyBase


def _class_caps(items: list[str]) -> tuple[tuple[str, int], ...]:
    """`--class-chunk interactive=256` items -> sorted (class, cap) pairs."""
    caps = []
    for item in items:
        cls, sep, val = item.partition("=")
        try:
            cap = int(val)
        except ValueError:
            cap = 0
        if not sep or not cls or cap < 1:
            raise ValueError(
                f"--class-chunk {item!r}: use CLASS=TOKENS with TOKENS >= 1, e.g. "
                "--class-chunk interactive=256")
        caps.append((cls, cap))
    return tuple(sorted(caps))


@dataclass(frozen=True)
class TokenBudgetPolicy(PolicyBase):
    """Token budget per step with decodes first (vLLM V1 / Sarathi-Serve)."""

    max_num_batched_tokens: int = knob(2048, "--max-num-batched-tokens", min=1)
    """Token budget per step, decodes included (default by device, as the modelled
    vLLM: 16384 on GPUs of 160 GiB or more, 8192 of 70 GiB or more, A100 excepted, else
    2048, and 2048 per device on CPU; Sarathi-Serve used 512 strict, 2048 relaxed). --chunk
    sets it too."""
    max_num_seqs: int = knob(256, "--max-num-seqs", min=1)
    """Most requests running at once, the seat cap (default by device, as the modelled
    vLLM: 1024 on GPUs of 70 GiB or more, A100 excepted; 128 per device on CPU; else 256;
    at most the token budget, as vLLM caps its default)."""
    long_prefill_token_threshold: int = knob(
        0, "--long-prefill-token-threshold", "--long-prefill-threshold", min=0)
    """Cap on one request's new tokens per step (default 0 = off, vLLM's default). As in
    vLLM, not applied in a step that starts with a single request running or waiting."""
    max_num_partial_prefills: int = knob(
        0, "--max-num-partial-prefills", "--max-partial-prefills", min=0)
    """Most requests mid-prefill in one step (default 0 = unlimited, vLLM V1)."""
    reserve_full_prompt: bool = knob(True, "--reserve-full-prompt/--no-reserve-full-prompt")
    """Admit a waiting request only if KV for its whole remaining prompt is free (newer
    vLLM's check); blocks are still allocated chunk by chunk."""
    priority_scheduling: bool = knob(False, "--priority/--fcfs")
    """vLLM's priority scheduling: the waiting queue is a heap on (priority, arrival) and
    the victim is the lowest priority, latest arrival (off: FCFS, victim = most recently
    admitted)."""
    enable_chunked_prefill: bool = knob(
        True, "--enable-chunked-prefill/--no-enable-chunked-prefill")
    """vLLM's chunked prefill (on by default in V1). Off: a prompt is scheduled whole or
    waits; admission stops at one that does not fit the budget left (as vLLM 0.32; 0.10
    let prompts behind it that fit go first); a request whose prompt + output - 1 exceeds
    the budget is rejected
    (vLLM requires max_model_len <= max_num_batched_tokens without chunking)."""
    class_chunk_caps: tuple[tuple[str, int], ...] = knob(
        (), "--class-chunk", cli_type=list[str], parse=_class_caps)
    """Per-class cap on a request's tokens per step, CLASS=TOKENS (repeat the flag): smaller
    chunks for the customers in a hurry."""

    name: ClassVar[str] = "budget"
    chunk_knob: ClassVar[str | None] = "max_num_batched_tokens"
    bulk_decode: ClassVar[bool] = True  # decode-all with nothing waiting is a fixed point
    speculative: ClassVar[bool] = True  # a decode schedules 1 + its drafts (vLLM V1)

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"budget max_num_batched_tokens={self.max_num_batched_tokens} must be >= 1 "
                "(--max-num-batched-tokens / --chunk)"
            )
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs={self.max_num_seqs} must be >= 1 (--max-num-seqs)")
        for cls, cap in self.class_chunk_caps:
            if cap < 1:
                raise ValueError(f"class chunk cap {cls}={cap} must be >= 1 (--class-chunk)")
        if not self.enable_chunked_prefill and (self.long_prefill_token_threshold
                                                or self.class_chunk_caps):
            raise ValueError(
                "--long-prefill-token-threshold and --class-chunk cut prompts into chunks; "
                "they do not combine with --no-enable-chunked-prefill (drop one)")
        if self.long_prefill_token_threshold < 0 or self.max_num_partial_prefills < 0:
            raise ValueError(
                f"long_prefill_token_threshold={self.long_prefill_token_threshold} and "
                f"max_num_partial_prefills={self.max_num_partial_prefills} must be >= 0 (0 = off)"
            )

    @property
    def queue(self) -> QueueDiscipline:  # type: ignore[override]
        return PRIORITY if self.priority_scheduling else FCFS

    @classmethod
    def device_defaults(cls, device: Device | str | None,
                        given: dict | None = None) -> dict[str, tuple[Any, str]]:
        # vLLM caps a default max_num_seqs at the token budget (its own or the one given)
        d = vllm_defaults(device)
        budget = (given or {}).get("max_num_batched_tokens", d.max_num_batched_tokens)
        seats = (d.max_num_seqs, d.why) if d.max_num_seqs <= budget else (
            budget, f"{d.why}, capped at the token budget {budget}")
        return {"max_num_seqs": seats,
                "max_num_batched_tokens": (d.max_num_batched_tokens, d.why)}

    def params(self) -> dict:
        p = super().params()
        p["class_chunk_caps"] = dict(self.class_chunk_caps)
        return p

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        if self.enable_chunked_prefill:
            return None
        # a recompute after preemption re-prefills prompt + generated tokens, in one step
        if prompt_tokens + output_tokens - 1 > self.max_num_batched_tokens:
            return (f"prompt+output {prompt_tokens}+{output_tokens} tokens exceeds the token "
                    f"budget {self.max_num_batched_tokens} and chunked prefill is off (raise "
                    "--max-num-batched-tokens or drop --no-enable-chunked-prefill)")
        return None

    def max_model_len_error(self, max_model_len: int) -> str | None:
        if self.long_prefill_token_threshold > max_model_len:
            return (  # vLLM's SchedulerConfig refuses this
                f"--long-prefill-token-threshold {self.long_prefill_token_threshold} exceeds "
                f"--max-model-len {max_model_len}; lower the threshold to at most "
                f"{max_model_len}")
        if self.enable_chunked_prefill or max_model_len <= self.max_num_batched_tokens:
            return None
        return (  # vLLM's SchedulerConfig refuses this too
            f"--max-model-len {max_model_len} exceeds --max-num-batched-tokens "
            f"{self.max_num_batched_tokens} with --no-enable-chunked-prefill: a prompt that "
            "long could never be scheduled; raise the budget or lower --max-model-len")

    def _threshold(self, requests: int) -> int:
        """`long_prefill_token_threshold` in a step that starts with `requests` requests
        running or waiting: off (0) for a lone request, which starves nobody (vLLM
        0.32's `Scheduler.schedule`, counted once before the running loop)."""
        return self.long_prefill_token_threshold if requests > 1 else 0

    def _cap(self, req, want: int, thr: int) -> int:
        if thr and want > thr:
            want = thr
        for cls, cap in self.class_chunk_caps:
            if req.spec.request_class == cls and want > cap:
                want = cap
        return want

    def plan(self, state: SchedulerState) -> Plan:
        budget = self.max_num_batched_tokens
        ledger = KVLedger(state.kv)
        running = state.running  # (copied before a preemption removes a victim from it)
        scheduled: list[tuple] = []
        preempted: list = []
        partial = 0
        max_partial = self.max_num_partial_prefills or 1 << 30
        lookahead = state.lookahead_tokens
        block_size = state.kv.block_size
        thr = self._threshold(len(running) + state.held_seats + len(state.waiting))
        # the bulk decode's pinned decodes (`SchedulerState.pinned`): what the loop below
        # does with such decodes, one budget token each while it lasts, their slots taken
        i = pinned = min(state.pinned, budget)
        if pinned:
            ledger.take_decodes(state.pinned_blocks)
            budget -= pinned
        while i < len(running) and budget > 0:
            req = running[i]
            rem = req.spec.prompt_tokens + req.num_output_tokens - req.num_computed_tokens
            if rem > 1 or not req.num_output_tokens:  # not request.is_decode(req), inlined
                if partial >= max_partial:
                    i += 1
                    continue
                partial += 1
                want = self._cap(req, rem, thr) if rem > 1 else 1
                if want > budget:
                    want = budget
                grow = want + lookahead  # vLLM: every running request's lookahead slots
            else:  # a decode: 1 + its drafts (speculative decoding), as the budget allows
                want = 1 + req.num_spec_tokens
                if want > budget:
                    want = budget
                grow = want + lookahead  # its KV slots: + lookahead (EAGLE/MTP/draft model)
                if grow == 1 and req.num_computed_tokens < req.num_blocks * block_size:
                    # its token fits the blocks it holds, and a running decode's prompt
                    # blocks are registered already: the ledger would change nothing
                    # (tests/test_decode_commit.py)
                    scheduled.append((req, 1))
                    budget -= 1
                    i += 1
                    continue
            if ledger.try_grow(req, grow):  # it fits: no victim to look for
                scheduled.append((req, want))
                budget -= want
                i += 1
                continue
            n_preempted = len(preempted)
            if running is state.running:
                running = list(running)
            ok, removed = preempt_until_fits(
                req, grow, running, ledger, scheduled, preempted, self.queue)
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
            pad = state.spec_tokens
            if pad and any(r.num_output_tokens == 0 or r.spec.prompt_tokens
                           + r.num_output_tokens - r.num_computed_tokens > 1
                           for r, _ in scheduled):
                pad = 0  # a running prefill chunk is scheduled: no padding (vLLM)
            self._admit(state.waiting, ledger, budget,
                        self.max_num_seqs - len(running) - state.held_seats, partial,
                        max_partial, scheduled, admitted, thr, lookahead, pad)
        return Plan(tuple(scheduled), tuple(admitted), tuple(preempted), False, pinned)

    def _admit(self, waiting, ledger: KVLedger, budget: int, seats: int, partial: int,
               max_partial: int, scheduled: list, admitted: list, thr: int,
               lookahead: int = 0, pad: int = 0) -> None:
        """The waiting loop of `plan`: admit from `waiting` in order while the budget
        left, the seats left, the prefill cap and the KV (`ledger`) allow; `thr` is the
        step's long-prefill threshold (`_threshold`). Each admission also takes
        `lookahead` KV slots past its tokens (vLLM's `allocate_slots`). With `pad` (k
        drafts), an admission with one token left schedules 1 + k, its k placeholder
        drafts all rejected (the modelled vLLM's `pad_spec_decode`, which keeps a uniform
        spec-decode batch for CUDA graphs; not when it would overflow --max-model-len,
        which is not checked here)."""
        chunked = self.enable_chunked_prefill
        running_scheduled = bool(scheduled)
        for req in waiting:
            if budget <= 0 or seats <= 0 or partial >= max_partial:
                break
            remaining = req.num_remaining - ledger.cached(req)
            if not chunked and remaining > budget:
                break  # vLLM 0.32: "we can stop the scheduling here"
            want = min(self._cap(req, remaining, thr), budget)
            if pad and remaining == 1 and (running_scheduled or req.num_tokens > 1):
                if 1 + pad > budget:
                    break  # vLLM: rather not schedule it than schedule it unpadded
                want = 1 + pad
            if not ledger.try_admit(req, want, remaining if self.reserve_full_prompt else 0,
                                    lookahead):
                break
            partial += 1
            scheduled.append((req, want))
            admitted.append(req)
            budget -= want
            seats -= 1

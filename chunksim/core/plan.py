"""What a policy sees (SchedulerState), what it returns (Plan), and the Policy protocol.

A policy is a pure function of request state: `plan(state) -> Plan`. It may *simulate*
KV allocation and preemption on a `KVLedger` (its private scratch copy of the free-block
count) but never mutates requests or the cache; the engine applies the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from chunksim.core.kv_cache import KVCache
from chunksim.core.queues import QueueDiscipline
from chunksim.core.request import Request, is_decode


@dataclass(frozen=True, slots=True)
class Plan:
    """One step: which requests run and how many new tokens each computes."""

    scheduled: tuple[tuple[Request, int], ...]
    """(request, new tokens) in batch order; a decode has 1 new token (1 + the drafts it
    verifies, with speculative decoding)."""
    admitted: tuple[Request, ...] = ()
    """Waiting requests moved to running by this step (in admission order)."""
    preempted: tuple[Request, ...] = ()
    """Running requests preempted (recompute) before this step, in preemption order. Each
    goes to the front of the waiting queue as it is preempted (vLLM V1's prepend), so the
    last one ends up foremost."""
    two_pass: bool = False
    """Run the prefill part and the decode part as two forward passes (their times add)."""

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)

    def is_decode(self, req: Request) -> bool:
        """Whether `req`'s entry in this plan is a decode (`request.is_decode`, with
        `req` admitted now when this plan admits it)."""
        return is_decode(req, req in self.admitted)


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """Read-only view handed to a policy. Sequences are live; policies must not mutate them."""

    running: Sequence[Request]
    """Admitted requests, in admission order (decodes and unfinished prefills)."""
    waiting: Sequence[Request]
    """Queued requests (new or preempted), in queue order."""
    kv: KVCache
    """The KV cache (read it; simulate allocation with a KVLedger)."""
    last_step_prefill: bool
    """Whether the previous step computed any prefill tokens (for alternating policies)."""
    held_seats: int = 0
    """Requests that finish in the step still in flight (async scheduling): not in
    `running` and not schedulable, but they still count against the seat cap and hold
    their KV blocks until that step's output is processed."""
    lookahead_tokens: int = 0
    """KV slots every scheduled request reserves beyond its tokens (vLLM's
    `num_lookahead_tokens`: speculative decoding with eagle, mtp or a draft model)."""
    spec_tokens: int = 0
    """Draft tokens per decode (speculative decoding; 0 = off): an admission with one
    token left is padded to 1 + this many (the modelled vLLM's `pad_spec_decode`)."""


class Policy(Protocol):
    """A scheduling policy. Implementations are frozen dataclasses whose fields are their
    knobs (each a `core.knobs.knob`, so its CLI flag derives from it)."""

    name: str
    """The family name (`--policy`)."""
    queue: QueueDiscipline
    """Waiting order and preemption victim; the engine keeps its waiting queue so."""
    speculative: bool
    """True if the policy schedules a decode's draft tokens (`Request.num_spec_tokens`) as
    vLLM V1 does: the engine refuses speculative decoding under any other policy."""
    max_num_seqs: int
    """The seat cap: most requests running at once (vLLM's --max-num-seqs)."""
    bulk_decode: bool
    """True only if, with nothing waiting and every running request decoding, the next
    plan decodes all of them again: then the engine may run such stretches in bulk
    (bit-identical to stepping them). A policy that does not say so is stepped."""

    def plan(self, state: SchedulerState) -> Plan:
        """Return the next step's plan; an empty plan means nothing can run now."""
        ...

    def admits_decodes(self, running: int, waiting, ledger) -> bool:
        """Whether `plan`, on a state whose `running` requests all decode one token (their
        KV slots for it already taken from `ledger`, a `core.ledger.KVLedger`) and whose
        waiting queue is `waiting` (requests that need exactly one new token: their
        prompt's KV was carried in), would schedule every decode, preempt nothing and
        admit every waiting request for one token. A policy with `bulk_decode` may say
        so to let the engine's bulk decode take such requests in; False is always safe."""
        ...

    def tail_plan(self, decodes: int, tail: Sequence[Request], waiting,
                  ledger) -> Plan | None:
        """What `plan` schedules after the running list's first `decodes` requests, on a
        state where those are one-token decodes (their KV slots for it already taken from
        `ledger`) followed by the running requests `tail` (in running order, any kind),
        and whose waiting queue is `waiting`: the tail's entries then the admissions, in
        batch order, as a Plan that preempts nothing. None unless `plan` would schedule
        every one of the decodes and preempt nothing (or the policy cannot say). A policy
        with `bulk_decode` may answer so that the engine's bulk decode carries on through
        prefills without planning each step over every running request
        (`sim.fast_forward.mixed_step`); None is always safe."""
        ...

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request of this size can never run under this policy (None if it can)."""
        ...

    def max_model_len_error(self, max_model_len: int) -> str | None:
        """Why this policy refuses --max-model-len `max_model_len` given by the user, as
        vLLM's SchedulerConfig refuses a length its settings could never schedule (None:
        it takes it)."""
        ...

    def params(self) -> dict:
        """Knob values, echoed into summary.json."""
        ...

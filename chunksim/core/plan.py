"""What a policy sees (SchedulerState), what it returns (Plan), and the Policy protocol.

A policy is a pure function of request state: `plan(state) -> Plan`. It may *simulate*
KV allocation and preemption on a `KVLedger` (its private scratch copy of the free-block
count) but never mutates requests or the cache; the engine applies the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

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
    pinned: int = 0
    """How many of the state's pinned decodes (`SchedulerState.pinned`, the running
    list's first ones) this plan schedules, one token each, ahead of `scheduled`, which
    does not list them (0 when the state pins none)."""

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.scheduled)

    def is_decode(self, req: Request) -> bool:
        """Whether `req`'s entry in this plan is a decode (`request.is_decode`, with
        `req` admitted now when this plan admits it)."""
        return is_decode(req, req in self.admitted)


class SchedulerState(NamedTuple):
    """Read-only view handed to a policy (a tuple: built before every plan, cheaply).
    Sequences are live; policies must not mutate them."""

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
    pinned: int = 0
    """The engine's bulk decode asks the same `plan` mid-stretch: the first `pinned`
    running requests are one-token decodes whose own counters may lag (the policy must
    not read them), and the KV slots of those that open a block, `pinned_blocks`, are
    taken from the cache's free blocks already. The plan plans them as it would plan such
    decodes, says in `Plan.pinned` how many it schedules and lists only the entries after
    them in `Plan.scheduled` (`sim.engine.fast_forward.BulkDecoder.mixed_step`, `join_step`)."""
    pinned_blocks: int = 0
    """With `pinned`: the blocks the pinned decodes' slots take (`KVLedger.take_decodes`)."""


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
    plan decodes all of them again, and `plan` honours `SchedulerState.pinned`: then the
    engine may run such stretches in bulk (bit-identical to stepping them), asking `plan`
    with the stretch's decodes pinned at its steps that carry other work. A policy that
    does not say so is stepped."""

    def plan(self, state: SchedulerState) -> Plan:
        """Return the next step's plan; an empty plan means nothing can run now (a plan
        that schedules pinned decodes is not empty)."""
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

"""What a policy sees (SchedulerState), what it returns (Plan), and two small helpers.

A policy is a pure function of request state: `plan(state) -> Plan`. It may *simulate*
KV allocation and preemption on a `KVLedger` (its private scratch copy of the free-block
count) but never mutates requests or the cache; the engine applies the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from chunksim.sim.kv_cache import KVCache
from chunksim.sim.request import Request


@dataclass(frozen=True, slots=True)
class Plan:
    """One step: which requests run and how many new tokens each computes."""

    scheduled: tuple[tuple[Request, int], ...]
    """(request, new tokens) in batch order; a decode has 1 new token."""
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

    def is_decode(self, req: Request, n: int) -> bool:
        """Whether `(req, n)` of this plan is a decode: one token for a request that has
        sampled one and was running before this step. A 1-token prompt tail is prompt work
        (it samples the first token), and so is a preempted request re-admitted with a
        prefix hit covering all but its last token: vLLM V0 runs a resumed request as a
        prompt, and the prefill-only steps of `whole prefill-first` and `chunk alternate`
        take it as one."""
        return n == 1 and req.num_output_tokens > 0 and req not in self.admitted


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


class Policy(Protocol):
    """A scheduling policy. Implementations are frozen dataclasses."""

    name: str

    def plan(self, state: SchedulerState) -> Plan:
        """Return the next step's plan; an empty plan means nothing can run now."""
        ...

    def rejection_reason(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request of this size can never run under this policy (None if it can)."""
        ...

    def params(self) -> dict:
        """Knob values, echoed into summary.json."""
        ...


class KVLedger:
    """A policy's scratch view of free KV blocks while it builds one plan."""

    __slots__ = ("kv", "free", "extra", "hits", "released")

    def __init__(self, kv: KVCache) -> None:
        self.kv = kv
        self.free = kv.free_blocks
        self.extra: dict[int, int] = {}  # request_id -> blocks reserved in this plan
        self.hits: dict[int, tuple[int, int]] = {}  # waiting request_id -> prefix hit
        self.released: dict = {}  # shared block -> holders preempted in this plan

    def try_grow(self, req: Request, new_tokens: int) -> bool:
        """Reserve blocks for `new_tokens` more tokens of running `req`; False if they
        don't fit."""
        need = self.kv.extra_blocks(req, new_tokens)
        if need > self.free:
            return False
        self.free -= need
        self.extra[req.request_id] = need
        return True

    def cached(self, req: Request) -> int:
        """Prefix-cache hit in tokens of waiting `req` (costs no token budget)."""
        return self._hit(req)[0]

    def _hit(self, req: Request) -> tuple[int, int]:
        hit = self.hits.get(req.request_id)
        if hit is None:
            hit = self.hits[req.request_id] = self.kv.prefix_hit(req)
        return hit

    def admit_cost(self, req: Request, tokens: int) -> int:
        """Free blocks that admitting waiting `req` with `tokens` new tokens consumes: new
        blocks past its cached prefix, plus cached blocks it takes out of the free pool."""
        cached, from_free = self._hit(req)
        bs = self.kv.block_size
        return -(-(cached + tokens) // bs) - cached // bs + from_free

    def try_admit(self, req: Request, tokens: int, reserve_tokens: int = 0) -> bool:
        """Reserve what admitting waiting `req` with `tokens` new tokens needs; with
        `reserve_tokens`, also require room for that many (e.g. its whole prompt)."""
        if reserve_tokens and self.admit_cost(req, reserve_tokens) > self.free:
            return False
        cost = self.admit_cost(req, tokens)
        if cost > self.free:
            return False
        self.free -= cost
        self.extra[req.request_id] = cost
        return True

    def release(self, req: Request) -> None:
        """Return a victim's blocks (those it alone holds, and those reserved for it in
        this plan) to the scratch pool."""
        self.free += (self.kv.blocks_freed_by(req, self.released)
                      + self.extra.pop(req.request_id, 0))


def preempt_until_fits(
    req: Request,
    want: int,
    running: list[Request],
    ledger: KVLedger,
    scheduled: list[tuple[Request, int]],
    preempted: list[Request],
    victim_key=None,
) -> tuple[bool, list[tuple[Request, int]]]:
    """vLLM V1 recompute preemption: evict the most recently admitted running request
    until `want` more tokens of `req` fit (with `victim_key`, evict the running request
    with the largest key instead: vLLM's priority policy). Removes victims from `running`,
    appends them to
    `preempted`, removes their entries from `scheduled`. Returns (req still runs, the
    removed (victim, tokens) entries, so the caller can give their budget back)."""
    removed: list[tuple[Request, int]] = []
    while not ledger.try_grow(req, want):
        if victim_key is None:
            victim = running.pop()
        else:
            victim = max(running, key=victim_key)
            running.remove(victim)
        ledger.release(victim)
        preempted.append(victim)
        for i, entry in enumerate(scheduled):
            if entry[0] is victim:
                removed.append(entry)
                del scheduled[i]
                break
        if victim is req:
            return False, removed
    return True, removed

"""A policy's scratch KV accounting while it builds one plan, and recompute preemption."""

from __future__ import annotations

from chunksim.core.kv_cache import KVCache
from chunksim.core.queues import FCFS, QueueDiscipline
from chunksim.core.request import Request


class KVLedger:
    """A policy's scratch view of free KV blocks while it builds one plan.

    Calls must follow the plan's batch order (running entries, then admissions), as the
    engine applies it: with a prefix cache, what an entry allocates and registers is
    visible to the lookups of later entries (`kv_cache.PlanOverlay`), so a request admitted
    after another with the same prefix hits the blocks that one is about to compute. A
    plan that preempted admits nothing (vLLM V1), so lookups after a release are refused.

    The overlay is built at the plan's first lookup, replaying the running entries' growth
    so far: a plan that looks nothing up (nothing waiting, or no budget left for it) never
    pays for one.
    """

    __slots__ = ("kv", "block_size", "free", "extra", "hits", "released", "_overlay",
                 "_grown", "preempted")

    def __init__(self, kv: KVCache) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.free = kv.free_blocks
        self.extra: dict[int, int] = {}  # request_id -> blocks reserved in this plan
        self.hits: dict[int, tuple[int, int]] = {}  # waiting request_id -> prefix hit
        self.released: dict = {}  # shared block -> holders preempted in this plan
        self._overlay = None  # built at the first lookup (`overlay`)
        # growth of running entries before the overlay exists, replayed when it is built
        # (None: the cache shares nothing, no overlay will ever be needed)
        self._grown: list | None = [] if kv.prefix_caching else None
        self.preempted = False

    @property
    def overlay(self):
        """The plan's `PlanOverlay` (None for a cache that shares nothing)."""
        ov = self._overlay
        if ov is None and self._grown is not None:
            ov = self._overlay = self.kv.overlay()
            for req, need, new_tokens in self._grown:
                _grow_overlay(ov, req, need, new_tokens)
            self._grown = None
        return ov

    def try_grow(self, req: Request, new_tokens: int) -> bool:
        """Reserve blocks for `new_tokens` more tokens of running `req`; False if they
        don't fit."""
        # kv.extra_blocks(req, new_tokens), inlined: this runs for every running entry
        need = -(-(req.num_computed_tokens + new_tokens) // self.block_size) - req.num_blocks
        if need > 0:
            if need > self.free:
                return False
            self.free -= need
        elif not req.block_keys:
            return True  # nothing reserved, nothing to register (`release` reads 0)
        else:
            need = 0
        self.extra[req.spec.request_id] = need
        if self._overlay is not None:
            _grow_overlay(self._overlay, req, need, new_tokens)
        elif self._grown is not None and (need or req.block_keys):
            self._grown.append((req, need, new_tokens))  # (else replaying it does nothing)
        return True

    def take_decodes(self, blocks: int) -> None:
        """Reserve the new blocks of a plan's leading one-token decodes (`blocks`, all
        that open one), as their `try_grow` calls in batch order would: a decode fills no
        shareable block, so only the free pool (and, with a prefix cache, which cached
        blocks leave it) changes. The caller checks that they fit."""
        self.free -= blocks
        if not blocks:
            return
        if self._overlay is not None:
            _grow_overlay(self._overlay, None, blocks, 1)
        elif self._grown is not None:
            self._grown.append((None, blocks, 1))

    def cached(self, req: Request) -> int:
        """Prefix-cache hit in tokens of waiting `req` (costs no token budget), counting
        the blocks earlier entries of this plan register."""
        return self._hit(req)[0]

    def _hit(self, req: Request) -> tuple[int, int]:
        hit = self.hits.get(req.request_id)
        if hit is None:
            if self.preempted:
                raise RuntimeError("a prefix lookup after a preemption in the same plan: a "
                                   "plan that preempted admits nothing (vLLM V1)")
            hit = self.hits[req.request_id] = self.kv.prefix_hit(req, self.overlay)
        return hit

    def admit_cost(self, req: Request, tokens: int) -> int:
        """Free blocks that admitting waiting `req` with `tokens` new tokens consumes: new
        blocks past its cached prefix, plus cached blocks it takes out of the free pool."""
        cached, from_free = self._hit(req)
        bs = self.kv.block_size
        return -(-(cached + tokens) // bs) - cached // bs + from_free

    def try_admit(self, req: Request, tokens: int, reserve_tokens: int = 0,
                  lookahead: int = 0) -> bool:
        """Reserve what admitting waiting `req` with `tokens` new tokens and `lookahead`
        slots past them needs; with `reserve_tokens`, also require room for that many
        (e.g. its whole prompt)."""
        if reserve_tokens and self.admit_cost(req, reserve_tokens) > self.free:
            return False
        cost = self.admit_cost(req, tokens + lookahead)
        if cost > self.free:
            return False
        self.free -= cost
        self.extra[req.request_id] = cost
        ov = self.overlay
        if ov is not None:
            cached, from_free = self._hit(req)
            ov.admit(req)
            ov.allocate(cost - from_free)
            bs = self.kv.block_size
            ov.commit(req, cached // bs, cached + tokens)
        return True

    def release(self, req: Request) -> None:
        """Return a victim's blocks (those it alone holds, and those reserved for it in
        this plan) to the scratch pool."""
        freed = self.kv.blocks_freed_by(req, self.released) + self.extra.pop(req.request_id, 0)
        self.free += freed
        if self._overlay is not None:
            # the engine frees victims before allocating anything; no lookup follows a
            # preemption, so the blocks only need to count as free again
            self._overlay.uncached += freed
        self.preempted = True


def _grow_overlay(ov, req: Request | None, need: int, new_tokens: int) -> None:
    """Replay on `ov` what `KVLedger.try_grow` reserved for running `req` (None: the
    decodes of `KVLedger.take_decodes`)."""
    if need > ov.uncached:
        ov.allocate(need)
    elif need:
        ov.uncached -= need
    if req is not None and req.block_keys:  # shareable blocks: those the step fills
        ov.commit(req, ov.registered(req), req.num_computed_tokens + new_tokens)


def preempt_until_fits(
    req: Request,
    want: int,
    running: list[Request],
    ledger: KVLedger,
    scheduled: list[tuple[Request, int]],
    preempted: list[Request],
    queue: QueueDiscipline = FCFS,
) -> tuple[bool, list[tuple[Request, int]]]:
    """vLLM V1 recompute preemption: evict `queue`'s victim (FCFS: the most recently
    admitted running request) until `want` more tokens of `req` fit. Removes victims from
    `running`, appends them to `preempted`, removes their entries from `scheduled`. Returns
    (req still runs, the removed (victim, tokens) entries, so the caller can give their
    budget back)."""
    removed: list[tuple[Request, int]] = []
    while not ledger.try_grow(req, want):
        victim = running.pop(queue.victim_index(running))
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

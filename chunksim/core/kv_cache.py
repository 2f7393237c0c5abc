"""Paged KV cache accounting: fixed-size blocks, allocated incrementally, optional prefix
cache.

vLLM V1 semantics: a request holds `ceil(num_computed_tokens / block_size)` blocks after a
step (slots for the step's new tokens are allocated before it runs); nothing is reserved
for future output tokens; preemption frees every block of the victim.

Prefix caching (vLLM V1's KVCacheManager): every *full* block is identified by its
content. A freed full block keeps its identity and stays cached, LRU-evictable, until an
allocation needs it; a waiting request whose leading blocks are cached reuses them at
admission at no token-budget cost (the hit is capped so the last token is recomputed).

Timing (vLLM V1's `allocate_slots` -> `cache_blocks`, 0.8 to 0.11): a block's identity is
registered when its slots are *allocated* for the step that will fill it, not after that
step ran. A request admitted later in the same plan therefore hits blocks an earlier entry
of the plan is about to compute (the forward pass writes every request's KV before any
attention reads it). Such blocks are held, so they are never evicted while computed.
`PlanOverlay` replays the same lookups, allocations and registrations on a policy's
scratch view without touching the cache, so a plan sees what the engine will do.

Block identity here: KV block j (tokens [j*bs, (j+1)*bs)) of a prompt with prefix hashes
of `hb` tokens each is keyed by (hash of the hash block holding the KV block's last token,
j). Hash ids are prefix-chained (equal id = equal prefix up to its end), so equal keys mean
equal KV. With Mooncake's 512-token hashes and 16-token KV blocks, each hash covers 32 KV
blocks. Blocks past the hashed prompt (and all blocks of requests without hashes) get keys
private to their request: nobody else shares them, but a preempted request finds its own
blocks again when it re-prefills.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from chunksim.core.request import Request

NULL_BLOCKS = 1
"""Blocks vLLM V1 keeps out of use: its block pool's null block (a placeholder for
skipped blocks), so `num_gpu_blocks = N` holds KV in N - 1 (`usable_blocks`)."""


def usable_blocks(num_gpu_blocks: int) -> int:
    """Blocks that hold KV in a cache of vLLM's `num_gpu_blocks` (--kv-blocks)."""
    return num_gpu_blocks - NULL_BLOCKS


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` tokens of KV."""
    return -(-tokens // block_size)


@dataclass(frozen=True, slots=True)
class KVConfig:
    """Size of the paged KV cache."""

    num_blocks: int
    """Blocks that hold KV: vLLM's `num_gpu_blocks` less its null block
    (`usable_blocks`)."""
    block_size: int = 16
    """Tokens per block (vLLM default 16)."""
    prefix_caching: bool = False
    """Keep freed full blocks cached and reuse them across requests (vLLM V1 default on)."""
    prefix_block_tokens: int = 0
    """Tokens per entry of the workload's prefix hashes (0 = the workload has none)."""
    host_blocks: int = 0
    """Capacity of the CPU offload tier in blocks (0 = none; `kv_offload`)."""
    block_bytes: int = 0
    """Bytes of KV one block holds (what a load moves per block)."""
    host_bytes_per_s: float = 0.0
    """Bandwidth of the host-to-GPU link of the offload tier, bytes per second."""
    host_latency_s: float = 0.0
    """Fixed latency of one load over that link, seconds."""
    host_write_back: bool = False
    """The CPU tier is filled by GPU evictions (SGLang HiCache's write_back policy)
    instead of vLLM's write-through (`kv_offload`)."""
    drop_last_hit_block: bool = False
    """A prefix hit gives up its last matched block (vLLM with an EAGLE or MTP drafter,
    `KVCacheManager(use_eagle=True)`): the drafter needs that block's KV recomputed."""

    def __post_init__(self) -> None:
        if self.num_blocks < 1:
            raise ValueError(f"kv num_blocks={self.num_blocks} must be >= 1 (see --kv-blocks)")
        if self.block_size < 1:
            raise ValueError(f"kv block_size={self.block_size} must be >= 1 (see --block-size)")
        if self.host_blocks and not (self.block_bytes > 0 and self.host_bytes_per_s > 0):
            raise ValueError("a KV offload tier needs block_bytes and host_bytes_per_s > 0")
        if self.host_blocks and not self.prefix_caching:
            raise ValueError("a KV offload tier holds blocks the prefix cache evicts; it needs "
                             "prefix caching (drop --no-prefix-caching or --kv-offload-gib)")


class KVCache:
    """Block accounting for the engine. Policies only read it (via `KVLedger`)."""

    prefix_caching = False
    commit_all = False
    """`commit` wants every scheduled request's steps, not only those of requests with
    shareable blocks (a write-through CPU tier stores every prompt block)."""

    def __init__(self, config: KVConfig) -> None:
        self.num_blocks = config.num_blocks
        self.block_size = config.block_size
        self.free_blocks = config.num_blocks
        self.carried: dict[int, int] = {}  # request id -> tokens of KV moved in (P/D)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    def extra_blocks(self, req: Request, new_tokens: int) -> int:
        """Blocks `req` must gain to hold `new_tokens` more tokens of KV."""
        need = -(-(req.num_computed_tokens + new_tokens) // self.block_size)
        return need - req.num_blocks if need > req.num_blocks else 0

    def prefix_hit(self, req: Request, overlay: PlanOverlay | None = None) -> tuple[int, int]:
        """(cached tokens, cached-but-free blocks it would take out of the free pool) for
        admitting waiting `req` (as seen through a plan's `overlay`, if given). Without a
        prefix cache: (0, 0) (or its carried KV)."""
        if self.carried:
            return self.carried_hit(req)
        return 0, 0

    def overlay(self) -> PlanOverlay | None:
        """A scratch view for one plan (None: this cache needs none, nothing is shared)."""
        return None

    def carry(self, req: Request, tokens: int) -> None:
        """Waiting `req` brings `tokens` tokens of KV from elsewhere (a P/D prefill
        instance): at admission it holds them without computing them, in blocks taken from
        the free pool (so to policies it looks like a prefix hit whose blocks are all free:
        `prefix_hit` reports (tokens, their full blocks))."""
        self.carried[req.request_id] = tokens

    def carried_hit(self, req: Request) -> tuple[int, int]:
        tokens = self.carried.get(req.request_id)
        return (0, 0) if tokens is None else (tokens, tokens // self.block_size)

    def _admit_carried(self, req: Request) -> bool:
        """Admit `req` with its carried KV, if any (True); its last partial block comes
        with the step's `grow`."""
        tokens = self.carried.pop(req.request_id, None)
        if tokens is None:
            return False
        full = tokens // self.block_size
        self.take(full)
        req.num_computed_tokens = tokens
        req.num_cached_tokens = 0
        req.num_blocks = full
        return True

    def blocks_freed_by(self, req: Request, pending: dict) -> int:
        """Blocks that freeing `req` would return to the free pool, given the holders
        `pending` (key -> count) already released in the same plan; updates `pending`.
        Without sharing: all of them."""
        return req.num_blocks

    def admit(self, req: Request) -> None:
        """Take `req`'s prefix hits (call for each admitted request before any `grow`)."""
        if self.carried:
            self._admit_carried(req)

    def commit(self, req: Request, tokens: int | None = None) -> None:
        """Register the full blocks of `req`'s first `tokens` tokens (default: those
        computed). The engine calls it right after allocating a step's slots, with the
        tokens the request will hold after the step (vLLM's timing)."""

    def grow(self, req: Request, new_tokens: int) -> None:
        """Allocate blocks so `req` can hold `new_tokens` more tokens."""
        extra = self.extra_blocks(req, new_tokens)
        if not extra:
            return
        if extra > self.free_blocks:
            raise RuntimeError(
                f"request {req.request_id} needs {extra} blocks, {self.free_blocks} free: the "
                "policy planned beyond KV capacity (a bug in the policy)"
            )
        self.take(extra)
        req.num_blocks += extra

    def take(self, blocks: int) -> None:
        """Remove `blocks` free blocks from the pool (the caller books them to requests)."""
        self.free_blocks -= blocks

    def free(self, req: Request, reusable: bool = False) -> None:
        """Release every block of `req`: at its finish, or (`reusable`) at preemption,
        when it will want its own blocks back."""
        self.free_blocks += req.num_blocks
        req.num_blocks = 0


class PrefixKVCache(KVCache):
    """KV cache with vLLM V1-style automatic prefix caching (see module docstring).

    Cost model of the bookkeeping (the simulator's hot path): only *shareable* blocks (a
    prompt's hashed prefix) are tracked one by one while a request runs. A request's other
    full blocks can only ever be hit by itself, so they get keys only if it is preempted;
    when it finishes they join the LRU as one anonymous group that keeps their place in
    eviction order but can never be hit.
    """

    prefix_caching = True

    def __init__(self, config: KVConfig) -> None:
        super().__init__(config)
        self.hash_tokens = config.prefix_block_tokens
        self.drop_last_hit_block = config.drop_last_hit_block
        self.landed: dict[int, int] = {}
        """Request id -> prefix blocks a CPU-tier load brought back, until it is admitted
        (`kv_offload`; empty here)."""
        self.uncached_free = config.num_blocks  # free blocks holding no cached content
        # cached free blocks, least recently freed first: key -> 1, or group id -> count
        self.lru: OrderedDict[tuple, int] = OrderedDict()
        self.lru_blocks = 0
        self.refs: dict[tuple, int] = {}  # shareable blocks in use -> holders
        self.keys: dict[int, list[tuple]] = {}  # request id -> its shareable blocks' keys
        self.dups: dict[tuple, list[tuple[int, int]]] = {}
        """Content key -> (request id, block) of the held duplicates of it (`commit`)."""
        self.groups = 0
        self.hit_tokens = 0
        self.query_tokens = 0

    def shareable_keys(self, req: Request) -> tuple:
        """Identities of the request's leading full prompt blocks covered by its prefix
        hashes (module docstring), computed once per request."""
        keys = req.block_keys
        if keys is None:
            spec, bs, hb = req.spec, self.block_size, self.hash_tokens
            n = 0
            if hb and spec.prefix_hashes:
                n = min(spec.prompt_tokens // bs, len(spec.prefix_hashes) * hb // bs)
            keys = req.block_keys = tuple(
                (spec.prefix_hashes[((j + 1) * bs - 1) // hb], j) for j in range(n))
        return keys

    def key(self, req: Request, j: int) -> tuple:
        """Identity of block j of `req`: shareable, or private to the request."""
        keys = self.shareable_keys(req)
        return keys[j] if j < len(keys) else (-1 - req.spec.request_id, j)

    def prefix_hit(self, req: Request, overlay: PlanOverlay | None = None) -> tuple[int, int]:
        if self.carried and req.request_id in self.carried:
            return self.carried_hit(req)
        # the last token is always recomputed (vLLM: max_cache_hit_length = num_tokens - 1)
        return self._gpu_hit(req, overlay, (req.num_tokens - 1) // self.block_size)

    def _gpu_hit(self, req: Request, overlay: PlanOverlay | None, max_blocks: int,
                 drop: bool = True) -> tuple[int, int]:
        """(tokens, blocks taken from the free pool) of `req`'s longest run of cached
        leading blocks, at most `max_blocks`, less its last block with an EAGLE/MTP
        drafter (`KVConfig.drop_last_hit_block`) unless not `drop`."""
        bs = self.block_size
        lru, refs = self.lru, self.refs
        hits = in_lru = 0
        last_free = False  # the last block of the run comes out of the free pool
        keys = self.shareable_keys(req)
        held = gone = ()
        if overlay is not None and (overlay.held or overlay.gone):
            held, gone = overlay.held, overlay.gone
        for k in keys[:max_blocks]:
            if k in refs or k in held:
                last_free = False
            elif k in lru and k not in gone:
                in_lru += 1
                last_free = True
            else:
                break
            hits += 1
        else:
            if req.num_preemptions:  # only its own earlier round can have cached the rest
                rid = -1 - req.spec.request_id
                while hits < max_blocks and (rid, hits) in lru and (rid, hits) not in gone:
                    in_lru += 1
                    hits += 1
                    last_free = True
        if hits and drop and self.drop_last_hit_block:
            # vLLM (use_eagle): the drafter needs the KV right before the generation
            # point recomputed, so the last matched block is dropped
            hits -= 1
            in_lru -= last_free
        return hits * bs, in_lru

    def overlay(self) -> PlanOverlay:
        return PlanOverlay(self)

    def landed_tail(self, req: Request, overlay: PlanOverlay | None = None) -> tuple | None:
        """The key of the last block of `req`'s whole prompt, when a load brought every
        block of it back (its admission takes that block too and computes one token;
        `kv_offload`), else None."""
        return None

    def reachable_tokens(self, req: Request) -> int:
        """Tokens of waiting `req`'s prefix this cache would serve without computing them
        (a prefix-aware router's measure): its GPU hit, plus what a CPU tier would load."""
        return self.prefix_hit(req)[0]

    def admit(self, req: Request) -> None:
        if self.carried and self._admit_carried(req):
            self.keys[req.request_id] = []
            return
        cached, _ = self.prefix_hit(req)
        self.query_tokens += req.num_tokens
        self.hit_tokens += cached
        shareable = self.shareable_keys(req)
        share = len(shareable)
        rid = -1 - req.spec.request_id
        keys = []
        for j in range(cached // self.block_size):
            k = shareable[j] if j < share else (rid, j)
            if k in self.lru:
                del self.lru[k]
                self.lru_blocks -= 1
                self.free_blocks -= 1
                if j < share:
                    self.refs[k] = 1
            else:
                self.refs[k] += 1
            if j < share:
                keys.append(k)
        self.keys[req.request_id] = keys
        req.num_computed_tokens = cached
        req.num_cached_tokens = cached
        req.num_blocks = cached // self.block_size

    def blocks_freed_by(self, req: Request, pending: dict) -> int:
        # a shared block returns to the pool only with its last holder
        keys = self.keys.get(req.request_id, ())
        freed = req.num_blocks - len(keys)
        for k in keys:
            n = pending.get(k, 0) + 1
            pending[k] = n
            if n == self.refs[k]:
                freed += 1
        return freed

    def take(self, blocks: int) -> None:
        self.free_blocks -= blocks
        fresh = min(blocks, self.uncached_free)
        self.uncached_free -= fresh
        evict = blocks - fresh
        self.lru_blocks -= evict
        while evict:  # evict the least recently freed cached blocks
            k, n = next(iter(self.lru.items()))
            if n > evict:
                self.lru[k] = n - evict
                self._evicted(k, evict, whole=False)
                break
            del self.lru[k]
            if self.dups and k in self.dups:
                self._promote(k)
            else:
                self._evicted(k, n, whole=True)
            evict -= n

    def _evicted(self, k, n: int, whole: bool) -> None:
        """`n` cached blocks of LRU entry `k` left the GPU (the entry itself when
        `whole`): without a tier below, they are gone (`kv_offload` keeps them)."""

    def commit(self, req: Request, tokens: int | None = None) -> None:
        keys = self.keys.setdefault(req.request_id, [])
        share = self.shareable_keys(req)
        if len(keys) >= len(share):
            return
        if tokens is None:
            tokens = req.num_computed_tokens
        claim = self._claim
        for j in range(len(keys), min(len(share), tokens // self.block_size)):
            k = share[j]
            if not claim(k):
                # the same content is already cached (computed twice concurrently): this
                # copy stays private while the cached one lives (`_promote`, `free`)
                self.dups.setdefault(k, []).append((req.request_id, j))
                k = ("dup", req.request_id, j)
            self.refs[k] = 1
            keys.append(k)

    def _promote(self, k) -> None:
        """The cached copy of `k` was evicted while a duplicate is held: that copy becomes
        the cached one. vLLM caches both copies (`BlockHashToBlockMap` keeps duplicates),
        so the content stays hittable while either lives; dropping it would leave a hole
        in the prefix (an earlier block gone, later ones cached) that vLLM never has."""
        held = self.dups[k]
        rid, j = held.pop()
        if not held:
            del self.dups[k]
        self.refs[k] = self.refs.pop(("dup", rid, j))
        self.keys[rid][j] = k

    def _claim(self, k) -> bool:
        """Whether a newly filled block may hold content `k` as its cached copy (False:
        that content is cached already, so this copy stays private)."""
        return k not in self.refs and k not in self.lru

    def free(self, req: Request, reusable: bool = False) -> None:
        keys = self.keys.pop(req.request_id, [])
        full = req.num_computed_tokens // self.block_size
        own = max(0, min(full, req.num_blocks) - len(keys))  # full, non-shareable blocks
        self.uncached_free += req.num_blocks - len(keys) - own  # the partial last block
        # freed tail first, so a request's tail blocks are evicted first (as vLLM does)
        if own and reusable:  # a preempted request will look for its own blocks again
            for j in range(len(keys) + own - 1, len(keys) - 1, -1):
                k = self.key(req, j)
                if k in self.lru:  # a copy left from an earlier round: keep one, recent
                    self.lru.move_to_end(k)
                    self.uncached_free += 1
                    own -= 1
                else:
                    self.lru[k] = 1
        elif own:
            self.groups += 1
            self.lru[("group", self.groups)] = own
        self.lru_blocks += own
        for k in reversed(keys):
            n = self.refs[k] - 1
            if n:
                self.refs[k] = n
                continue
            del self.refs[k]
            if k[0] == "dup":
                # the content stays cached as long as its last freed copy (`_promote`):
                # the cached copy takes this one's place in the eviction order, or, if
                # none is left, this one becomes it
                j = k[2]
                k = self.key(req, j)
                held = self.dups[k]
                held.remove((req.request_id, j))
                if not held:
                    del self.dups[k]
                if k in self.lru:
                    self.lru.move_to_end(k)
                    self.uncached_free += 1
                elif self._claim(k):
                    self.lru[k] = 1
                    self.lru_blocks += 1
                else:  # held by another request, or (a CPU tier) being loaded
                    self.uncached_free += 1
            else:
                self.lru[k] = 1
                self.lru_blocks += 1
        self.free_blocks = self.uncached_free + self.lru_blocks
        req.num_blocks = 0


class PlanOverlay:
    """What one plan has done to a `PrefixKVCache`, replayed without touching it: the
    shareable blocks it made held (prefix hits taken out of the LRU, blocks registered by
    earlier entries of the plan) and the cached free blocks its allocations evicted. The
    same operations in the same order as `EngineCore.begin_step` (admit, grow, commit per
    entry) give the same hits."""

    __slots__ = ("kv", "held", "gone", "duped", "uncached", "_lru", "_left")

    def __init__(self, kv: PrefixKVCache) -> None:
        self.kv = kv
        self.held: set = set()  # shareable keys held by this plan's entries
        self.gone: set = set()  # LRU entries its allocations evicted
        self.duped: set = set()  # cached keys its entries computed again (duplicates)
        self.uncached = kv.uncached_free
        self._lru = None  # iterator over the LRU, oldest first (eviction order)
        self._left = 0  # blocks left in the LRU entry the iterator is on

    def admit(self, req: Request) -> int:
        """Take waiting `req`'s prefix hits (as `PrefixKVCache.admit`); returns the cached
        tokens."""
        kv = self.kv
        cached, _ = kv.prefix_hit(req, self)
        keys = kv.shareable_keys(req)
        held = cached // kv.block_size
        for k in keys[: min(len(keys), held)]:
            self.held.add(k)
        if kv.landed:
            tail = kv.landed_tail(req, self)
            if tail is not None:
                # its admission takes this block from its load, not from the free pool:
                # cancel the allocation the ledger makes for it
                self.held.add(tail)
                self.uncached += 1
        if req.num_preemptions:
            rid = -1 - req.spec.request_id
            for j in range(len(keys), held):
                self.held.add((rid, j))
        return cached

    def allocate(self, blocks: int) -> None:
        """Take `blocks` free blocks as `PrefixKVCache.take` does: uncached ones first, then
        the least recently freed cached ones (skipping those this plan holds)."""
        fresh = min(blocks, self.uncached)
        self.uncached -= fresh
        evict = blocks - fresh
        if not evict:
            return
        if self._lru is None:
            self._lru = iter(self.kv.lru.items())
        held, gone = self.held, self.gone
        while evict:
            if not self._left:
                k, n = next(self._lru)
                if k in held:
                    continue
                gone.add(k)
                if k in self.duped or k in self.kv.dups:
                    held.add(k)  # a held duplicate becomes the cached copy (`_promote`)
                self._left = n
            used = min(self._left, evict)
            self._left -= used
            evict -= used

    def commit(self, req: Request, done_blocks: int, tokens: int) -> None:
        """Register `req`'s shareable full blocks from `done_blocks` up to `tokens` tokens
        (as `PrefixKVCache.commit`: a block whose content is cached already stays a
        private duplicate)."""
        kv = self.kv
        keys = kv.shareable_keys(req)
        held, gone, lru, refs = self.held, self.gone, kv.lru, kv.refs
        for j in range(done_blocks, min(len(keys), tokens // kv.block_size)):
            k = keys[j]
            if k in held or k in refs:
                continue
            if k in lru and k not in gone:
                self.duped.add(k)
                continue
            held.add(k)

    def registered(self, req: Request) -> int:
        """Shareable blocks of running `req` the cache has registered already."""
        return len(self.kv.keys.get(req.request_id, ()))


def prefix_hit_rate(caches) -> float | None:
    """Prompt tokens served from the prefix cache over prompt tokens looked up, pooled
    over `caches` (one engine's, or every replica's of a fleet); None when none of them
    caches prefixes or nothing was looked up."""
    caching = [c for c in caches if c.prefix_caching]
    queries = sum(c.query_tokens for c in caching)
    return sum(c.hit_tokens for c in caching) / queries if queries else None

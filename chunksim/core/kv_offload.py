"""A CPU tier under the GPU prefix cache (vLLM's KV offloading, LMCache behind a KV
connector): blocks the GPU prefix cache evicts move to host memory, and a waiting
request whose prefix continues there (after its longest GPU hit) loads those blocks back
before it is scheduled.

Modelled (vLLM V1's OffloadingConnector; LMCache's connector alike):
- *Store*: a cached block leaving the GPU LRU moves to the host tier, itself an LRU of
  `host_blocks` blocks. Anonymous blocks (a finished request's output and unhashed
  prompt tail, which nobody can hit) take host room too, as one group each.
- *Load*: when the scheduler would admit a request with such a host hit, the request
  waits instead (vLLM's WAITING_FOR_REMOTE_KVS): its GPU-hit blocks are held and free
  GPU blocks are taken for the host blocks at load start; the transfer overlaps other
  requests' steps. When it lands, the blocks join the GPU prefix cache as its most
  recently used entries and the request rejoins the head of the queue, where an
  ordinary prefix hit takes them.

Deviations, each chosen for a reason:
- The tiers are exclusive (a block lives on the GPU, in flight, or on the host, never in
  two): vLLM's CPU offloading writes blocks through to the host as they are computed,
  so its host tier also holds copies of GPU-resident blocks. Exclusive tiers keep the
  same hits while the host tier is much larger than the GPU cache (the usual setup) and
  count a little more capacity otherwise.
- Between a load's end and the request's admission (normally the same scheduler pass)
  the loaded blocks are evictable; vLLM keeps them held for the request.
- Host stores cost nothing: GPU-to-host copies run on their own stream and never delay
  a step or a load.

This module is the block accounting; `sim.offload` schedules and times the loads.
"""

from __future__ import annotations

from collections import OrderedDict

from chunksim.core.kv_cache import KVConfig, PrefixKVCache
from chunksim.core.request import Request


class HostTier:
    """An LRU store of KV blocks in host memory, `capacity` blocks. Entries are block
    identities (one block each) or anonymous groups (many blocks, never hit); the
    oldest entries are dropped when a store overflows (a group in part)."""

    __slots__ = ("capacity", "lru", "blocks", "groups", "dropped")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"host tier capacity {capacity} blocks must be >= 0")
        self.capacity = capacity
        self.lru: OrderedDict[tuple, int] = OrderedDict()  # oldest first
        self.blocks = 0
        """Blocks held now (<= capacity)."""
        self.groups = 0
        self.dropped = 0
        """Blocks dropped for room so far."""

    def __contains__(self, key: tuple) -> bool:
        return key in self.lru

    def store(self, key: tuple) -> None:
        """Keep block `key` as the most recently used entry."""
        lru = self.lru
        if key in lru:
            lru.move_to_end(key)
            return
        lru[key] = 1
        self.blocks += 1
        self._trim()

    def store_anonymous(self, blocks: int) -> None:
        """Keep `blocks` blocks nobody can hit (they take room, nothing else)."""
        if blocks <= 0:
            return
        self.groups += 1
        self.lru[("host-group", self.groups)] = blocks
        self.blocks += blocks
        self._trim()

    def take(self, key: tuple) -> bool:
        """Remove block `key` (it leaves for the GPU); False if it is not here."""
        if self.lru.pop(key, 0):
            self.blocks -= 1
            return True
        return False

    def _trim(self) -> None:
        over = self.blocks - self.capacity
        lru = self.lru
        while over > 0:
            k, n = next(iter(lru.items()))
            if n > over:
                lru[k] = n - over
                self.blocks -= over
                self.dropped += over
                return
            del lru[k]
            self.blocks -= n
            self.dropped += n
            over -= n


class Load:
    """One request's blocks on their way from the host tier to the GPU."""

    __slots__ = ("req", "start_s", "end_s", "pinned", "keys", "gpu_tokens")

    def __init__(self, req: Request, pinned: list, keys: list, gpu_tokens: int) -> None:
        self.req = req
        self.pinned = pinned
        """Its GPU-hit blocks, held while the load runs (so the prefix stays whole)."""
        self.keys = keys
        """The blocks in flight, in prompt order."""
        self.gpu_tokens = gpu_tokens
        """Tokens of its GPU hit at load start."""
        self.start_s = self.end_s = 0.0


class OffloadKVCache(PrefixKVCache):
    """`PrefixKVCache` whose evictions move to a `HostTier` and whose waiting requests
    can load host hits back (`find_load`, `start_load`, `finish_load`)."""

    def __init__(self, config: KVConfig) -> None:
        super().__init__(config)
        self.host = HostTier(config.host_blocks)
        self.in_flight: set[tuple] = set()
        """Blocks being loaded: neither on the host nor hittable on the GPU."""
        self.host_hit_tokens = 0
        """Tokens of admitted requests' prefix hits that came from the host tier."""
        self.loaded: dict[int, int] = {}  # request id -> tokens loaded, until admitted
        self.block_bytes = config.block_bytes
        self.bytes_per_s = config.host_bytes_per_s
        self.latency_s = config.host_latency_s

    # ------------------------------------------------------------------ store
    def _evicted(self, k, n: int, whole: bool) -> None:
        """Evicted GPU blocks go to the host: a whole keyed block by its key, the rest
        (part of a group entry, or a group) as anonymous blocks."""
        if whole and k[0] != "group":
            self.host.store(k)
        else:
            self.host.store_anonymous(n)

    def _claim(self, k) -> bool:
        if k in self.refs or k in self.lru or k in self.in_flight:
            return False
        self.host.take(k)  # computed again: the GPU copy supersedes a host one
        return True

    def free(self, req: Request, reusable: bool = False) -> None:
        if reusable and self.host.lru:
            # a preempted request's own blocks return to the GPU LRU: a copy an earlier
            # round left on the host is superseded (a block lives in one tier)
            host = self.host
            for j in range(min(req.num_computed_tokens // self.block_size, req.num_blocks)):
                host.take(self.key(req, j))
        super().free(req, reusable)

    # ------------------------------------------------------------------ load
    def host_blocks(self, req: Request, gpu_tokens: int) -> int:
        """Blocks of waiting `req`'s prefix found on the host right after its GPU hit of
        `gpu_tokens` tokens (the last token is always recomputed, as on the GPU)."""
        bs = self.block_size
        max_blocks = (req.num_tokens - 1) // bs
        keys = self.shareable_keys(req)
        share = len(keys)
        rid = -1 - req.spec.request_id
        own = req.num_preemptions > 0  # only its own earlier round cached the rest
        lru = self.host.lru
        j = gpu_tokens // bs
        n = 0
        while j < max_blocks:
            if j < share:
                k = keys[j]
            elif own:
                k = (rid, j)
            else:
                break
            if k not in lru:
                break
            n += 1
            j += 1
        return n

    def reachable_tokens(self, req: Request) -> int:
        cached = self.prefix_hit(req)[0]
        return cached + self.host_blocks(req, cached) * self.block_size

    def find_load(self, req: Request) -> tuple[int, int, int] | None:
        """(GPU-hit tokens, host blocks, free GPU blocks a load takes) if waiting `req`
        should load a host hit before it runs, else None."""
        if req.request_id in self.carried or not self.host.lru:
            return None
        cached, in_lru = self.prefix_hit(req)
        n = self.host_blocks(req, cached)
        return (cached, n, in_lru + n) if n else None

    def start_load(self, req: Request, gpu_tokens: int, blocks: int) -> Load:
        """Hold `req`'s GPU hit, take free blocks for its `blocks` host blocks and put
        them in flight (the caller checked `find_load`'s free blocks)."""
        bs = self.block_size
        lru, refs = self.lru, self.refs
        pinned = [self.key(req, j) for j in range(gpu_tokens // bs)]
        for k in pinned:
            if k in lru:
                del lru[k]
                self.lru_blocks -= 1
                self.free_blocks -= 1
                refs[k] = 1
            else:
                refs[k] += 1
        first = gpu_tokens // bs
        keys = [self.key(req, j) for j in range(first, first + blocks)]
        host, flying = self.host, self.in_flight
        for k in keys:  # off the host first: the take below may store evictions there
            if not host.take(k):
                raise RuntimeError(f"request {req.request_id}: block {k} is not on the "
                                   "host tier (a bug in the load lookup)")
            flying.add(k)
        self.take(blocks)
        return Load(req, pinned, keys, gpu_tokens)

    def finish_load(self, load: Load) -> None:
        """The blocks landed: they and the held GPU hit join the GPU prefix cache as its
        most recent entries, the request's leading blocks last (evicted last)."""
        lru, refs, flying = self.lru, self.refs, self.in_flight
        for k in reversed(load.keys):
            flying.discard(k)
            if k in lru or k in refs:  # never: commit makes a block in flight a duplicate
                raise RuntimeError(f"block {k} landed from the host while on the GPU (a bug)")
            lru[k] = 1
            self.lru_blocks += 1
        for k in reversed(load.pinned):
            n = refs[k] - 1
            if n:
                refs[k] = n
            else:
                del refs[k]
                lru[k] = 1
                self.lru_blocks += 1
        self.free_blocks = self.uncached_free + self.lru_blocks
        rid = load.req.request_id
        self.loaded[rid] = self.loaded.get(rid, 0) + len(load.keys) * self.block_size

    def admit(self, req: Request) -> None:
        hits = self.hit_tokens
        super().admit(req)
        loaded = self.loaded.pop(req.request_id, 0)
        if loaded:  # count the loaded part of the hit as the host tier's
            host = min(loaded, self.hit_tokens - hits)
            self.hit_tokens -= host
            self.host_hit_tokens += host

    def load_s(self, blocks: int) -> float:
        """Transfer time of `blocks` blocks over the host link, latency excluded."""
        return blocks * self.block_bytes / self.bytes_per_s

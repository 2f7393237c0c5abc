"""A CPU tier under the GPU prefix cache (vLLM's KV offloading: `--kv-offloading-size`,
the OffloadingConnector with its CPU backend and LRU policy), or, as a named option,
SGLang HiCache's write-back tier.

Write-through (the default; the modelled vLLM, `offloading/scheduler.py`, `cpu/manager.py`):
- *Store*: every step offers the host tier the full prompt blocks the step computes
  (`_build_store_jobs`, with `offload_prompt_only` on: output blocks are never stored),
  from the first block the request has not offered yet, its prefix hits included. Blocks
  already there stay where they are in the LRU; new ones go in as its most recent
  entries, evicting its least recent unpinned ones; an offer that cannot make room
  stores nothing and is made again, longer, at the next step (`prepare_store` returns
  None). When the request finishes, every block it offered that is still there becomes
  most recent, its first block last (`on_request_finished`: evicted last). The host
  tier holds copies: GPU evictions do not touch it.
- *Load*: a waiting request not computed yet (`num_computed_tokens == 0`) whose prefix
  continues on the host right after its GPU hit loads the longest such run of full
  blocks, up to the whole prompt (`max_hit_size_tokens = num_tokens`; the GPU hit stops
  at num_tokens - 1): it waits (WAITING_FOR_REMOTE_KVS) with its GPU hit held and free
  GPU blocks taken for the run, the host blocks pinned. When it lands, the blocks join
  the GPU prefix cache and the request rejoins the head of the queue holding the loaded
  prefix; if that is its whole prompt it computes one token (`num_computed_tokens =
  num_tokens - 1`). With an EAGLE or MTP drafter the run gives up its last block, as the
  GPU hit does. A request whose run reaches a block another load is bringing back is
  skipped for the step (`get_num_new_matched_tokens` returns None).

Write-back (`--kv-offload-write-policy write-back`, SGLang HiCache's `write_back`): a
block reaches the host only when the GPU prefix cache evicts it, and a block lives on
one tier at a time (a load moves it back; a finished request's output and unhashed
prompt tail go down as anonymous blocks). Loads stop one token short of the prompt, like
a GPU hit.

Deviations, each chosen for a reason:
- Host stores cost nothing and land at once: GPU-to-host copies run on their own stream
  and never delay a step or a load.
- Between a load's end and the request's admission (normally the same scheduler pass)
  the loaded blocks are evictable; vLLM keeps them held for the request.
- A load takes only the GPU blocks it fills; vLLM also keeps back the blocks other
  in-flight loads' first steps and one speculative step need (`reserved_blocks`).
- A load may copy a block the GPU still caches (a prompt's last block lies past the GPU
  hit's cap, and an EAGLE drop gives one up): when it lands the request takes the GPU
  copy and the loaded one is freed; vLLM keeps both, the loaded one for the request.

This module is the block accounting; `sim.engine.offload` schedules and times the loads.
"""

from __future__ import annotations

from collections import OrderedDict

from chunksim.core.kv_cache import KVConfig, PlanOverlay, PrefixKVCache
from chunksim.core.request import Request


class HostTier:
    """An LRU store of KV blocks in host memory, `capacity` blocks. Entries are block
    identities (one block each) or anonymous groups (many blocks, never hit); the
    oldest unpinned entries are dropped for room."""

    __slots__ = ("capacity", "lru", "blocks", "groups", "dropped", "stored", "pinned")

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
        self.stored = 0
        """Blocks written so far."""
        self.pinned: dict[tuple, int] = {}
        """Blocks being read by loads (key -> loads): never dropped."""

    def __contains__(self, key: tuple) -> bool:
        return key in self.lru

    # ------------------------------------------------------------ write-through (vLLM)
    def offer(self, keys: list) -> bool:
        """Store the blocks of `keys` not here yet as the most recent entries, in order,
        dropping the least recent unpinned entries not among `keys` for room; False (and
        nothing stored) when they cannot make enough room (vLLM's `prepare_store`)."""
        lru = self.lru
        new = [k for k in keys if k not in lru]
        if not new:
            return True
        over = self.blocks + len(new) - self.capacity
        if over > 0:
            pinned = self.pinned
            protected = set(keys)
            victims = []
            for k in lru:
                if k in pinned or k in protected:
                    continue
                victims.append(k)
                over -= lru[k]
                if over <= 0:
                    break
            if over > 0:
                return False
            for k in victims:
                n = lru.pop(k)
                self.blocks -= n
                self.dropped += n
        for k in new:
            lru[k] = 1
        self.blocks += len(new)
        self.stored += len(new)
        return True

    def touch(self, keys) -> None:
        """Make the blocks of `keys` that are here the most recent, the last one last."""
        lru = self.lru
        for k in keys:
            if k in lru:
                lru.move_to_end(k)

    def pin(self, key: tuple) -> None:
        self.pinned[key] = self.pinned.get(key, 0) + 1

    def unpin(self, key: tuple) -> None:
        n = self.pinned[key] - 1
        if n:
            self.pinned[key] = n
        else:
            del self.pinned[key]

    # --------------------------------------------------------- write-back (SGLang HiCache)
    def store(self, key: tuple) -> None:
        """Keep block `key` as the most recently used entry."""
        lru = self.lru
        if key in lru:
            lru.move_to_end(key)
            return
        lru[key] = 1
        self.blocks += 1
        self.stored += 1
        self._trim()

    def store_anonymous(self, blocks: int) -> None:
        """Keep `blocks` blocks nobody can hit (they take room, nothing else)."""
        if blocks <= 0:
            return
        self.groups += 1
        self.lru[("host-group", self.groups)] = blocks
        self.blocks += blocks
        self.stored += blocks
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


BUSY = "busy"
"""`find_load`: the request's host run reaches a block another load is bringing back."""


class OffloadKVCache(PrefixKVCache):
    """`PrefixKVCache` with a `HostTier` below (module docstring): stores as the policy
    says, and loads of waiting requests' host hits (`find_load`, `start_load`,
    `finish_load`)."""

    def __init__(self, config: KVConfig) -> None:
        super().__init__(config)
        self.host = HostTier(config.host_blocks)
        self.write_back = config.host_write_back
        self.commit_all = not self.write_back
        """Every running request's steps offer their prompt blocks (write-through), not
        only those of requests with shareable blocks."""
        self.in_flight: set[tuple] = set()
        """Blocks being loaded: not hittable on the GPU (nor, write-back, on the host)."""
        self.host_hit_tokens = 0
        """Tokens of admitted requests' prefix hits that came from the host tier."""
        self.loaded: dict[int, int] = {}  # request id -> tokens loaded, until admitted
        self.offered: dict[int, int] = {}
        """Request id -> leading prompt blocks it has offered the host (write-through)."""
        self.block_bytes = config.block_bytes
        self.bytes_per_s = config.host_bytes_per_s
        self.latency_s = config.host_latency_s

    # ------------------------------------------------------------------ store
    def _evicted(self, k, n: int, whole: bool) -> None:
        """Write-back: evicted GPU blocks go to the host, a whole keyed block by its key,
        the rest (part of a group entry, or a group) as anonymous blocks."""
        if not self.write_back:
            return
        if whole and k[0] != "group":
            self.host.store(k)
        else:
            self.host.store_anonymous(n)

    def _claim(self, k) -> bool:
        if k in self.refs or k in self.lru or k in self.in_flight:
            return False
        if self.write_back:
            self.host.take(k)  # computed again: the GPU copy supersedes a host one
        return True

    def commit(self, req: Request, tokens: int | None = None) -> None:
        if req.block_keys != ():
            super().commit(req, tokens)
        if not self.write_back:
            if tokens is None:
                tokens = req.num_computed_tokens
            prompt = req.spec.prompt_tokens
            self._offer(req, (tokens if tokens < prompt else prompt) // self.block_size)

    def _offer(self, req: Request, upto: int) -> None:
        """Write-through: offer the host `req`'s prompt blocks up to block `upto`."""
        rid = req.request_id
        done = self.offered.get(rid, 0)
        if upto > done and self.host.offer(self._keys(req, done, upto)):
            self.offered[rid] = upto

    def _keys(self, req: Request, lo: int, hi: int) -> list:
        """`key(req, j)` for j in [lo, hi), at once."""
        share = self.shareable_keys(req)
        n = len(share)
        if hi <= n:
            return list(share[lo:hi])
        rid = -1 - req.spec.request_id
        return [*share[lo:n], *((rid, j) for j in range(max(lo, n), hi))]

    def free(self, req: Request, reusable: bool = False) -> None:
        if self.write_back:
            if reusable and self.host.lru:
                # a preempted request's own blocks return to the GPU LRU: a copy an
                # earlier round left on the host is superseded (a block lives in one tier)
                host = self.host
                for j in range(min(req.num_computed_tokens // self.block_size,
                                   req.num_blocks)):
                    host.take(self.key(req, j))
        elif not reusable:  # finished: its last offer, then its blocks become most recent
            prompt = req.spec.prompt_tokens
            c = req.num_computed_tokens
            full = (c if c < prompt else prompt) // self.block_size
            self._offer(req, full)
            self.offered.pop(req.request_id, None)
            keys = self._keys(req, 0, full)
            keys.reverse()
            self.host.touch(keys)
        super().free(req, reusable)

    # ------------------------------------------------------------------ load
    def host_blocks(self, req: Request, gpu_tokens: int) -> int | str:
        """Blocks of waiting `req`'s prefix to load from the host right after its GPU
        hit of `gpu_tokens` tokens (module docstring), or BUSY."""
        bs = self.block_size
        if self.write_back:
            max_blocks = (req.num_tokens - 1) // bs  # the last token is recomputed
        else:
            max_blocks = req.num_tokens // bs  # up to the whole prompt
        keys = self.shareable_keys(req)
        share = len(keys)
        rid = -1 - req.spec.request_id
        own = req.num_preemptions > 0  # only its own earlier round cached the rest
        lru = self.host.lru
        flying = self.in_flight
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
                break  # (write-back: a block in flight is off the host)
            if k in flying:  # write-through: on the host, and being loaded
                return BUSY
            n += 1
            j += 1
        if n and self.drop_last_hit_block and not self.write_back:
            n -= 1  # vLLM's connector pops the EAGLE group's last chunk too
        return n

    def reachable_tokens(self, req: Request) -> int:
        cached = self.prefix_hit(req)[0]
        n = self.host_blocks(req, cached)
        if n == BUSY or not n:
            return cached
        return min((cached // self.block_size + n) * self.block_size, req.num_tokens - 1)

    def find_load(self, req: Request) -> tuple[int, int, int] | str | None:
        """(GPU-hit tokens, host blocks, free GPU blocks a load takes) if waiting `req`
        should load a host hit before it runs, BUSY if it must wait for another load
        to land first, else None."""
        if (req.request_id in self.carried or req.request_id in self.landed
                or not self.host.lru):
            return None
        cached, in_lru = self.prefix_hit(req)
        n = self.host_blocks(req, cached)
        if n == BUSY:
            return BUSY
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
        for k in keys:  # write-back: off the host first (the take below may store there)
            if k not in host.lru:
                raise RuntimeError(f"request {req.request_id}: block {k} is not on the "
                                   "host tier (a bug in the load lookup)")
            if self.write_back:
                host.take(k)
            else:
                host.pin(k)
            flying.add(k)
        self.take(blocks)
        return Load(req, pinned, keys, gpu_tokens)

    def finish_load(self, load: Load) -> None:
        """The blocks landed: they and the held GPU hit join the GPU prefix cache as its
        most recent entries, the request's leading blocks last (evicted last)."""
        lru, refs, flying = self.lru, self.refs, self.in_flight
        host = self.host
        for k in reversed(load.keys):
            flying.discard(k)
            if k in lru or k in refs:
                if self.write_back:  # never: commit makes a block in flight a duplicate
                    raise RuntimeError(f"block {k} landed from the host while on the GPU "
                                       "(a bug)")
                # write-through loads may copy a block the GPU also caches (the prompt's
                # last block, past the GPU hit's cap; the block an EAGLE drop gave up):
                # the request takes the GPU copy, and the landed one is freed
                host.unpin(k)
                self.uncached_free += 1
                if k in lru:
                    lru.move_to_end(k)
                continue
            if not self.write_back:
                host.unpin(k)
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
        if not self.write_back:
            self.landed[rid] = len(load.pinned) + len(load.keys)

    # ------------------------------------------------------------ admission after a load
    def prefix_hit(self, req: Request, overlay: PlanOverlay | None = None) -> tuple[int, int]:
        if not self.landed or req.request_id not in self.landed:
            return super().prefix_hit(req, overlay)
        # vLLM adopts what the load brought (no new lookup, so no EAGLE drop); a whole
        # prompt computes its last token again in the block that holds it
        blocks = self.landed[req.request_id]
        bs = self.block_size
        whole = req.num_tokens % bs == 0 and blocks * bs == req.num_tokens
        hit, in_lru = self._gpu_hit(req, overlay, blocks - 1 if whole else blocks, False)
        if whole and hit == (blocks - 1) * bs:
            tail = self.landed_tail(req, overlay)
            if tail is not None:
                # it holds `blocks` blocks with num_tokens - 1 computed; the ledger counts
                # num_tokens - 1 tokens in one block fewer plus the blocks from the free
                # pool: the tail block, taken or shared, is that one block
                return req.num_tokens - 1, in_lru
        return hit, in_lru

    def landed_tail(self, req: Request, overlay: PlanOverlay | None = None) -> tuple | None:
        blocks = self.landed.get(req.request_id)
        if blocks is None or req.num_tokens % self.block_size or (
                blocks * self.block_size != req.num_tokens):
            return None
        k = self.key(req, blocks - 1)
        if k in self.refs or (overlay is not None and k in overlay.held):
            return k
        if k in self.lru and (overlay is None or k not in overlay.gone):
            return k
        return None

    def admit(self, req: Request) -> None:
        hits = self.hit_tokens
        rid = req.request_id
        tail = self.landed_tail(req) if self.landed else None
        if tail is not None:
            ok = self.prefix_hit(req)[0] == req.num_tokens - 1
        super().admit(req)
        self.landed.pop(rid, None)
        if tail is not None and ok:  # its whole prompt came back: it holds the last block
            if tail in self.lru:
                del self.lru[tail]
                self.lru_blocks -= 1
                self.free_blocks -= 1
                if tail[0] != -1 - req.spec.request_id:
                    self.refs[tail] = 1
            else:
                self.refs[tail] += 1
            if tail[0] != -1 - req.spec.request_id:
                self.keys[rid].append(tail)
            req.num_blocks += 1
        loaded = self.loaded.pop(rid, 0)
        if loaded:  # count the loaded part of the hit as the host tier's
            host = min(loaded, self.hit_tokens - hits)
            self.hit_tokens -= host
            self.host_hit_tokens += host

    def load_s(self, blocks: int) -> float:
        """Transfer time of `blocks` blocks over the host link, latency excluded."""
        return blocks * self.block_bytes / self.bytes_per_s

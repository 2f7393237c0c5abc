"""The prefix cache (PrefixKVCache) tested through its own API, no engine: the contracts of
chunksim/core/kv_cache.py's docstrings, by hand and as a property over random sequences.

Block size 16; with `prefix_block_tokens=16` each prefix hash covers one KV block, so KV
block j of a prompt is keyed (hashes[j], j).
"""

import pytest
from factories import (
    finished_request,
    kv_cache,
    request_spec,
    running_request,
    waiting_request,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.core.kv_cache import KVCache, KVConfig, PrefixKVCache, blocks_for
from chunksim.core.kv_factory import make_kv_cache
from chunksim.core.ledger import KVLedger
from chunksim.core.request import Request

H = (1, 2, 3, 4)  # a 64-token prefix: 4 blocks


def preempt(kv, req) -> None:
    """What EngineCore.preempt does to one victim."""
    kv.free(req, reusable=True)
    req.num_computed_tokens = 0
    req.num_preemptions += 1


def prefilled_together(kv) -> tuple[Request, Request]:
    """Requests 0 and 1 admitted together, then each prefilling the 4 blocks of `H` in
    one step (neither hits the other at admission): the second commits a duplicate."""
    a, b = (Request(request_spec(i, 64, output=1, hashes=H)) for i in (0, 1))
    for r in (a, b):
        kv.admit(r)
    for r in (a, b):
        kv.grow(r, 64)
        r.num_computed_tokens = 64
        kv.commit(r)
    return a, b


def lru_keys(kv) -> list:
    return list(kv.lru)


# --------------------------------------------------------------------------- the basics
def test_make_kv_cache_picks_the_cache_the_config_asks_for():
    assert type(make_kv_cache(KVConfig(8))) is KVCache
    kv = make_kv_cache(KVConfig(8, 16, True, 16))
    assert type(kv) is PrefixKVCache and kv.prefix_caching
    assert (kv.num_blocks, kv.block_size, kv.free_blocks, kv.used_blocks) == (8, 16, 8, 0)
    with pytest.raises(ValueError, match="--kv-blocks"):
        KVConfig(0)


def test_the_plain_cache_never_hits():
    kv = kv_cache(10)
    finished_request(kv, request_spec(0, 64, output=1, hashes=H))
    w = waiting_request(request_spec(1, 80, hashes=H))
    assert kv.prefix_hit(w) == (0, 0)
    assert kv.free_blocks == 10


def test_a_block_is_hittable_once_registered_at_allocation():
    kv = kv_cache(20, prefix_block_tokens=16)
    a = Request(request_spec(0, 80, hashes=H + (5,)))
    kv.admit(a)
    kv.grow(a, 64)  # slots allocated, nothing registered yet
    w = waiting_request(request_spec(1, 100, hashes=H + (9, 10, 11, 12)))
    assert kv.prefix_hit(w) == (0, 0)
    # the engine registers the blocks the step will fill right after allocating them
    # (vLLM's allocate_slots -> cache_blocks), before they are computed
    kv.commit(a, a.num_computed_tokens + 64)
    # held by a (in use, not in the free pool): 4 blocks hit, none taken from free
    assert kv.prefix_hit(w) == (64, 0)


def test_commit_registers_full_blocks_as_prefill_advances():
    kv = kv_cache(20, prefix_block_tokens=16)
    a = running_request(kv, request_spec(0, 80, hashes=H + (5,)), computed=40)
    w = waiting_request(request_spec(1, 100, hashes=H + (9, 10, 11, 12)))
    assert kv.prefix_hit(w) == (32, 0)  # 40 tokens = 2 full blocks (+ 8 in a partial one)
    kv.grow(a, 30)
    a.num_computed_tokens = 70
    kv.commit(a)
    assert kv.prefix_hit(w) == (64, 0)  # 70 tokens: 4 full blocks, never a partial one


@pytest.mark.parametrize("prompt,hit", [(16, 0), (17, 16), (63, 48), (64, 48), (65, 64),
                                        (80, 64)])
def test_the_last_prompt_token_is_never_a_hit(prompt, hit):
    # everything of H is cached; the hit is capped at (num_tokens - 1) // 16 blocks
    kv = kv_cache(20, prefix_block_tokens=16)
    running_request(kv, request_spec(0, 64, hashes=H), outputs=1)
    hashes = (H + (5,))[:blocks_for(prompt, 16)]
    w = waiting_request(request_spec(1, prompt, hashes=hashes))
    assert kv.prefix_hit(w)[0] == hit
    assert w.num_tokens - kv.prefix_hit(w)[0] >= 1


def test_a_hit_stops_at_the_first_block_not_cached():
    kv = kv_cache(20, prefix_block_tokens=16)
    running_request(kv, request_spec(0, 64, hashes=H), outputs=1)
    # block 1 differs: block 2's key (3, 2) is cached, but a prefix cannot skip a block
    w = waiting_request(request_spec(1, 100, hashes=(1, 99, 3, 4, 5, 6, 7)))
    assert kv.prefix_hit(w) == (16, 0)


def test_admit_takes_the_hit_and_counts_it():
    kv = kv_cache(20, prefix_block_tokens=16)
    a = running_request(kv, request_spec(0, 64, hashes=H), outputs=1)
    assert (kv.hit_tokens, kv.query_tokens) == (0, 64)
    w = Request(request_spec(1, 64, hashes=H))
    free = kv.free_blocks
    kv.admit(w)
    # 3 of the 4 blocks (the last token is recomputed); they are a's, so no free block
    # is used and each is now held twice
    assert (w.num_computed_tokens, w.num_cached_tokens, w.num_blocks) == (48, 48, 3)
    assert kv.free_blocks == free
    assert (kv.hit_tokens, kv.query_tokens) == (48, 128)
    assert [kv.refs[(h, j)] for j, h in enumerate(H)] == [2, 2, 2, 1]
    kv.grow(w, 16)
    assert kv.free_blocks == free - 1 and a.num_blocks == 4


# ----------------------------------------------------------------- freed blocks stay cached
def test_freed_blocks_stay_cached_but_count_as_free():
    kv = kv_cache(10, prefix_block_tokens=16)
    finished_request(kv, request_spec(0, 64, output=1, hashes=H))
    assert (kv.free_blocks, kv.used_blocks) == (10, 0)
    assert (kv.uncached_free, kv.lru_blocks) == (6, 4)
    w = Request(request_spec(1, 100, hashes=H + (9, 10, 11)))
    # 4 blocks hit, and all 4 come out of the free pool
    assert kv.prefix_hit(w) == (64, 4)
    assert KVLedger(kv).admit_cost(w, 36) == 3 + 4  # ceil(100 / 16) - 4 new, plus 4 reused
    kv.admit(w)
    assert (kv.free_blocks, kv.lru_blocks, kv.uncached_free) == (6, 0, 6)
    kv.grow(w, 36)
    assert kv.free_blocks == 3


def test_eviction_takes_fresh_blocks_first_then_the_least_recently_freed_tail_first():
    kv = kv_cache(10, prefix_block_tokens=16)
    finished_request(kv, request_spec(0, 64, output=1, hashes=H))  # freed first: 4 blocks
    finished_request(kv, request_spec(1, 32, output=1, hashes=(7, 8)))  # then 2 blocks
    # a request's blocks are freed tail first, so its tail is evicted first
    assert lru_keys(kv) == [(4, 3), (3, 2), (2, 1), (1, 0), (8, 1), (7, 0)]
    assert kv.uncached_free == 4
    a2 = waiting_request(request_spec(2, 80, hashes=H + (5,)))
    d2 = waiting_request(request_spec(3, 40, hashes=(7, 8, 9)))
    x = running_request(kv, request_spec(4, 200), computed=80)  # 5 blocks: 4 fresh + 1
    assert x.num_blocks == 5 and kv.free_blocks == 5
    assert lru_keys(kv)[0] == (3, 2)  # (4, 3) went
    assert kv.prefix_hit(a2) == (48, 3) and kv.prefix_hit(d2) == (32, 2)
    running_request(kv, request_spec(5, 48), computed=47)  # 3 more: the rest of the first
    assert kv.prefix_hit(a2) == (0, 0) and kv.prefix_hit(d2) == (32, 2)
    running_request(kv, request_spec(6, 16), computed=15)  # 1 more: (8, 1)
    assert kv.prefix_hit(d2) == (16, 1)
    assert kv.free_blocks == 1 and lru_keys(kv) == [(7, 0)]


def test_reusing_cached_blocks_makes_them_recent_again():
    kv = kv_cache(6, prefix_block_tokens=16)
    finished_request(kv, request_spec(0, 32, output=1, hashes=(1, 2)))
    finished_request(kv, request_spec(1, 32, output=1, hashes=(7, 8)))
    # (1, 2) was freed first, but a new request reuses its first block and finishes
    finished_request(kv, request_spec(2, 20, output=1, hashes=(1, 3)))
    assert lru_keys(kv) == [(2, 1), (8, 1), (7, 0), (1, 0)]
    # 2 fresh blocks left; a 4-block allocation evicts (2, 1) and (8, 1); (1, 0) survives
    running_request(kv, request_spec(3, 64), computed=63)
    assert lru_keys(kv) == [(7, 0), (1, 0)]


def test_blocks_held_by_running_requests_are_never_evicted():
    kv = kv_cache(8, prefix_block_tokens=16)
    a = running_request(kv, request_spec(0, 80, hashes=H + (5,)), computed=48)  # 3 held
    finished_request(kv, request_spec(1, 32, output=1, hashes=(7, 8)))  # 2 cached, free
    assert kv.free_blocks == 5
    running_request(kv, request_spec(2, 80), computed=79)  # 5 blocks: 3 fresh + 2 evicted
    assert kv.free_blocks == 0 and not kv.lru
    w = waiting_request(request_spec(3, 100, hashes=H + (9, 10, 11)))
    assert kv.prefix_hit(w) == (48, 0)  # a's blocks are still there
    y = Request(request_spec(4, 16))
    with pytest.raises(RuntimeError, match="needs 1 blocks, 0 free"):
        kv.grow(y, 16)  # the pool is empty: held blocks are not taken
    kv.free(a)  # a done: its blocks join the cache, now evictable
    assert kv.free_blocks == 3 and kv.prefix_hit(w) == (48, 3)


def test_a_shared_block_returns_to_the_pool_with_its_last_holder():
    kv = kv_cache(20, prefix_block_tokens=16)
    # 70 tokens each: 4 full blocks (the shared H) and a partial one of their own
    a = running_request(kv, request_spec(0, 70, hashes=H + (5,)), outputs=1)
    b = running_request(kv, request_spec(1, 70, hashes=H + (6,)), outputs=1)
    assert b.num_cached_tokens == 64
    assert (a.num_blocks, b.num_blocks) == (5, 5) and kv.used_blocks == 4 + 1 + 1
    # freeing a alone frees only its partial block; a and b together free all 6
    assert kv.blocks_freed_by(a, {}) == 1
    pending: dict = {}
    assert kv.blocks_freed_by(a, pending) + kv.blocks_freed_by(b, pending) == 6
    kv.free(a)
    assert kv.used_blocks == 5
    assert [kv.refs[(h, j)] for j, h in enumerate(H)] == [1, 1, 1, 1]
    kv.free(b)
    assert (kv.used_blocks, kv.free_blocks) == (0, 20) and not kv.refs


def test_the_same_prefix_computed_twice_keeps_one_cached_copy():
    # a and b prefill the same 4 blocks concurrently (neither hits the other at admission)
    kv = kv_cache(20, prefix_block_tokens=16)
    a, b = (Request(request_spec(i, 64, output=1, hashes=H)) for i in (0, 1))
    for r in (a, b):
        kv.admit(r)
    for r in (a, b):
        kv.grow(r, 64)
        r.num_computed_tokens = 64
    for r in (a, b):
        kv.commit(r)
    assert kv.used_blocks == 8
    assert all(k[0] == "dup" for k in kv.keys[1])  # b's copy stays private
    kv.free(a)
    kv.free(b)
    # one copy cached, the duplicate back to the fresh pool
    assert (kv.free_blocks, kv.lru_blocks, kv.uncached_free) == (20, 4, 16)
    assert sorted(kv.lru) == [(h, j) for j, h in enumerate(H)]


def test_a_duplicate_keeps_its_content_cached_after_the_first_copy_is_evicted():
    # vLLM caches both copies, so the content lives as long as either does. Here blocks
    # 1-3 of a's copy are evicted while b holds its duplicate: b's copies become the cached
    # ones, hittable at once (dropping them would leave block 0 cached and lose blocks vLLM
    # still hits), and when b ends, block 0, still cached, moves to b's place
    kv = kv_cache(9, prefix_block_tokens=16)
    a, b = prefilled_together(kv)  # both prefill the 4 blocks in the same step
    kv.free(a)
    filler = Request(request_spec(2, 64, output=1))
    kv.admit(filler)
    kv.grow(filler, 64)  # the fresh block, then a's blocks 3, 2, 1 (its tail first)
    filler.num_computed_tokens = 64
    assert lru_keys(kv) == [(1, 0)] and kv.free_blocks == 1
    assert kv.keys[1] == [("dup", 1, 0), (2, 1), (3, 2), (4, 3)]
    assert kv.prefix_hit(waiting_request(request_spec(5, 80, hashes=(*H, 5)))) == (64, 1)
    kv.free(b)
    assert lru_keys(kv) == [(4, 3), (3, 2), (2, 1), (1, 0)] and kv.uncached_free == 1
    assert kv.prefix_hit(waiting_request(request_spec(3, 80, hashes=(*H, 5)))) == (64, 4)
    kv.free(filler)
    c = Request(request_spec(4, 64, output=1, hashes=H))
    kv.admit(c)  # hits blocks 0-2 (capped: the last token is recomputed)
    assert c.num_computed_tokens == 48
    kv.grow(c, 16)
    c.num_computed_tokens = 64
    kv.commit(c)  # its block 3 duplicates the cached one, older than the filler's group
    assert kv.keys[4][-1][0] == "dup"
    kv.free(c)
    # c's copy was freed after the filler's blocks: so is the cached block 3 now
    assert lru_keys(kv)[0][0] == "group"
    assert lru_keys(kv)[1:] == [(4, 3), (3, 2), (2, 1), (1, 0)]
    assert (kv.free_blocks, kv.uncached_free, kv.used_blocks) == (9, 1, 0)


@pytest.mark.parametrize("evict", [0, 1, 2, 4])
def test_a_plan_sees_a_duplicate_keep_its_content_cached(evict):
    # the policy's scratch view evicts as the cache does, the held duplicate included
    kv = kv_cache(10, prefix_block_tokens=16)
    a, b = prefilled_together(kv)
    kv.free(a)  # a's copy cached; b holds its duplicate
    kv.take(2)  # the fresh blocks: what is left to take is a's copy
    c = waiting_request(request_spec(3, 80, hashes=(*H, 5)))
    overlay = kv.overlay()
    overlay.allocate(evict)
    planned = kv.prefix_hit(c, overlay)
    kv.take(evict)
    assert kv.prefix_hit(c) == planned
    assert planned == (64, max(0, 4 - evict))


# ------------------------------------------------------------- private blocks, preemption
def test_requests_without_hashes_share_nothing():
    kv = kv_cache(20, prefix_block_tokens=16)
    finished_request(kv, request_spec(0, 64, output=1))
    assert kv.shareable_keys(waiting_request(request_spec(1, 64))) == ()
    assert kv.prefix_hit(waiting_request(request_spec(1, 64))) == (0, 0)
    # a finished request's private blocks stay in the LRU as one anonymous group
    assert kv.lru_blocks == 4 and list(kv.lru.values()) == [4]
    assert kv.free_blocks == 20


def test_a_preempted_request_finds_its_own_blocks_again():
    kv = kv_cache(20, prefix_block_tokens=16)
    r = running_request(kv, request_spec(0, 100, hashes=(1, 2)), computed=90)
    # blocks 0-1 shareable, 2-4 private and full, 5 partial
    assert r.num_blocks == 6 and kv.used_blocks == 6
    assert kv.blocks_freed_by(r, {}) == 6
    preempt(kv, r)
    assert kv.free_blocks == 20 and kv.lru_blocks == 5
    assert kv.prefix_hit(r) == (80, 5)
    # someone else with the same hashes only gets the shareable blocks
    assert kv.prefix_hit(waiting_request(request_spec(1, 100, hashes=(1, 2)))) == (32, 2)
    kv.admit(r)
    assert (r.num_computed_tokens, r.num_blocks, kv.free_blocks) == (80, 5, 15)


# ------------------------------------------------------------------- Mooncake-size hashes
@pytest.mark.parametrize("hb", [16, 32, 512])
def test_a_kv_block_is_keyed_by_the_hash_block_holding_its_last_token(hb):
    kv = kv_cache(200, prefix_block_tokens=hb)
    prompt = 1200
    hashes = tuple(range(100, 100 + -(-prompt // hb)))
    keys = kv.shareable_keys(waiting_request(request_spec(0, prompt, hashes=hashes)))
    assert len(keys) == prompt // 16  # every full block is covered by a hash
    assert keys == tuple((hashes[((j + 1) * 16 - 1) // hb], j) for j in range(len(keys)))


def test_mooncake_512_token_hashes_map_to_32_kv_blocks_each():
    kv = kv_cache(200, prefix_block_tokens=512)
    keys = kv.shareable_keys(waiting_request(request_spec(0, 1200, hashes=(7, 8, 9))))
    assert [k[0] for k in keys] == [7] * 32 + [8] * 32 + [9] * 11  # 1200 // 16 = 75 blocks
    # a partial hash list covers only its blocks
    assert len(kv.shareable_keys(waiting_request(request_spec(1, 1200, hashes=(7,))))) == 32
    running_request(kv, request_spec(2, 1200, hashes=(7, 8, 9)), outputs=1)
    # one shared 512-token hash = 32 KV blocks of 16 tokens
    assert kv.prefix_hit(waiting_request(request_spec(3, 1100, hashes=(7, 5, 6)))) == (512, 0)
    assert kv.prefix_hit(waiting_request(request_spec(4, 1100, hashes=(7, 8, 6)))) == (1024, 0)


# ------------------------------------------------- a block re-cached by a second preemption
def test_a_second_preemption_does_not_lose_lru_blocks():
    kv = kv_cache(40, prefix_block_tokens=16)
    s = Request(request_spec(0, 33, output=1, hashes=(1, 2, 3)))
    r = Request(request_spec(1, 100, output=50, hashes=(1, 2)))  # blocks 2-5 private
    for req in (s, r):  # both prefill the shared 2 blocks in the same step
        kv.admit(req)
    for req, n in ((s, 33), (r, 100)):
        kv.grow(req, n)
        req.num_computed_tokens = n
        req.num_output_tokens = 1
    kv.commit(s)
    kv.commit(r)  # r's copies of blocks 0-1 are duplicates, private to r
    kv.free(s)  # s done: the shared blocks (2, 1), (1, 0) cached
    preempt(kv, r)  # r's private blocks 2-5 cached; its duplicates freed, the shared
    # blocks taking their place (freed after r's tail, as vLLM frees r's copies)
    assert lru_keys(kv) == [(-2, 5), (-2, 4), (-2, 3), (-2, 2), (2, 1), (1, 0)]
    # orphan r's blocks 2-5: the shared blocks first in eviction order (a hole the
    # duplicates no longer leave, but the bookkeeping must survive one)
    for k in ((2, 1), (1, 0)):
        kv.lru.move_to_end(k, last=False)
    # 1-token requests use up the fresh blocks and evict the two shared blocks, then end
    fillers = [Request(request_spec(2 + i, 1, output=1)) for i in range(kv.uncached_free + 2)]
    for f in fillers:
        kv.admit(f)
        kv.grow(f, 1)
        f.num_computed_tokens = f.num_output_tokens = 1
    assert kv.free_blocks == 4 and lru_keys(kv) == [(-2, j) for j in (5, 4, 3, 2)]
    for f in fillers:
        kv.free(f)
    assert kv.prefix_hit(r) == (0, 0)  # block 0 is gone, so r's blocks 2-5 are orphaned
    kv.admit(r)
    kv.grow(r, 101)  # prompt + its 1 output, with fresh blocks
    r.num_computed_tokens = 101
    r.num_output_tokens = 2
    kv.commit(r)
    preempt(kv, r)  # its blocks 2-5 are freed again under the orphans' keys
    assert kv.free_blocks == kv.num_blocks  # nothing is held ...
    assert kv.lru_blocks == sum(kv.lru.values())  # ... and the LRU knows every cached one
    everything = Request(request_spec(99, 40 * 16, output=1))
    kv.grow(everything, 40 * 16)  # so the whole pool can be allocated


# ----------------------------------------------------------------- random op sequences
OPS = st.lists(st.tuples(st.sampled_from(["arrive", "admit", "step", "step", "preempt"]),
                         st.integers(0, 2**16), st.integers(1, 64)), max_size=60)


def check_accounting(kv, running, waiting) -> None:
    assert kv.free_blocks == kv.uncached_free + kv.lru_blocks
    assert min(kv.free_blocks, kv.uncached_free, kv.lru_blocks, kv.used_blocks) >= 0
    assert kv.used_blocks + kv.free_blocks == kv.num_blocks
    assert all(n >= 1 for n in kv.lru.values())
    assert kv.lru_blocks == sum(kv.lru.values())
    assert all(n >= 1 for n in kv.refs.values())
    assert not set(kv.lru) & set(kv.refs)
    assert kv.hit_tokens <= kv.query_tokens
    # held blocks: each request's, a shared block counted once
    shared_extra = sum(n - 1 for n in kv.refs.values())
    assert kv.used_blocks == sum(r.num_blocks for r in running) - shared_extra
    for r in running:
        assert r.num_blocks == blocks_for(r.num_computed_tokens, kv.block_size)
        assert all(k in kv.refs for k in kv.keys.get(r.request_id, ()))
    for r in waiting:
        assert r.num_blocks == 0 and r.num_computed_tokens == 0


def run_step(kv, running, req, n) -> None:
    """Grow `req` by n tokens, compute them, commit; sample and retire as end_step does."""
    kv.grow(req, n)
    req.num_computed_tokens += n
    kv.commit(req)
    if req.num_computed_tokens == req.num_tokens:
        req.num_output_tokens += 1
        if req.is_finished:
            running.remove(req)
            kv.free(req)


@settings(max_examples=50, deadline=None)
@given(num_blocks=st.integers(4, 24), ops=OPS)
def test_random_admit_grow_commit_free_sequences_keep_the_books(num_blocks, ops):
    """Accounting stays consistent over random admit/grow/commit/preempt/finish
    sequences on prompts sharing three hashed prefixes, and the ledger's predictions
    (admission cost, blocks a preemption frees) match what the cache then does."""
    kv = kv_cache(num_blocks, prefix_block_tokens=16)
    running: list = []
    waiting: list = []
    rid = 0
    for op, a, b in ops:
        if op == "arrive":
            prompt, output, fam = 1 + a % 120, 1 + b % 6, a % 3
            if blocks_for(prompt + output - 1, 16) > num_blocks:
                continue  # the engine rejects it
            n = blocks_for(prompt, 16)
            hashes = tuple(fam * 100 + j for j in range(min(n, 2 + 2 * fam)))
            hashes += tuple(10**4 * (rid + 1) + j for j in range(n - len(hashes)))
            waiting.append(Request(request_spec(rid, prompt, output, hashes=hashes)))
            rid += 1
        elif op == "admit" and waiting:
            req = waiting[a % len(waiting)]
            cached, _ = kv.prefix_hit(req)
            want = min(b, req.num_tokens - cached)
            ledger = KVLedger(kv)
            cost = ledger.admit_cost(req, want)
            if cost > kv.free_blocks:
                continue
            free = kv.free_blocks
            waiting.remove(req)
            running.append(req)
            kv.admit(req)
            assert req.num_computed_tokens == cached
            run_step(kv, running, req, want)
            assert free - kv.free_blocks == cost or req.is_finished
        elif op == "step" and running:
            req = running[a % len(running)]
            n = min(b, req.num_remaining)
            if kv.extra_blocks(req, n) > kv.free_blocks:
                with pytest.raises(RuntimeError, match="beyond KV capacity"):
                    kv.grow(req, n)
                continue
            run_step(kv, running, req, n)
        elif op == "preempt" and running:
            req = running.pop(a % len(running))
            expect = kv.free_blocks + kv.blocks_freed_by(req, {})
            preempt(kv, req)
            assert kv.free_blocks == expect
            waiting.insert(0, req)
        check_accounting(kv, running, waiting)
    for req in list(running):  # everyone leaves: the whole pool is free again
        running.remove(req)
        kv.free(req)
    assert kv.free_blocks == num_blocks and not kv.refs

"""The CPU KV tier (`core.kv_offload`, `sim.engine.offload`): the host LRU alone, the block
accounting of stores and loads, a load timed by hand end to end, the invariant that a
block is never both on the GPU and in flight (a property over random traces), and the
refusals.

Block size 16; with `prefix_block_tokens=16` each prefix hash covers one KV block, so KV
block j of a prompt is keyed (hashes[j], j). The test profiles hold 2048 bytes of KV per
token: 32 KiB per block.
"""

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from factories import finished_request, request_spec, running_request, waiting_request
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.kv_cache import KVConfig, PrefixKVCache
from chunksim.core.kv_factory import make_kv_cache
from chunksim.core.kv_offload import HostTier, OffloadKVCache
from chunksim.core.ledger import KVLedger
from chunksim.core.spec import RequestSpec, Workload
from chunksim.sim.engine import core as sim_core
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.engine.offload_config import OffloadConfig, parse_host_link
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.run import RunConfig, simulate

ROOT = Path(__file__).resolve().parents[1]
BLOCK_BYTES = 2048 * 16
GB = 1e9


def offload_kv(blocks: int, host_blocks: int, write_back: bool = False,
               eagle: bool = False) -> OffloadKVCache:
    kv = make_kv_cache(KVConfig(blocks, 16, True, 16, host_blocks, BLOCK_BYTES, GB, 1e-5,
                                host_write_back=write_back, drop_last_hit_block=eagle))
    assert type(kv) is OffloadKVCache
    return kv


# --------------------------------------------------------------------------- the host LRU
def test_host_tier_drops_the_least_recently_stored_blocks_first():
    host = HostTier(3)
    for k in ("a", "b", "c"):
        host.store((k, 0))
    host.store(("a", 0))  # stored again: the most recent now
    host.store(("d", 0))  # full: "b" (the oldest) goes
    assert list(host.lru) == [("c", 0), ("a", 0), ("d", 0)]
    assert (host.blocks, host.dropped) == (3, 1)
    assert ("b", 0) not in host and ("a", 0) in host


def test_host_tier_counts_anonymous_groups_and_drops_them_in_part():
    host = HostTier(5)
    host.store(("a", 0))
    host.store_anonymous(3)
    host.store_anonymous(3)  # 7 > 5: "a" and 1 block of the first group go
    assert host.blocks == 5 and host.dropped == 2
    assert list(host.lru.values()) == [2, 3] and ("a", 0) not in host
    host.store_anonymous(9)  # larger than the tier: only its newest 5 blocks stay
    assert host.blocks == 5 and list(host.lru.values()) == [5]


def test_host_tier_take_removes_a_block_once():
    host = HostTier(4)
    host.store(("a", 0))
    assert host.take(("a", 0)) and not host.take(("a", 0))
    assert host.blocks == 0


def test_a_zero_capacity_tier_keeps_nothing():
    host = HostTier(0)
    host.store(("a", 0))
    host.store_anonymous(4)
    assert host.blocks == 0 and not host.lru and host.dropped == 5
    with pytest.raises(ValueError):
        HostTier(-1)


# ----------------------------------------------------------------- stores and loads, by hand
def test_no_host_blocks_is_the_plain_prefix_cache():
    assert type(make_kv_cache(KVConfig(8, 16, True, 16))) is PrefixKVCache
    with pytest.raises(ValueError, match="prefix caching"):
        KVConfig(8, 16, False, 16, host_blocks=4, block_bytes=1, host_bytes_per_s=1.0)


def test_write_back_gpu_evictions_move_to_the_host_and_load_back():
    kv = offload_kv(6, 16, write_back=True)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    assert kv.lru_blocks == 4 and kv.free_blocks == 6
    # a 96-token request takes every block: 2 uncached, then the 4 cached ones move to
    # the host, least recently freed first (a request frees its tail first)
    b = running_request(kv, request_spec(1, 96, output=1), computed=95)
    assert list(kv.host.lru) == [(4, 3), (3, 2), (2, 1), (1, 0)]
    assert kv.free_blocks == 0 and kv.lru_blocks == 0
    kv.free(b)  # its 5 full blocks join the GPU LRU as one anonymous group, 1 partial
    c = waiting_request(request_spec(2, 80, hashes=(1, 2, 3, 4, 5)))
    assert kv.prefix_hit(c) == (0, 0)
    assert kv.find_load(c) == (0, 4, 4)  # no GPU hit, 4 host blocks, 4 free blocks taken
    load = kv.start_load(c, 0, 4)
    assert kv.in_flight == {(1, 0), (2, 1), (3, 2), (4, 3)} and not kv.host.lru.keys() & {
        (1, 0), (2, 1), (3, 2), (4, 3)}
    # 4 blocks taken: the uncached partial one, then 3 of the group, evicted to the host
    assert kv.free_blocks == 2 and kv.host.blocks == 3
    # in flight: not hittable, and a request computing the same block keeps a duplicate
    assert kv.prefix_hit(waiting_request(request_spec(3, 80, hashes=(1, 2, 3, 9, 9)))) == (0, 0)
    kv.finish_load(load)
    assert not kv.in_flight and kv.free_blocks == 6
    assert list(kv.lru)[-4:] == [(4, 3), (3, 2), (2, 1), (1, 0)]  # head evicted last
    assert kv.prefix_hit(c) == (64, 4)
    kv.admit(c)
    assert (c.num_computed_tokens, kv.hit_tokens, kv.host_hit_tokens) == (64, 0, 64)


def test_a_write_back_load_holds_the_gpu_part_of_the_prefix():
    kv = offload_kv(8, 16, write_back=True)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    b = running_request(kv, request_spec(1, 96, output=1), computed=95)  # 4 free + 2 cached
    kv.free(b)
    assert list(kv.host.lru) == [(4, 3), (3, 2)] and kv.free_blocks == 8
    c = waiting_request(request_spec(2, 80, hashes=(1, 2, 3, 4, 5)))
    assert kv.find_load(c) == (32, 2, 4)  # 2 blocks on the GPU (taken from free), 2 loaded
    load = kv.start_load(c, 32, 2)
    assert kv.refs == {(1, 0): 1, (2, 1): 1} and kv.free_blocks == 4
    kv.take(kv.free_blocks)  # whatever else needs blocks: the held prefix stays
    assert kv.refs == {(1, 0): 1, (2, 1): 1} and kv.free_blocks == 0
    kv.finish_load(load)
    assert not kv.refs and kv.free_blocks == 4
    assert kv.prefix_hit(c) == (64, 4)


# ------------------------------------------- vLLM's write-through (the default), by hand
# vLLM 0.32.0, OffloadingConnectorScheduler._build_store_jobs: each step offers the CPU
# manager the request's full prompt blocks up to num_computed + scheduled tokens, from
# `next_stored_chunk_idx` (0 at first, so its prefix hits too); CPUOffloadingManager.
# prepare_store inserts the ones not there (LRU rank: most recent), evicting the least
# recent unpinned ones outside the offer, or stores nothing when it cannot; at the end
# on_request_finished re-ranks every key the request offered, last block first, so its
# first block is the most recent. A GPU eviction does not touch the host.
def test_write_through_stores_prompt_blocks_as_they_are_computed():
    kv = offload_kv(8, 16)
    a = running_request(kv, request_spec(0, 64, output=3, hashes=(1, 2, 3, 4)), computed=40)
    kv.commit(a, 40)  # a step that leaves 40 tokens computed: blocks 0 and 1 are full
    assert list(kv.host.lru) == [(1, 0), (2, 1)]
    kv.commit(a, 64)  # the prompt's last chunk
    assert list(kv.host.lru) == [(1, 0), (2, 1), (3, 2), (4, 3)]
    a.num_computed_tokens, a.num_output_tokens = 66, 3  # decodes: their blocks stay off
    kv.grow(a, 0)
    kv.commit(a, 66)
    assert kv.host.blocks == 4 and kv.host.stored == 4
    kv.free(a)  # finished: its blocks become the most recent, the first one last
    assert list(kv.host.lru) == [(4, 3), (3, 2), (2, 1), (1, 0)]
    # the GPU LRU evicts them all: the host keeps its copies
    kv.take(kv.free_blocks)
    assert kv.lru_blocks == 0 and kv.host.blocks == 4 and kv.host.dropped == 0


def test_write_through_offers_the_prefix_hit_too_and_drops_the_least_recent():
    kv = offload_kv(16, 4)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    assert list(kv.host.lru) == [(4, 3), (3, 2), (2, 1), (1, 0)]
    # a 64-token prompt sharing 2 blocks, 63 tokens computed: its steps offered blocks
    # 0..2; blocks 0 and 1 are there (kept in place), the new one needs a slot of the 4:
    # the least recent entry outside the offer, (4, 3), goes
    b = running_request(kv, request_spec(1, 64, output=1, hashes=(1, 2, 7, 8)), computed=63)
    assert b.num_cached_tokens == 32
    assert list(kv.host.lru) == [(3, 2), (2, 1), (1, 0), (7, 2)]
    assert (kv.host.blocks, kv.host.dropped, kv.host.stored) == (4, 1, 5)


def test_write_through_refuses_an_offer_it_cannot_make_room_for():
    kv = offload_kv(16, 2)
    finished_request(kv, request_spec(0, 32, output=1, hashes=(1, 2)))
    assert list(kv.host.lru) == [(2, 1), (1, 0)]
    # the same prompt again: GPU hit 1 block (num_tokens - 1 caps it), block 1 loads
    c = waiting_request(request_spec(2, 32, hashes=(1, 2)))
    load = kv.start_load(c, *kv.find_load(c)[:2])
    assert kv.host.pinned == {(2, 1): 1}
    # a 32-token prompt's 2 blocks need both host slots, one is being read: the offer
    # stores nothing (prepare_store returns None), and is made again at the next step,
    # which succeeds once the load landed
    b = running_request(kv, request_spec(1, 32, output=2, hashes=(5, 6)), outputs=1)
    assert list(kv.host.lru) == [(2, 1), (1, 0)] and kv.offered.get(1, 0) == 0
    kv.finish_load(load)
    kv.commit(b, 33)
    assert list(kv.host.lru) == [(5, 0), (6, 1)] and kv.offered[1] == 2
    assert kv.host.dropped == 2


def test_write_back_is_the_named_eviction_filled_tier():
    # SGLang HiCache's write_back: nothing reaches the host until the GPU evicts it
    kv = offload_kv(6, 16, write_back=True)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    assert not kv.host.lru and kv.lru_blocks == 4
    assert OffloadConfig(kv_offload_gib=1,
                         kv_offload_write_policy="write_back").kv_offload_write_policy == (
        "write-back")
    with pytest.raises(ValueError, match="--kv-offload-write-policy 'lazy'"):
        OffloadConfig(kv_offload_gib=1, kv_offload_write_policy="lazy")
    with pytest.raises(ValueError, match="give --kv-offload-gib"):
        OffloadConfig(kv_offload_write_policy="write-back")  # no tier: the flag would do nothing
    assert not OffloadConfig(kv_offload_gib=1).write_back  # vLLM's write-through by default


# The case: 6 GPU blocks (kv_blocks=7: one is vLLM's null block), a 4-block host
# tier. A (64 tokens, hashes 1-4) runs and finishes; B (64 tokens, hashes 5-8) takes 2
# uncached GPU blocks and evicts A's tail blocks 3 and 2 (a request frees its tail first).
# Write-through: B's 4 blocks, stored as B computes them, push A's 4 out of the host. C =
# A's prompt + one block: its GPU hit is A's blocks 0-1 (32 tokens) and block 2 is on
# neither tier, so it computes 48 tokens (vLLM). Write-back: A's evicted blocks 3 and 2 went
# to the host, so C loads them and computes 16.
THIRD = [(0.0, 64, 1, (1, 2, 3, 4)), (1.0, 64, 1, (5, 6, 7, 8)), (2.0, 80, 1, (1, 2, 3, 4, 9))]


@pytest.mark.parametrize("write, computed, loaded", [("write-through", 48, 0),
                                                      ("write-back", 16, 2)])
def test_a_third_request_vllm_prefills_is_loaded_only_by_write_back(const_profile, write,
                                                                    computed, loaded):
    gib = 4 * BLOCK_BYTES / 2**30
    off = OffloadConfig(kv_offload_gib=gib, kv_offload_link="1", kv_offload_write_policy=write)
    res, s = simulate(_wl(THIRD), const_profile, RunConfig(kv_blocks=7, offload=off))
    assert s["kv_offload_blocks"] == 4 and s["kv_offload_write_policy"] == write
    c = res.requests.iloc[2]
    assert (c["computed_tokens"], c["cached_tokens"]) == (computed, 80 - computed)
    assert s["kv_loaded_blocks"] == loaded and s["prefix_cache_hit_tokens"] == 32


# A prompt held whole on the host: vLLM's connector looks up to num_tokens (not
# num_tokens - 1, the GPU's cap), loads every full block, and once it lands sets
# num_computed_tokens = num_tokens - 1 (Scheduler._update_waiting_for_remote_kv): one
# token is computed, in the last loaded block. 6 GPU blocks, 16 host blocks: A (64 tokens,
# hashes 1-4) finishes; B (96 tokens) takes every GPU block, evicting A's; C = A's prompt.
def test_a_prompt_held_whole_on_the_host_loads_every_block_and_computes_one_token():
    kv = offload_kv(6, 16)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    kv.free(running_request(kv, request_spec(1, 96, output=1), computed=95))
    c = waiting_request(request_spec(2, 64, hashes=(1, 2, 3, 4)))
    assert kv.prefix_hit(c) == (0, 0)
    assert kv.find_load(c) == (0, 4, 4)  # 4 host blocks (write-back would say 3)
    load = kv.start_load(c, 0, 4)
    assert set(kv.host.pinned) == kv.in_flight == {(1, 0), (2, 1), (3, 2), (4, 3)}
    # a second request on the same blocks waits for this load (vLLM: lookup deferred)
    assert kv.find_load(waiting_request(request_spec(3, 64, hashes=(1, 2, 3, 4)))) == "busy"
    kv.finish_load(load)
    assert not kv.host.pinned and kv.host.blocks == 4 + 5  # copies stay on the host
    free = kv.free_blocks
    # the ledger's view: 63 tokens hit, 3 blocks from the free pool for the first 63 -
    # 15 tokens; the admission takes the 4th (the landed tail) for the 1 token left
    assert kv.prefix_hit(c) == (63, 3)
    ledger = KVLedger(kv)
    assert ledger.cached(c) == 63 and ledger.admit_cost(c, 1) == 4
    kv.admit(c)
    assert (c.num_computed_tokens, c.num_blocks, free - kv.free_blocks) == (63, 4, 4)
    assert kv.extra_blocks(c, 1) == 0  # the token goes into the landed last block
    assert (kv.hit_tokens, kv.host_hit_tokens) == (0, 63) and not kv.landed
    assert kv.refs == {(1, 0): 1, (2, 1): 1, (3, 2): 1, (4, 3): 1}


def test_a_whole_prompt_load_end_to_end(const_profile):
    reqs = [(0.0, 64, 1, (1, 2, 3, 4)), (1.0, 96, 1, ()), (2.0, 64, 1, (1, 2, 3, 4))]
    off = OffloadConfig(kv_offload_gib=16 * BLOCK_BYTES / 2**30, kv_offload_link="1")
    res, s = simulate(_wl(reqs), const_profile, RunConfig(kv_blocks=7, offload=off),
                      schedule_log=True)
    load_s = 4 * BLOCK_BYTES / GB + 10e-6
    c = res.requests.iloc[2]
    assert (c["computed_tokens"], c["cached_tokens"]) == (1, 63)
    assert c["first_scheduled_s"] == 2.0 + load_s
    rows = res.schedule[res.schedule["request_id"] == 2]
    assert list(rows["kind"]) == ["load", "loaded", "new"]
    assert rows["tokens"].iloc[0] == 64 and rows["tokens"].iloc[2] == 1
    assert rows["blocks"].iloc[2] == 4
    assert s["host_cache_hit_tokens"] == 63 and s["kv_loaded_blocks"] == 4


def test_a_request_needing_blocks_in_flight_waits_for_them(const_profile):
    # C and D arrive together wanting A's 4 blocks, which only the host holds: C loads
    # them; D's lookup reaches blocks in flight, so it is skipped (vLLM: the connector
    # defers it while `_chunks_being_loaded` holds them) and nothing else can run. When
    # the load lands both are admitted in one step, D hitting the landed blocks on the GPU
    reqs = [*EVICTED[:2], (2.0, 80, 1, (1, 2, 3, 4, 5)), (2.0, 80, 1, (1, 2, 3, 4, 6))]
    off = OffloadConfig(kv_offload_gib=0.001, kv_offload_link="1")
    res, s = simulate(_wl(reqs), const_profile, RunConfig(kv_blocks=11, offload=off))
    load_s = 4 * BLOCK_BYTES / GB + 10e-6
    c, d = res.requests.iloc[2], res.requests.iloc[3]
    assert c["first_scheduled_s"] == d["first_scheduled_s"] == 2.0 + load_s
    assert (c["cached_tokens"], d["cached_tokens"]) == (64, 64)
    assert s["kv_loads"] == 1 and s["host_cache_hit_tokens"] == 64
    assert s["prefix_cache_hit_tokens"] == 64


# EAGLE/MTP with the tier (vLLM: KVCacheManager drops the GPU hit's last block; the
# connector queries one chunk more and pops it, `_lookup_complete_chunks`). A 48-token
# prompt computed before, on both tiers: the GPU hit is 2 blocks (num_tokens - 1 caps it),
# 1 with the drop; the host run after it is blocks 1-2, 1 with the pop: a 1-block load and
# 16 tokens computed. Without a drafter: GPU 2 blocks, host block 2, a whole-prompt load.
@pytest.mark.parametrize("eagle, gpu, blocks, computed", [(True, 16, 1, 16),
                                                          (False, 32, 1, 1)])
def test_eagle_drops_a_block_of_the_host_run_too(eagle, gpu, blocks, computed):
    kv = offload_kv(16, 16, eagle=eagle)
    finished_request(kv, request_spec(0, 48, output=1, hashes=(1, 2, 3)))
    c = waiting_request(request_spec(1, 48, hashes=(1, 2, 3)))
    assert kv.find_load(c) == (gpu, blocks, gpu // 16 + blocks)
    kv.finish_load(kv.start_load(c, gpu, blocks))
    kv.admit(c)
    assert c.num_computed_tokens == 48 - computed


# ------------------------------------------------------------------------- end to end
def _wl(reqs):
    specs = tuple(RequestSpec(i, a, p, o, h) for i, (a, p, o, h) in enumerate(reqs))
    return Workload("offload", specs, prefix_block_tokens=16)


EVICTED = [
    (0.0, 64, 1, (1, 2, 3, 4)),   # its 4 full blocks end in the GPU prefix cache
    (1.0, 160, 1, ()),            # fills the GPU (10 blocks; kv_blocks=11 with vLLM's null
                                  # block): they go to the host
    (2.0, 80, 1, (1, 2, 3, 4, 5)),  # hits them on the host only
]


def test_a_host_hit_waits_exactly_the_load_then_computes_only_the_tail(const_profile):
    off = OffloadConfig(kv_offload_gib=0.001, kv_offload_link="1")  # 32 blocks, 1 GB/s
    res, s = simulate(_wl(EVICTED), const_profile, RunConfig(kv_blocks=11, offload=off))
    load_s = 4 * BLOCK_BYTES / GB + 10e-6  # bytes / bandwidth + latency
    r = res.requests.iloc[2]
    assert r["first_scheduled_s"] == 2.0 + load_s
    assert r["first_token_s"] == pytest.approx(2.0 + load_s + 0.010, abs=1e-12)
    assert (r["computed_tokens"], r["cached_tokens"]) == (16, 64)
    assert s["kv_loads"] == 1 and s["kv_loaded_blocks"] == 4
    assert s["kv_loaded_bytes"] == 4 * BLOCK_BYTES
    assert s["mean_kv_load_wait_ms"] == pytest.approx(load_s * 1000.0, rel=1e-9)
    assert s["host_cache_hit_tokens"] == 64 and s["prefix_cache_hit_tokens"] == 0
    assert s["host_cache_hit_rate"] == 64 / (64 + 160 + 80)
    assert s["prefix_cache_hit_rate"] == 0.0
    assert s["kv_offload_blocks"] == 2**20 // BLOCK_BYTES
    # without the tier the prefix is gone: all 80 tokens computed, no wait
    res0, s0 = simulate(_wl(EVICTED), const_profile, RunConfig(kv_blocks=11))
    r0 = res0.requests.iloc[2]
    assert (r0["first_scheduled_s"], r0["computed_tokens"], r0["cached_tokens"]) == (2.0, 80, 0)
    assert "kv_loads" not in s0


def test_a_load_short_of_gpu_blocks_holds_the_queue_until_they_free(const_profile):
    # request 2 holds 8 of the 10 blocks at t=2: request 3's load needs 4, so admission
    # stops at it (vLLM: allocate_slots fails -> break) and request 4, which would fit,
    # waits behind it; when request 2 finishes, the load starts and request 4 goes at once
    reqs = [*EVICTED[:2], (1.5, 64, 90, ()), (2.0, 80, 1, (1, 2, 3, 4, 5)), (2.0, 16, 1, ())]
    off = OffloadConfig(kv_offload_gib=0.001, kv_offload_link="1")
    res, s = simulate(_wl(reqs), const_profile, RunConfig(kv_blocks=11, offload=off),
                      schedule_log=True)
    done = res.requests["finish_s"].iloc[2]
    load_s = 4 * BLOCK_BYTES / GB + 10e-6
    assert res.requests["first_scheduled_s"].iloc[4] == done
    # request 3's load lands inside request 4's 10 ms step: it runs at the next one
    assert res.requests["first_scheduled_s"].iloc[3] == pytest.approx(done + 0.010)
    assert done + load_s < done + 0.010
    sched = res.schedule
    load = sched[(sched["request_id"] == 3) & (sched["kind"] == "load")]
    first4 = sched[(sched["request_id"] == 4) & (sched["kind"] == "new")]
    assert len(load) == 1 and load["step"].iloc[0] == first4["step"].iloc[0]
    assert s["kv_loads"] == 1 and res.requests["computed_tokens"].iloc[3] == 16


def test_each_replica_of_a_fleet_has_its_own_tier(const_profile):
    # round-robin: even requests to replica 0, odd ones to replica 1, each the same story
    twin = [(a, p, o, tuple(x + 100 for x in h)) for a, p, o, h in EVICTED]
    reqs = [r for pair in zip(EVICTED, twin, strict=True) for r in pair]
    off = OffloadConfig(kv_offload_gib=0.001, kv_offload_link="1")
    cfg = RunConfig(kv_blocks=11, offload=off, fleet=FleetConfig(replicas=2))
    res, s = simulate(_wl(reqs), const_profile, cfg)
    assert s["kv_loads"] == 2 and s["kv_loaded_blocks"] == 8
    assert s["host_cache_hit_tokens"] == 128
    load_s = 4 * BLOCK_BYTES / GB + 10e-6
    assert list(res.requests["first_scheduled_s"].iloc[4:]) == [2.0 + load_s] * 2


def test_a_prefix_router_sees_the_host_tier():
    kv = offload_kv(6, 16)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    kv.free(running_request(kv, request_spec(1, 96, output=1), computed=95))
    c = waiting_request(request_spec(2, 80, hashes=(1, 2, 3, 4, 5)))
    assert kv.prefix_hit(c)[0] == 0 and kv.reachable_tokens(c) == 64


def test_the_schedule_log_shows_the_load(const_profile):
    off = OffloadConfig(kv_offload_gib=0.001, kv_offload_link="pcie-gen4")
    res, _ = simulate(_wl(EVICTED), const_profile, RunConfig(kv_blocks=11, offload=off),
                      schedule_log=True)
    rows = res.schedule[res.schedule["request_id"] == 2]
    assert list(rows["kind"]) == ["load", "loaded", "new"]
    load, landed, new = (rows.iloc[i] for i in range(3))
    assert (load["tokens"], load["computed_tokens"], load["blocks"]) == (64, 0, 4)
    assert landed["computed_tokens"] == 64
    assert (new["tokens"], new["cached_tokens"]) == (16, 64)


def test_offload_gib_zero_is_todays_run_byte_for_byte(const_profile, tmp_path):
    import pandas as pd

    runs = [simulate(_wl(EVICTED * 1), const_profile, RunConfig(kv_blocks=11, offload=o))
            for o in (OffloadConfig(), OffloadConfig(kv_offload_gib=0.0,
                                                     kv_offload_link="pcie-gen4"))]
    (a, sa), (b, sb) = runs
    assert json.dumps(sa) == json.dumps(sb)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)


# -------------------------------------------------------------------- the invariant
def _check(core) -> None:
    """The tiers' invariants, as the engine is about to run a step."""
    kv = core.kv
    gpu = set(kv.lru) | set(kv.refs)
    assert not kv.in_flight & gpu, "a block is both on the GPU and in flight"
    if kv.write_back:  # exclusive tiers
        assert not kv.in_flight & set(kv.host.lru), "a block in flight is still on the host"
        assert not gpu & set(kv.host.lru), "a block is on the GPU and on the host"
        assert not kv.host.pinned
    else:  # copies: a block in flight stays on the host, pinned, until it lands
        assert kv.in_flight == set(kv.host.pinned) <= set(kv.host.lru)
        assert not kv.landed.keys() & {ld.req.request_id for ld in core.offload.loads}
    assert kv.host.blocks == sum(kv.host.lru.values()) <= kv.host.capacity
    assert kv.lru_blocks == sum(kv.lru.values())
    assert kv.free_blocks == kv.uncached_free + kv.lru_blocks >= 0
    flying = sum(len(ld.keys) for ld in core.offload.loads)
    assert flying == len(kv.in_flight)
    assert kv.free_blocks + flying <= kv.num_blocks


@contextmanager
def checked_cores():
    """Within it, every offloading engine core checks `_check` before each step; yields
    the list of cores seen."""
    seen = []
    begin = sim_core.EngineCore.begin_step

    def checked(self, plan, start_s):
        if self.offload is not None:
            if not seen or seen[-1] is not self:
                seen.append(self)
            _check(self)
        return begin(self, plan, start_s)

    mp = pytest.MonkeyPatch()
    mp.setattr(sim_core.EngineCore, "begin_step", checked)
    try:
        yield seen
    finally:
        mp.undo()


conversations = st.lists(
    st.tuples(st.integers(0, 4),            # conversation
              st.integers(1, 6),            # turns' new hash blocks
              st.integers(1, 40),           # output tokens
              st.floats(0.0, 0.05)),        # gap to the previous arrival, s
    min_size=2, max_size=25)


@settings(max_examples=40, deadline=None)
@given(conversations, st.integers(12, 40), st.integers(0, 24),
       st.sampled_from(["budget", "chunk", "whole"]), st.booleans(),
       st.sampled_from(["write-through", "write-back"]))
# two requests prefill the same blocks; the cached copy of block 6 is evicted while the
# duplicate is held: the duplicate keeps it cached, so the prefix has no hole for a load
# to reach past onto block 7, which the GPU still caches
@example([(0, 1, 1, 0.0), (0, 4, 4, 0.0), (1, 4, 9, 0.0), (1, 6, 1, 0.0), (1, 3, 1, 0.0),
          (0, 3, 1, 0.0), (0, 1, 1, 0.0)], 18, 4, "chunk", False, "write-through")
@example([(0, 3, 1, 0.0), (2, 4, 1, 0.0), (2, 4, 1, 0.0), (3, 1, 1, 0.0), (3, 3, 1, 0.0),
          (0, 5, 21, 0.0), (1, 6, 1, 0.0), (1, 2, 3, 0.0), (2, 3, 1, 0.0), (3, 2, 4, 0.0),
          (1, 1, 1, 0.0)], 19, 8, "chunk", False, "write-through")
def test_no_block_is_ever_both_on_the_gpu_and_in_flight(linear_profile, trace, kv_blocks,
                                                        host_blocks, policy, async_, write):
    # multi-turn conversations: each turn's prompt extends its conversation's last one
    prefix: dict[int, tuple] = {}
    reqs, t, fresh = [], 0.0, 1000
    for conv, new, out, gap in trace:
        h = prefix.get(conv, (conv,))
        h = h + tuple(range(fresh, fresh + new))
        fresh += new
        prefix[conv] = h
        prompt = min(len(h) * 16 - 3, kv_blocks * 16 - out)
        if prompt < 1:
            continue
        t += gap
        reqs.append((t, prompt, out, h[: -(-prompt // 16)]))
    if not reqs:
        return
    gib = host_blocks * 2048 * 16 / 2**30
    cfg = RunConfig(policy=policy, kv_blocks=kv_blocks, chunk=64 if policy != "whole" else None,
                    offload=OffloadConfig(kv_offload_gib=gib, kv_offload_link="0.5",
                                          kv_offload_write_policy=write if gib else None),
                    engine=EngineConfig(async_scheduling=async_))
    with checked_cores() as seen:
        res, s = simulate(_wl(reqs), linear_profile, cfg)
    assert s["completed"] + s["rejected"] == len(reqs)
    if host_blocks:
        assert seen and not seen[-1].kv.in_flight and not seen[-1].offload.loads
        # a host hit is never counted as a GPU hit: the two add up to at most the prompts
        assert s["host_cache_hit_tokens"] + s["prefix_cache_hit_tokens"] <= sum(
            p for _, p, _, _ in reqs) + sum(res.requests["recomputed_tokens"])


@settings(max_examples=25, deadline=None)
@given(conversations, st.integers(12, 40), st.sampled_from(["budget", "chunk"]))
def test_a_roomy_write_through_tier_holds_every_prompt_block_run(linear_profile, trace,
                                                                  kv_blocks, policy):
    # room for everything: every full prompt block of every request that ran is on the
    # host at the end (stored as computed; output blocks never), and nothing was dropped
    prefix: dict[int, tuple] = {}
    reqs, t, fresh = [], 0.0, 1000
    for conv, new, out, gap in trace:
        h = prefix[conv] = prefix.get(conv, (conv,)) + tuple(range(fresh, fresh + new))
        fresh += new
        prompt = min(len(h) * 16 - 3, kv_blocks * 16 - out)
        if prompt >= 1:
            t += gap
            reqs.append((t, prompt, out, h[: -(-prompt // 16)]))
    if not reqs:
        return
    cfg = RunConfig(policy=policy, kv_blocks=kv_blocks, chunk=64,
                    offload=OffloadConfig(kv_offload_gib=4096 * BLOCK_BYTES / 2**30))
    with checked_cores() as seen:
        res, s = simulate(_wl(reqs), linear_profile, cfg)
    kv = seen[-1].kv
    want = set()
    for rid, (_, prompt, _, h) in enumerate(reqs):
        if res.requests["finish_s"].iloc[rid] == res.requests["finish_s"].iloc[rid]:  # ran
            want |= {(h[j], j) if j < len(h) else (-1 - rid, j) for j in range(prompt // 16)}
    assert want == set(kv.host.lru) and kv.host.blocks == len(want) == kv.host.stored
    assert s["host_blocks_dropped"] == 0 and not kv.offered


host_ops = st.lists(st.tuples(st.integers(0, 3),                   # request
                              st.sampled_from(["offer", "load", "land", "finish"]),
                              st.lists(st.integers(0, 9), min_size=1, max_size=4,
                                       unique=True)),                 # its blocks
                    min_size=1, max_size=30)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(host_ops, st.integers(1, 6))
@example([(0, "offer", [1, 2, 3]), (0, "finish", [1]), (1, "offer", [9])], 3)  # drops 3
@example([(0, "offer", [1, 2]), (1, "load", [1]), (2, "offer", [5, 6])], 2)  # refused
def test_the_host_lru_is_vllms_cpu_offloading_manager(ops, capacity):
    # differential, where vLLM is installed: the same offers (prepare_store, stored at
    # once), loads (prepare_load pins, complete_load unpins) and finishes (every block a
    # request offered or loaded becomes most recent, its first block last) on
    # HostTier and on vLLM's CPUOffloadingManager with its LRU policy keep the same
    # blocks, refuse the same offers and drop the same blocks
    pytest.importorskip("vllm.v1.kv_offload.cpu.manager")
    from vllm.v1.kv_offload.base import ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    def key(i):
        return make_offload_key(i.to_bytes(8, "big"), 0)

    ours, theirs = HostTier(capacity), CPUOffloadingManager(capacity)
    ctx: dict = {}
    mine: dict = {}  # request -> blocks it offered or loaded, in prompt order
    loading: dict = {}
    for rid, op, blocks in ops:
        if rid not in ctx:
            ctx[rid] = ReqContext(str(rid))
            theirs.on_new_request(ctx[rid])
            mine[rid] = []
        c = ctx[rid]
        for i in blocks:
            c.set_offload_key_position(key(i), (i + 1) * 16)
        if op == "offer":
            out = theirs.prepare_store([key(i) for i in blocks], c)
            if out is not None:
                theirs.complete_store(out.keys_to_store, c)
            assert ours.offer([(i,) for i in blocks]) == (out is not None)
            mine[rid] += [i for i in blocks if i not in mine[rid]]
        elif op == "load" and rid not in loading and all((i,) in ours for i in blocks):
            theirs.prepare_load([key(i) for i in blocks], c)
            for i in blocks:
                ours.pin((i,))
            loading[rid] = blocks
            mine[rid] += [i for i in blocks if i not in mine[rid]]
        elif op == "land" and rid in loading:
            blocks = loading.pop(rid)
            theirs.complete_load([key(i) for i in blocks], c)
            for i in blocks:
                ours.unpin((i,))
        elif op == "finish" and rid not in loading:
            theirs.on_request_finished(c)
            ours.touch([(i,) for i in sorted(mine.pop(rid), reverse=True)])
            del ctx[rid]
        held = {int.from_bytes(k[:-4], "big") for k in theirs._policy.chunks}
        assert {k[0] for k in ours.lru} == held
        assert ours.blocks == len(held) <= capacity


# ------------------------------------------------------------------------- refusals
def test_offload_without_prefix_caching_is_refused():
    with pytest.raises(ValueError, match="needs prefix caching"):
        RunConfig(prefix_caching=False, offload=OffloadConfig(kv_offload_gib=4))
    RunConfig(prefix_caching=False, offload=OffloadConfig(kv_offload_gib=0))  # off: fine


def test_validation_refuses_the_tier():
    from chunksim.validate.run import comparable_config

    cfg = RunConfig(offload=OffloadConfig(kv_offload_gib=2))
    with pytest.raises(ValueError, match="the live loop keeps no prefix cache"):
        comparable_config(cfg, None, None)  # refused before either is read


def test_a_tier_too_small_for_one_block_is_refused(const_profile):
    off = OffloadConfig(kv_offload_gib=1e-6)  # 1 KiB < one 32 KiB block
    with pytest.raises(ValueError, match="holds no KV block"):
        simulate(_wl(EVICTED), const_profile, RunConfig(kv_blocks=11, offload=off))


@pytest.mark.parametrize("link", ["pcie-gen3", "0", "-2", "fast", "inf", "nan"])
def test_bad_links_are_refused(link):
    with pytest.raises(ValueError, match="--kv-offload-link"):
        OffloadConfig(kv_offload_gib=1, kv_offload_link=link)


def test_link_presets_and_bandwidths():
    assert parse_host_link("pcie-gen4") == (32e9, 10e-6)
    assert parse_host_link("PCIe-Gen5") == (64e9, 10e-6)
    assert parse_host_link("25") == (25e9, 10e-6)


@pytest.mark.slow  # each case runs the sim command in a fresh process
@pytest.mark.parametrize("args,words", [
    (["run", "--kv-offload-gib", "2", "--no-prefix-caching"], "needs prefix caching"),
    (["run", "--kv-offload-gib", "2", "--kv-offload-link", "pcie-gen9"], "--kv-offload-link"),
    (["run", "--kv-offload-write-policy", "write-back"], "give --kv-offload-gib"),
    (["run", "--kv-offload-gib", "2", "--kv-offload-write-policy", "lru"],
     "choose write-through or write-back"),
])
def test_the_cli_refuses_in_one_line(args, words, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "chunksim.cli", *args, "-n", "3",
                           "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr


def test_the_cli_runs_the_tier_and_reports_it(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(app, [
        "run", "--workload", "trace", "--trace",
        "chunksim/data/workloads/mooncake_conversation_sample.jsonl", "-n", "60",
        "--kv-blocks", "3000", "--kv-offloading-size", "4",
        "--kv-offload-write-policy", "write-back", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "summary.json").read_text())
    for key in ("host_cache_hit_rate", "kv_loaded_bytes", "mean_kv_load_wait_ms",
                "p99_kv_load_wait_ms", "kv_loads", "host_blocks_stored"):
        assert key in s
    assert s["kv_offload_write_policy"] == "write-back"


# ------------------------------------------- the same cases on vLLM's own scheduler
def _vllm_offloading_run(gpu_blocks: int, host_blocks: int, prompts) -> dict:
    """vLLM 0.32.0's Scheduler with its OffloadingConnector (CPU backend, LRU), a tiny
    model config, the worker faked: every transfer job completes right after the step
    that issued it. `prompts`: (request id, block contents) run one after another, each
    to its end. Returns request id -> [("load", tokens) or ("step", tokens), ...]."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingWorkerMetadata,
    )
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm_factories import vllm_scheduler

    # vLLM keeps one block as its null block; a head of 32 makes a block one 4 KiB chunk
    sched, hasher = vllm_scheduler(16, gpu_blocks + 1, head_size=32, host_blocks=host_blocks)
    seen: dict = {}
    for rid, contents in prompts:
        toks = [c * 100 + i for c in contents for i in range(16)]
        sched.add_request(Request(rid, toks, SamplingParams(max_tokens=1, ignore_eos=True),
                                  None, arrival_time=0.0, block_hasher=hasher))
        while rid in sched.requests:
            out = sched.schedule()
            meta = out.kv_connector_metadata
            loads = {job.req_id for job in meta.load_jobs.values()}
            for r in loads:
                seen.setdefault(r, []).append(("load", sched.requests[r].num_computed_tokens))
            ids = list(out.num_scheduled_tokens)
            for r in ids:
                seen.setdefault(r, []).append(("step", out.num_scheduled_tokens[r]))
            reqs = sched.requests
            sched.update_from_output(out, ModelRunnerOutput(
                req_ids=ids, req_id_to_index={x: k for k, x in enumerate(ids)},
                sampled_token_ids=[[7] if reqs[i].num_computed_tokens >= reqs[i].num_tokens
                                   else [] for i in ids],
                kv_connector_output=KVConnectorOutput(
                    finished_recving=loads or None,
                    kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs={
                        j: 1 for j in (*meta.load_jobs, *meta.store_jobs)}))))
    return seen


@pytest.mark.slow
def test_vllms_offloading_connector_agrees_where_installed(const_profile):
    # the third request and the whole-prompt load, on vLLM's own scheduler and
    # connector (skipped without vLLM) and on chunksim (write-through)
    pytest.importorskip("vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler")
    third = _vllm_offloading_run(6, 4, [("A", (1, 2, 3, 4)), ("B", (5, 6, 7, 8)),
                                        ("C", (1, 2, 3, 4, 9))])
    assert third["C"] == [("step", 48)]  # no load: 48 tokens computed after a 32 hit
    whole = _vllm_offloading_run(6, 16, [("A", (1, 2, 3, 4)), ("B", tuple(range(10, 16))),
                                         ("C", (1, 2, 3, 4))])
    assert whole["C"] == [("load", 64), ("step", 1)]  # all 4 blocks loaded, 1 token
    gib = 4 * BLOCK_BYTES / 2**30
    res, _ = simulate(_wl(THIRD), const_profile,
                      RunConfig(kv_blocks=7, offload=OffloadConfig(kv_offload_gib=gib)))
    assert res.requests["computed_tokens"].iloc[2] == 48
    reqs = [(0.0, 64, 1, (1, 2, 3, 4)), (1.0, 96, 1, ()), (2.0, 64, 1, (1, 2, 3, 4))]
    res, s = simulate(_wl(reqs), const_profile, RunConfig(kv_blocks=7, offload=OffloadConfig(
        kv_offload_gib=16 * BLOCK_BYTES / 2**30)))
    assert res.requests["computed_tokens"].iloc[2] == 1 and s["kv_loaded_blocks"] == 4

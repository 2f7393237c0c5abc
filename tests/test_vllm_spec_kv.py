"""The KV rules of speculative decoding as vLLM 0.32.0 has them, each derived by hand from
its source: EAGLE/MTP prefix hits give up their last matched block, and every KV
allocation (an admission, a running prefill chunk, a decode) holds the drafter's
lookahead slots. The cache alone, the policy alone, then end to end on the schedule log.

Block size 16; with `prefix_block_tokens=16` each prefix hash covers one KV block.
"""

from __future__ import annotations

import pytest
from factories import finished_request, make_profile, request_spec, waiting_request
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.core.kv_cache import KVConfig
from chunksim.core.kv_factory import make_kv_cache
from chunksim.core.plan import Plan, SchedulerState
from chunksim.core.spec import RequestSpec, Workload
from chunksim.core.speculative import SpecConfig
from chunksim.policies import TokenBudgetPolicy
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate

BS = 16


@pytest.fixture(scope="module")
def layered_profile(tmp_path_factory):
    """Every step takes 10 ms; the model has 4 layers (an eagle/mtp head is priced from it)."""
    from factories import constant_time

    return make_profile(tmp_path_factory.mktemp("layered"), constant_time(0.010),
                        name="layered", provenance={"model": {"name": "c", "n_layers": 4}})


def prefix_kv(blocks: int, eagle: bool):
    return make_kv_cache(KVConfig(blocks, BS, True, BS, drop_last_hit_block=eagle))


def spec(method: str, k: int = 3) -> SpecConfig:
    return SpecConfig(method, k, 0.5)


def run(profile, reqs, method: str | None, chunk: int = 2048, kv_blocks: int = 400):
    specs = tuple(RequestSpec(i, a, p, o, h) for i, (a, p, o, h) in enumerate(reqs))
    cfg = RunConfig(policy="budget", chunk=chunk, kv_blocks=kv_blocks,
                    engine=EngineConfig(speculative=spec(method) if method else SpecConfig()))
    return simulate(Workload("spec-kv", specs, prefix_block_tokens=BS), profile, cfg,
                    schedule_log=True)


# ------------------------------------------------------------ EAGLE/MTP: the last block
# vLLM 0.32.0: Scheduler sets use_eagle_block_drop = speculative_config.use_eagle() (eagle,
# eagle3, mtp, ...; not ngram or draft_model) and passes it to KVCacheManager;
# get_computed_blocks caps the hit at num_tokens - 1, and FullAttentionManager.
# find_longest_cache_hit then does `if drop_eagle_block and hit_length > 0: hit_length -=
# block_size`. A repeated 48-token prompt: (48 - 1) // 16 = 2 blocks match, 1 is kept.
@pytest.mark.parametrize("eagle, hit", [(False, (32, 2)), (True, (16, 1))])
def test_a_repeated_prompt_hits_one_block_less_with_eagle(eagle, hit):
    kv = prefix_kv(20, eagle)
    finished_request(kv, request_spec(0, 48, output=1, hashes=(1, 2, 3)))
    c = waiting_request(request_spec(1, 48, hashes=(1, 2, 3)))
    assert kv.prefix_hit(c) == hit
    kv.admit(c)
    assert (c.num_computed_tokens, c.num_blocks, kv.hit_tokens) == (hit[0], hit[1], hit[0])
    assert kv.lru_blocks == 3 - hit[1]  # the dropped block stays cached, free


def test_a_one_block_hit_drops_to_nothing_and_held_blocks_count_the_same():
    kv = prefix_kv(20, True)
    finished_request(kv, request_spec(0, 32, output=1, hashes=(1, 2)))
    assert kv.prefix_hit(waiting_request(request_spec(1, 32, hashes=(1, 2)))) == (0, 0)
    # a hit on blocks another request holds: 2 held + 1 free match, the free one dropped
    kv = prefix_kv(20, True)
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    holder = waiting_request(request_spec(1, 40, hashes=(1, 2)))
    kv.admit(holder)  # takes blocks 0 and 1 (hit 32, less the drop: 1 block = 16)
    assert holder.num_computed_tokens == 16
    c = waiting_request(request_spec(2, 64, hashes=(1, 2, 3, 4)))
    assert kv.prefix_hit(c) == (32, 1)  # blocks 0 held, 1 and 2 free; 2 dropped


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 160), st.integers(0, 8))
def test_the_drop_is_one_block_whenever_there_is_a_hit(cached_blocks, prompt, extra):
    # property: with the drop, the hit is the plain hit less one block (0 stays 0), and the
    # blocks it takes from the free pool fall by one exactly when the dropped block was free
    hashes = tuple(range(1, cached_blocks + 1))
    plain, eagle = prefix_kv(64, False), prefix_kv(64, True)
    for kv in (plain, eagle):
        finished_request(kv, request_spec(0, cached_blocks * BS, output=1, hashes=hashes))
    h = hashes + tuple(range(100, 100 + extra))
    c = waiting_request(request_spec(1, prompt, hashes=h[: -(-prompt // BS)]))
    (t0, f0), (t1, f1) = plain.prefix_hit(c), eagle.prefix_hit(c)
    assert t1 == max(0, t0 - BS)
    assert f1 == max(0, f0 - 1)


@pytest.mark.parametrize("method, cached", [("eagle", 16), ("mtp", 16), ("ngram", 32),
                                            (None, 32)])
def test_the_drop_follows_the_method_end_to_end(layered_profile, method, cached):
    reqs = [(0.0, 48, 4, (1, 2, 3)), (1.0, 48, 4, (1, 2, 3))]
    res, s = run(layered_profile, reqs, method)
    assert res.requests["cached_tokens"].iloc[1] == cached
    assert s["prefix_cache_hit_rate"] == cached / 96


def test_only_eagle_and_mtp_drop():
    # vLLM's use_eagle(): a draft model or ngram keeps the whole hit; k = 0 is off
    assert [SpecConfig(m, 3, 0.5, draft_profile="d.csv" if m == "draft-model" else None)
            .drops_last_hit_block for m in ("eagle", "mtp", "ngram", "draft-model")] == [
        True, True, False, False]
    assert not SpecConfig("eagle", 0, 0.5).drops_last_hit_block


# ------------------------------------------------------------------ lookahead slots
# vLLM 0.32.0, Scheduler.schedule: the running loop calls allocate_slots(request,
# num_new_tokens, num_lookahead_tokens=self.num_lookahead_tokens) for every running
# request (prefill chunk or decode), and the waiting loop passes effective_lookahead_tokens
# (the same, 0 only for an async KV load); allocate_slots reserves num_computed +
# num_new + lookahead slots. num_lookahead_tokens is k for eagle, mtp and draft models, 0
# for ngram (VllmConfig.num_lookahead_tokens). EAGLE k = 3, an 80-token prompt in 48-token
# chunks: admitted with 48 -> cdiv(48 + 3, 16) = 4 blocks, then 32 more -> cdiv(80 + 3,
# 16) = 6 blocks (ngram: 3, then 5).
@pytest.mark.parametrize("method, blocks", [("eagle", [4, 6]), ("ngram", [3, 5])])
def test_admissions_and_prefill_chunks_hold_the_lookahead(layered_profile, method, blocks):
    res, _ = run(layered_profile, [(0.0, 80, 3, ())], method, chunk=48)
    rows = res.schedule[res.schedule.request_id == 0].reset_index(drop=True)
    assert list(rows.kind[:2]) == ["new", "prefill"]
    assert list(rows.tokens[:2]) == [48, 32]
    assert list(rows.blocks[:2]) == blocks


def test_an_admission_that_cannot_hold_its_lookahead_waits():
    # 3 free blocks: a 48-token prompt fits them, its 3 lookahead slots do not (vLLM:
    # allocate_slots returns None and the waiting loop stops)
    pol = TokenBudgetPolicy(max_num_batched_tokens=100)
    for lookahead, admitted in ((0, True), (3, False)):
        kv = make_kv_cache(KVConfig(3, BS))
        w = waiting_request(request_spec(0, 48))
        plan = pol.plan(SchedulerState([], [w], kv, False, 0, lookahead))
        assert plan == (Plan(((w, 48),), (w,)) if admitted else Plan(()))


# ------------------------------------------------- the same cases on vLLM's own manager
@pytest.mark.slow
def test_vllm_kv_cache_manager_agrees_where_installed():
    # vLLM's KVCacheManager itself (skipped without vLLM): the repeated 48-token prompt
    # hits 32 tokens, 16 with use_eagle; an 80-token prompt in chunks of 48 then 32 with 3
    # lookahead tokens holds 4 blocks, then 6 (the cases above, on chunksim's cache)
    pytest.importorskip("vllm.v1.core.kv_cache_manager")
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(BS, sha256)

    def req(i: int, n: int) -> Request:
        return Request(str(i), list(range(n)), SamplingParams(max_tokens=4), None,
                       block_hasher=hasher)

    for eagle, hit_tokens in ((False, 32), (True, 16)):
        group = KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=BS, num_kv_heads=1, head_size=8, dtype=torch.float16))
        m = KVCacheManager(KVCacheConfig(num_blocks=40, kv_cache_tensors=[],
                                         kv_cache_groups=[group]),
                           max_model_len=1024, scheduler_block_size=BS, hash_block_size=BS,
                           enable_caching=True, use_eagle=eagle)
        a = req(0, 48)
        m.allocate_slots(a, 48)
        a.num_computed_tokens = 48
        m.free(a)
        assert m.get_computed_blocks(req(1, 48))[1] == hit_tokens
        kv = prefix_kv(40, eagle)
        finished_request(kv, request_spec(0, 48, output=1, hashes=(1, 2, 3)))
        assert kv.prefix_hit(waiting_request(request_spec(1, 48, hashes=(1, 2, 3))))[0] == (
            hit_tokens)
        c = req(2, 80)
        held = []
        for computed, n in ((0, 48), (48, 32)):
            c.num_computed_tokens = computed
            m.allocate_slots(c, n, num_lookahead_tokens=3)
            held.append(len(m.get_blocks("2").blocks[0]))
        assert held == [4, 6]


# ----------------------------------------------------- padding a one-token admission
# vLLM 0.32.0, Scheduler.schedule, waiting loop: with num_spec_tokens > 0, an admission
# whose num_new_tokens is 1 is padded to 1 + num_spec_tokens (pad_spec_decode: k
# placeholder drafts, all rejected, left out of the draft metrics) when no running prefill
# chunk was scheduled this step (`prefill_scheduled`) and something running was scheduled
# or the request has computed tokens; if the padded count exceeds the budget left, the
# waiting loop stops rather than schedule it unpadded. allocate_slots then reserves
# num_computed + 1 + k + lookahead slots.
def _one_left(kv, rid: int, prompt: int):
    w = waiting_request(request_spec(rid, prompt))
    kv.carry(w, prompt - 1)  # its KV came from elsewhere: one token left to compute
    return w


def test_a_one_token_admission_is_padded_to_the_draft_width():
    from factories import decoding_request, running_request

    pol = TokenBudgetPolicy(max_num_batched_tokens=100)
    kv = make_kv_cache(KVConfig(100, BS))
    w = _one_left(kv, 1, 40)
    assert pol.plan(SchedulerState([], [w], kv, False, 0, 0, 3)) == Plan(((w, 4),), (w,))
    assert pol.plan(SchedulerState([], [w], kv, False, 0, 0, 0)) == Plan(((w, 1),), (w,))
    # a running decode scheduled too: still padded
    d = decoding_request(kv, request_spec(0, 20))
    d.num_spec_tokens = 3
    assert pol.plan(SchedulerState([d], [w], kv, False, 0, 0, 3)) == Plan(
        ((d, 4), (w, 4)), (w,))
    # a running prefill chunk scheduled: not padded
    p = running_request(kv, request_spec(2, 150), computed=100)
    assert pol.plan(SchedulerState([p], [w], kv, False, 0, 0, 3)) == Plan(
        ((p, 50), (w, 1)), (w,))
    # the budget left holds the token but not the padding: nothing is admitted
    tight = TokenBudgetPolicy(max_num_batched_tokens=6)
    assert tight.plan(SchedulerState([d], [w], kv, False, 0, 0, 3)) == Plan(((d, 4),))


def test_a_padded_admission_rejects_its_placeholders_end_to_end(const_profile):
    # a prompt loaded whole from the CPU tier (write-through) has one token left: with
    # ngram k = 3 it is padded to 4 tokens; every placeholder is rejected although every
    # real draft is accepted (a = 1), so that step emits one token and counts no drafts
    from chunksim.sim.engine.offload_config import OffloadConfig

    block_bytes = 2048 * BS
    reqs = [(0.0, 64, 1, (1, 2, 3, 4)), (1.0, 96, 1, ()), (2.0, 64, 5, (1, 2, 3, 4))]
    specs = tuple(RequestSpec(i, a, p, o, h) for i, (a, p, o, h) in enumerate(reqs))
    off = OffloadConfig(kv_offload_gib=16 * block_bytes / 2**30, kv_offload_link="1")
    cfg = RunConfig(kv_blocks=6, offload=off,
                    engine=EngineConfig(speculative=SpecConfig("ngram", 3, 1.0)))
    res, s = simulate(Workload("pad", specs, prefix_block_tokens=BS), const_profile, cfg,
                      schedule_log=True)
    rows = res.schedule[res.schedule.request_id == 2].reset_index(drop=True)
    assert list(rows.kind) == ["load", "loaded", "new", "decode"]
    assert list(rows.tokens[2:]) == [4, 4]  # padded, then 1 + 3 real drafts
    assert list(rows.computed_tokens[2:]) == [63, 64]  # the placeholders gave theirs back
    assert rows.blocks[2] == 5  # cdiv(63 + 4, 16): the padding takes slots too
    c = res.requests.iloc[2]
    assert c["output_tokens"] == 5 and c["finish_s"] == c["first_token_s"] + 0.010
    # drafts counted: the decode's 3 (all accepted), none of the padding's
    assert (s["spec_draft_tokens"], s["spec_accepted_tokens"]) == (3, 3)


def test_a_repeated_prompt_one_token_past_its_blocks_is_padded(layered_profile):
    # 49 tokens, ngram k = 3: the repeat hits 48 (3 blocks, num_tokens - 1 caps it), has 1
    # token left and nothing else runs: padded to 4, holding cdiv(48 + 4, 16) = 4 blocks
    reqs = [(0.0, 49, 1, (1, 2, 3, 4)), (1.0, 49, 2, (1, 2, 3, 4))]
    res, s = run(layered_profile, reqs, "ngram")
    rows = res.schedule[res.schedule.request_id == 1].reset_index(drop=True)
    assert (rows.kind[0], rows.tokens[0], rows.cached_tokens[0], rows.blocks[0]) == (
        "new", 4, 48, 4)
    assert list(rows.computed_tokens) == [48, 49]  # the placeholders gave theirs back
    assert s["spec_draft_tokens"] == 3  # the next step's drafts only, not the padding


@pytest.mark.slow
def test_vllm_scheduler_pads_the_same_admission_where_installed():
    # the case above on vLLM's own Scheduler (skipped without vLLM): a tiny model config,
    # ngram k = 3, the repeat scheduled with 4 tokens, 3 of them placeholders (-1)
    pytest.importorskip("vllm.v1.core.sched.scheduler")
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm_factories import vllm_scheduler

    sched, hasher = vllm_scheduler(BS, 100, speculative=dict(
        method="ngram", num_speculative_tokens=3, prompt_lookup_max=3, prompt_lookup_min=2))

    def step() -> dict:
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        reqs = sched.requests
        sampled = [[7] if reqs[i].num_computed_tokens >= reqs[i].num_tokens else []
                   for i in ids]
        row = {i: (out.num_scheduled_tokens[i], out.scheduled_spec_decode_tokens.get(i))
               for i in ids}
        sched.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={x: k for k, x in enumerate(ids)},
            sampled_token_ids=sampled))
        return row

    for rid, out in (("a", 1), ("b", 2)):
        sched.add_request(Request(rid, list(range(49)), SamplingParams(
            max_tokens=out, ignore_eos=True), None, arrival_time=0.0, block_hasher=hasher))
        first = step()
        if rid == "a":
            step()  # a finishes; its blocks stay cached
    assert first == {"b": (4, [-1, -1, -1])}
    assert sched.requests["b"].num_computed_tokens == 49
    assert len(sched.kv_cache_manager.get_blocks("b").blocks[0]) == 4

"""Policies tested alone, as vLLM's scheduler tests do: a SchedulerState built by hand (a KV
cache, running requests at a given progress, waiting requests), one `policy.plan(state)`
call, and the whole frozen Plan compared with one worked out by hand from the rules.

Block size is 16 throughout; `ceil(t / 16)` blocks hold t tokens.
"""

import pytest
from factories import (
    apply_plan,
    decoding_request,
    finished_request,
    kv_cache,
    request_spec,
    running_request,
    scheduler_state,
    waiting_request,
    workload,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chunksim.core.kv_cache import blocks_for
from chunksim.core.plan import Plan
from chunksim.core.queues import FCFS, PRIORITY, SJF
from chunksim.core.request import is_decode
from chunksim.policies import (
    POLICIES,
    FixedChunkPolicy,
    ShortestJobFirstPolicy,
    TokenBudgetPolicy,
    WholePrefillPolicy,
    chosen_defaults,
    make_policy,
)
from chunksim.sim.run import RunConfig, simulate


def plan_of(policy, kv, running=(), waiting=(), last_step_prefill=False) -> Plan:
    return policy.plan(scheduler_state(kv, running, waiting, last_step_prefill))


def mixed_state(kv):
    """Two decodes, a prompt mid-prefill, two queued prompts (the budget tests' state):
    d1 = prompt 20 + 2 outputs (21 computed), d2 = prompt 30 + 1 output (30 computed),
    p = prompt 200 with 64 computed (136 to go), w1 = 50-token prompt, w2 = 40-token one."""
    d1 = decoding_request(kv, request_spec(0, 20), outputs=2)
    d2 = decoding_request(kv, request_spec(1, 30), outputs=1)
    p = running_request(kv, request_spec(2, 200), computed=64)
    w1 = waiting_request(request_spec(3, 50))
    w2 = waiting_request(request_spec(4, 40))
    return d1, d2, p, w1, w2


# ----------------------------------------------------------------------------- factories
def test_factories_allocate_blocks_as_the_engine_does():
    kv = kv_cache(100)
    d1, d2, p, w1, _ = mixed_state(kv)
    assert (d1.num_computed_tokens, d1.num_output_tokens, d1.num_blocks) == (21, 2, 2)
    assert is_decode(d1) and d1.num_remaining == 1
    assert (d2.num_computed_tokens, d2.num_blocks) == (30, 2)
    assert (p.num_computed_tokens, p.num_blocks, p.num_remaining) == (64, 4, 136)
    assert not is_decode(p)
    assert (w1.num_computed_tokens, w1.num_blocks, w1.num_remaining) == (0, 0, 50)
    assert kv.free_blocks == 100 - 2 - 2 - 4
    with pytest.raises(ValueError, match="outputs"):
        running_request(kv, request_spec(9, 20), computed=20)


# -------------------------------------------------------------------------------- budget
def test_budget_serves_decodes_then_the_partial_prefill_then_waiting_fcfs():
    kv = kv_cache(1000)
    d1, d2, p, w1, w2 = mixed_state(kv)
    plan = plan_of(TokenBudgetPolicy(max_num_batched_tokens=200), kv, [d1, d2, p], [w1, w2])
    # budget 200: d1 1 (199), d2 1 (198), p min(136, 198) = 136 (62), w1 min(50, 62) = 50
    # (12), w2 min(40, 12) = 12 (0)
    assert plan == Plan(((d1, 1), (d2, 1), (p, 136), (w1, 50), (w2, 12)), (w1, w2))
    assert plan.num_tokens == 200 and not plan.two_pass


def test_budget_counts_decodes_and_the_prefill_takes_what_is_left():
    kv = kv_cache(1000)
    d1, d2, p, w1, w2 = mixed_state(kv)
    plan = plan_of(TokenBudgetPolicy(max_num_batched_tokens=100), kv, [d1, d2, p], [w1, w2])
    # budget 100: d1 1, d2 1, p min(136, 98) = 98, nothing left for the queue
    assert plan == Plan(((d1, 1), (d2, 1), (p, 98)))


def test_budget_decode_first_is_only_admission_order():
    # a prefill admitted before a decode is served first and may take the whole budget
    kv = kv_cache(1000)
    d1, _, p, _, _ = mixed_state(kv)
    plan = plan_of(TokenBudgetPolicy(max_num_batched_tokens=50), kv, [p, d1])
    assert plan == Plan(((p, 50),))


def test_budget_long_prefill_token_threshold_caps_each_request():
    kv = kv_cache(1000)
    d1, _, p, w1, _ = mixed_state(kv)
    w3 = waiting_request(request_spec(5, 300))
    policy = TokenBudgetPolicy(max_num_batched_tokens=1000, long_prefill_token_threshold=64)
    plan = plan_of(policy, kv, [d1, p], [w1, w3])
    # threshold 64: d1 1, p min(136, 64) = 64, w1 50 (under the cap), w3 min(300, 64) = 64;
    # 179 of the 1000 tokens used
    assert plan == Plan(((d1, 1), (p, 64), (w1, 50), (w3, 64)), (w1, w3))


def test_budget_max_num_partial_prefills_skips_running_and_stops_admission():
    kv = kv_cache(1000)
    d1, _, p, w1, w2 = mixed_state(kv)
    p2 = running_request(kv, request_spec(6, 100), computed=16)
    tiny = waiting_request(request_spec(7, 1))
    policy = TokenBudgetPolicy(max_num_batched_tokens=1000, max_num_partial_prefills=1)
    # p is the one partial prefill; p2 is skipped (d1 after it still runs); admission
    # stops at w1, a multi-token prompt
    assert plan_of(policy, kv, [p, p2, d1], [w1]) == Plan(((p, 136), (d1, 1)))
    # a 1-token prompt is a prefill too (vLLM V0 counts every sequence in its prefill
    # stage): it waits for the limit like any other
    assert plan_of(policy, kv, [p, d1], [tiny, w1]) == Plan(((p, 136), (d1, 1)))
    assert plan_of(policy, kv, [d1], [tiny, w1]) == Plan(((d1, 1), (tiny, 1)), (tiny,))
    # with room for two: p and p2, nobody joins; or p and w1, and w2 (a third) waits
    policy2 = TokenBudgetPolicy(max_num_batched_tokens=1000, max_num_partial_prefills=2)
    assert plan_of(policy2, kv, [p, p2, d1], [w1]) == Plan(((p, 136), (p2, 84), (d1, 1)))
    assert plan_of(policy2, kv, [p, d1], [w1, w2]) == Plan(((p, 136), (d1, 1), (w1, 50)),
                                                           (w1,))


def test_budget_max_num_seqs_caps_admission():
    kv = kv_cache(1000)
    d1, _, _, w1, w2 = mixed_state(kv)
    w3 = waiting_request(request_spec(5, 10))
    plan = plan_of(TokenBudgetPolicy(max_num_seqs=2), kv, [d1], [w1, w2, w3])
    # 2 seats, 1 taken: only w1 joins
    assert plan == Plan(((d1, 1), (w1, 50)), (w1,))
    assert plan_of(TokenBudgetPolicy(max_num_seqs=1), kv, [d1], [w1]) == Plan(((d1, 1),))


def test_budget_reserve_full_prompt_needs_kv_for_the_whole_prompt():
    # 20 blocks: d holds ceil(150 / 16) = 10, its next token (151) fits them; 10 free.
    # w's 200-token prompt needs 13 blocks, its first chunk of min(200, 63) = 63 only 4
    kv = kv_cache(20)
    d = decoding_request(kv, request_spec(0, 150), outputs=1)
    w = waiting_request(request_spec(1, 200))
    small = waiting_request(request_spec(2, 16))
    assert kv.free_blocks == 10
    reserve = TokenBudgetPolicy(max_num_batched_tokens=64)
    # refused, and the queue behind it waits too (FCFS head-of-line)
    assert plan_of(reserve, kv, [d], [w, small]) == Plan(((d, 1),))
    chunked = TokenBudgetPolicy(max_num_batched_tokens=64, reserve_full_prompt=False)
    assert plan_of(chunked, kv, [d], [w, small]) == Plan(((d, 1), (w, 63)), (w,))


def _three_at_block_boundary(kv, priorities=(0, 0, 0)):
    """Three 16-token prompts each with 1 output: 16 computed, 1 full block each; the
    next decode (token 17) needs a second block."""
    return [decoding_request(kv, request_spec(i, 16, priority=pr), outputs=1)
            for i, pr in enumerate(priorities)]


def test_budget_preempts_the_most_recently_admitted_and_admits_nothing():
    kv = kv_cache(4)  # 3 held, 1 free
    r1, r2, r3 = _three_at_block_boundary(kv)
    w = waiting_request(request_spec(9, 8))
    plan = plan_of(TokenBudgetPolicy(), kv, [r1, r2, r3], [w])
    # r1 takes the free block; r2 needs one: r3 (last admitted) is evicted, its block
    # goes to r2; r3 is gone, and a step that preempted admits nobody
    assert plan == Plan(((r1, 1), (r2, 1)), (), (r3,))


def test_budget_a_request_can_be_its_own_victim():
    kv = kv_cache(5)
    r1 = decoding_request(kv, request_spec(0, 16), outputs=1)  # next token needs a block
    r2 = decoding_request(kv, request_spec(1, 20), outputs=1)  # 21 tokens fit 2 blocks
    r3 = decoding_request(kv, request_spec(2, 16), outputs=1)  # needs a block
    assert kv.free_blocks == 1
    plan = plan_of(TokenBudgetPolicy(), kv, [r1, r2, r3])
    assert plan == Plan(((r1, 1), (r2, 1)), (), (r3,))


def test_budget_priority_evicts_the_least_urgent_even_if_already_scheduled():
    kv = kv_cache(4)
    a, b, c = _three_at_block_boundary(kv, priorities=(9, 0, 0))
    # FCFS: c, the latest, is the victim; budget 2 is spent on a and b
    fcfs = TokenBudgetPolicy(max_num_batched_tokens=2)
    assert plan_of(fcfs, kv, [a, b, c]) == Plan(((a, 1), (b, 1)), (), (c,))
    # priority: a is scheduled (free 0, budget 1); b needs a block: the victim is a
    # (priority 9), its token returns to the budget (2) and its 2 blocks to the pool;
    # b and c then both fit
    prio = TokenBudgetPolicy(max_num_batched_tokens=2, priority_scheduling=True)
    assert prio.queue is PRIORITY
    assert plan_of(prio, kv, [a, b, c]) == Plan(((b, 1), (c, 1)), (), (a,))


def test_budget_priority_among_equals_evicts_the_latest_arrival():
    kv = kv_cache(4)  # 3 held, 1 free
    # admission order b, a, c; a and b tie on priority 1 and b arrived last
    a, b, c = (decoding_request(kv, request_spec(i, 16, arrival_s=t, priority=pr))
               for i, (t, pr) in enumerate([(0.0, 1), (5.0, 1), (1.0, 0)]))
    prio = TokenBudgetPolicy(priority_scheduling=True)
    # b takes the free block; a needs one: the victim is b, scheduled or not; a and c fit
    assert plan_of(prio, kv, [b, a, c]) == Plan(((a, 1), (c, 1)), (), (b,))
    # FCFS evicts the most recently admitted instead
    assert plan_of(TokenBudgetPolicy(), kv, [b, a, c]) == Plan(((b, 1), (a, 1)), (), (c,))
    # in admission order a, b, c: a takes the block, b needs one and is its own victim;
    # the pass stops there (vLLM's break), so c does not run this step
    assert plan_of(prio, kv, [a, b, c]) == Plan(((a, 1),), (), (b,))


@pytest.mark.parametrize("donor_state", ["running", "finished"])
def test_budget_prefix_hit_costs_no_budget(donor_state):
    kv = kv_cache(100, prefix_block_tokens=16)
    donor = request_spec(0, 80, output=1, hashes=(1, 2, 3, 4, 5))
    if donor_state == "running":
        running = [running_request(kv, donor, computed=79)]  # 4 full blocks committed
        hit_blocks_free = 0
    else:
        finished_request(kv, donor)  # its 5 full blocks stay cached, LRU
        running = []
        hit_blocks_free = 4
    w = waiting_request(request_spec(1, 100, hashes=(1, 2, 3, 4, 9, 10, 11)))
    x = waiting_request(request_spec(2, 30))
    # w shares 4 leading blocks (64 tokens) with the donor: 36 tokens to compute
    assert kv.prefix_hit(w) == (64, hit_blocks_free)
    plan = plan_of(TokenBudgetPolicy(max_num_batched_tokens=40), kv, running, [w, x])
    # budget 40: a running donor's last prompt token 1; w 100 - 64 = 36; x the rest
    assert plan == Plan(tuple((r, 1) for r in running) + ((w, 36), (x, 4 - len(running))),
                        (w, x))
    # without the cache w would have taken the whole budget
    plain = kv_cache(100)
    w0 = waiting_request(w.spec)
    assert plan_of(TokenBudgetPolicy(max_num_batched_tokens=40), plain, [], [w0, x]) == Plan(
        ((w0, 40),), (w0,))


def test_budget_prefix_hit_leaves_the_last_token_to_compute():
    kv = kv_cache(100, prefix_block_tokens=16)
    hashes = (1, 2, 3, 4, 5)
    finished_request(kv, request_spec(0, 80, output=1, hashes=hashes))
    w = waiting_request(request_spec(1, 80, hashes=hashes))
    # all 5 blocks are cached, but the hit stops one block short: (80 - 1) // 16 = 4
    # blocks; 16 tokens remain
    assert plan_of(TokenBudgetPolicy(), kv, [], [w]) == Plan(((w, 16),), (w,))


# --------------------------------------------------------------------------------- whole
def _decodes(kv):
    d1 = decoding_request(kv, request_spec(0, 20), outputs=2)  # 21 computed, 2 blocks
    d2 = decoding_request(kv, request_spec(1, 30), outputs=1)  # 30 computed, 2 blocks
    return d1, d2


def test_whole_prefill_first_runs_a_prefill_only_step_when_a_prompt_fits():
    kv = kv_cache(1000)
    d1, d2 = _decodes(kv)
    w1, w2, w3 = (waiting_request(request_spec(i, p)) for i, p in ((2, 100), (3, 150), (4, 10)))
    policy = WholePrefillPolicy(max_num_batched_tokens=250)
    # 100 + 150 = 250 fits the cap exactly; w3 finds 0 left; the decodes stall
    assert plan_of(policy, kv, [d1, d2], [w1, w2, w3]) == Plan(((w1, 100), (w2, 150)), (w1, w2))


@pytest.mark.parametrize("why", ["seats", "kv"])
def test_whole_prefill_first_decodes_everyone_when_no_prompt_can_join(why):
    kv = kv_cache(1000 if why == "seats" else 7)  # 7 = 4 held + 3 free < 7 for 100 tokens
    d1, d2 = _decodes(kv)
    w = waiting_request(request_spec(2, 100))
    policy = WholePrefillPolicy(max_num_seqs=2 if why == "seats" else 256)
    assert plan_of(policy, kv, [d1, d2], [w]) == Plan(((d1, 1), (d2, 1)))


def test_whole_mixed_decodes_first_then_whole_prompts_within_the_cap():
    kv = kv_cache(1000)
    d1, d2 = _decodes(kv)
    w1, w2, w3 = (waiting_request(request_spec(i, p)) for i, p in ((2, 100), (3, 200), (4, 10)))
    policy = WholePrefillPolicy(variant="mixed", max_num_batched_tokens=150)
    # 150 - 2 decodes = 148: w1 (100) fits, w2 (200) does not, and admission stops there
    # (w3 would fit, but admission is FCFS)
    assert plan_of(policy, kv, [d1, d2], [w1, w2, w3]) == Plan(
        ((d1, 1), (d2, 1), (w1, 100)), (w1,))


def test_whole_mixed_preempts_and_then_admits_nothing():
    kv = kv_cache(4)
    r1, r2, r3 = _three_at_block_boundary(kv)
    w = waiting_request(request_spec(9, 8))
    plan = plan_of(WholePrefillPolicy(variant="mixed"), kv, [r1, r2, r3], [w])
    assert plan == Plan(((r1, 1), (r2, 1)), (), (r3,))


def test_whole_rejects_what_its_cap_can_never_hold():
    policy = WholePrefillPolicy(max_num_batched_tokens=4096)
    # a recompute re-prefills prompt + output - 1 tokens: 4000 + 97 - 1 = 4096 fits
    assert policy.rejection_reason(4000, 97) is None
    reason = policy.rejection_reason(4000, 98)
    assert "token cap 4096" in reason and "--max-num-batched-tokens" in reason
    assert TokenBudgetPolicy().rejection_reason(10**6, 10**6) is None
    assert FixedChunkPolicy().rejection_reason(10**6, 10**6) is None


# --------------------------------------------------------------------------------- chunk
def _chunk_state(kv):
    p1 = running_request(kv, request_spec(0, 200), computed=64)  # 136 to go
    d1 = decoding_request(kv, request_spec(1, 20), outputs=2)
    p2 = running_request(kv, request_spec(2, 100), computed=80)  # 20 to go
    w1 = waiting_request(request_spec(3, 50))
    w2 = waiting_request(request_spec(4, 30))
    return p1, d1, p2, w1, w2


@pytest.mark.parametrize("variant", ["mixed", "two-pass"])
def test_chunk_each_prefill_advances_a_chunk_and_decodes_ride_along(variant):
    kv = kv_cache(1000)
    p1, d1, p2, w1, w2 = _chunk_state(kv)
    policy = FixedChunkPolicy(chunk=64, prefill_budget=100, variant=variant)
    plan = plan_of(policy, kv, [p1, d1, p2], [w1, w2])
    # prefill budget 100: p1 min(64, 136, 100) = 64 (36); d1 rides along, uncharged;
    # p2 min(64, 20, 36) = 20 (16); w1 min(64, 50, 16) = 16 (0); w2 waits
    assert plan == Plan(((p1, 64), (d1, 1), (p2, 20), (w1, 16)), (w1,),
                        two_pass=variant == "two-pass")


def test_chunk_decodes_run_even_when_the_prefill_budget_is_spent():
    kv = kv_cache(1000)
    p1, d1, p2, w1, _ = _chunk_state(kv)
    policy = FixedChunkPolicy(chunk=64, prefill_budget=64)
    assert plan_of(policy, kv, [p1, d1, p2], [w1]) == Plan(((p1, 64), (d1, 1)))


def test_chunk_the_chunk_caps_each_request_not_the_step():
    kv = kv_cache(1000)
    w = [waiting_request(request_spec(i, 300)) for i in range(3)]
    plan = plan_of(FixedChunkPolicy(chunk=128, prefill_budget=8192), kv, [], w)
    assert plan == Plan(tuple((r, 128) for r in w), tuple(w))


def test_chunk_alternate_takes_turns_on_last_step_prefill():
    kv = kv_cache(1000)
    p1, d1, p2, w1, _ = _chunk_state(kv)
    policy = FixedChunkPolicy(chunk=64, variant="alternate")
    # prefill turn (the last step decoded): chunk 64 is also the step's budget, no decodes
    assert plan_of(policy, kv, [d1, p1], [w1], last_step_prefill=False) == Plan(((p1, 64),))
    # p2 leaves 44 of the 64: w1 gets them
    assert plan_of(policy, kv, [d1, p2], [w1], last_step_prefill=False) == Plan(
        ((p2, 20), (w1, 44)), (w1,))
    # decode turn: decodes only, nobody admitted
    assert plan_of(policy, kv, [d1, p1], [w1], last_step_prefill=True) == Plan(((d1, 1),))


def test_chunk_alternate_passes_a_turn_with_nothing_to_do():
    kv = kv_cache(1000)
    p1, d1, _, _, _ = _chunk_state(kv)
    policy = FixedChunkPolicy(chunk=64, variant="alternate")
    assert plan_of(policy, kv, [p1], last_step_prefill=True) == Plan(((p1, 64),))
    assert plan_of(policy, kv, [d1], last_step_prefill=False) == Plan(((d1, 1),))


def test_chunk_rejects_an_unknown_variant():
    with pytest.raises(ValueError, match="mixed, two-pass, alternate"):
        FixedChunkPolicy(variant="interleaved")


# ----------------------------------------------------------------------------------- sjf
def test_sjf_admits_the_shortest_waiting_prompt_first():
    kv = kv_cache(1000)
    long_, mid, short = (waiting_request(request_spec(i, p)) for i, p in
                         ((0, 500), (1, 200), (2, 50)))
    waiting = sorted([long_, mid, short], key=SJF.key)  # as EngineCore keeps the queue
    assert waiting == [short, mid, long_]
    policy = ShortestJobFirstPolicy(max_num_batched_tokens=60)
    assert policy.queue is SJF
    # budget 60: short 50, then mid min(200, 10) = 10
    assert plan_of(policy, kv, [], waiting) == Plan(((short, 50), (mid, 10)), (short, mid))


def test_sjf_refuses_priority_scheduling():
    with pytest.raises(ValueError, match="--priority does not apply to --policy sjf"):
        ShortestJobFirstPolicy(priority_scheduling=True)


def test_sjf_lets_a_short_prompt_overtake_a_queued_long_one(const_profile):
    # 10 ms steps, budget 512. r0 fills step 1 [0, 10 ms]; r1 (4096) and r2 (64) arrive
    # during it. budget (FCFS): r1 takes all 512 tokens of steps 2-9 (4096 = 8 x 512), r2
    # runs in step 10: first token at 100 ms. sjf: r2 (64) goes first in step 2, r1 gets
    # the other 448: r2's first token at 20 ms, r1 needs 8 more steps (3648 / 512 -> 8),
    # first token at 100 ms instead of 90 ms.
    w = workload([(0.0, 512, 1), (0.001, 4096, 1), (0.002, 64, 1)])
    fcfs, _ = simulate(w, const_profile, RunConfig(policy="budget", chunk=512))
    sjf, s = simulate(w, const_profile, RunConfig(policy="sjf", chunk=512))
    assert s["waiting_order"] == "sjf"
    assert fcfs.requests.first_token_s.tolist() == pytest.approx([0.010, 0.090, 0.100])
    assert sjf.requests.first_token_s.tolist() == pytest.approx([0.010, 0.100, 0.020])


@pytest.mark.parametrize("caching", [False, True])
def test_fast_forward_never_runs_a_decode_step_the_policy_would_not(const_profile, caching):
    # 5 blocks. Step 1 prefills all four: A (1 token) holds 1 block, B/C/D (15 tokens) 1
    # each; 1 block free. Step 2 decodes all (token 16 fits B/C/D's blocks) and A leaves
    # with its last token: 2 free. Step 3 needs a 17th-token block for each of B, C, D: 3
    # > 2, so the policy preempts D (as stepping one by one shows) - but the bulk path
    # runs it.
    from chunksim.sim.engine.engine import EngineConfig

    w = workload([(0.0, 1, 2), (0.0, 15, 10), (0.0, 15, 10), (0.0, 15, 10)])
    stepped, s_stepped = simulate(w, const_profile, RunConfig(
        kv_blocks=5, prefix_caching=caching, engine=EngineConfig(fast_forward=False)))
    assert stepped.steps.kv_blocks_used.max() <= 5 and s_stepped["preemptions"] == 1
    bulk, _ = simulate(w, const_profile, RunConfig(kv_blocks=5, prefix_caching=caching))
    assert bulk.steps.kv_blocks_used.max() <= 5
    assert bulk.steps.kv_blocks_used.tolist() == stepped.steps.kv_blocks_used.tolist()


# --------------------------------------------------------------------- queue disciplines
def test_fcfs_keeps_arrival_order_and_evicts_the_last_admitted():
    kv = kv_cache(100)
    running = [decoding_request(kv, request_spec(i, 16)) for i in (2, 0, 1)]
    assert FCFS.key is None and FCFS.victim_key is None
    assert FCFS.victim_index(running) == 2


def test_priority_orders_on_priority_then_arrival_and_evicts_the_least_urgent():
    reqs = [waiting_request(request_spec(i, 16, arrival_s=a, priority=p)) for i, (a, p) in
            enumerate([(0.0, 5), (1.0, 0), (2.0, 5), (3.0, -1), (1.0, 0)])]
    order = [r.request_id for r in sorted(reqs, key=PRIORITY.key)]
    # -1 first; the two 0s by arrival (tie at 1.0 broken by id); the 5s by arrival
    assert order == [3, 1, 4, 0, 2]
    # victim: the largest (priority, arrival): priority 5 arriving at 2.0
    assert reqs[PRIORITY.victim_index(reqs)].request_id == 2


def test_sjf_orders_on_remaining_tokens_then_arrival():
    a = waiting_request(request_spec(0, 300, arrival_s=0.0))
    b = waiting_request(request_spec(1, 40, arrival_s=1.0))
    c = waiting_request(request_spec(2, 40, arrival_s=0.5))
    # preempted by recompute with 30 outputs: re-prefills 35 + 30 = 65 tokens
    d = waiting_request(request_spec(3, 35, arrival_s=0.1), outputs=30, preemptions=1)
    assert [r.num_remaining for r in (a, b, c, d)] == [300, 40, 40, 65]
    assert [r.request_id for r in sorted([a, b, c, d], key=SJF.key)] == [2, 1, 3, 0]
    assert SJF.victim_key is None and SJF.victim_index([a, b, c]) == 2  # as FCFS


def test_each_family_names_its_queue_discipline():
    assert WholePrefillPolicy().queue is FCFS
    assert FixedChunkPolicy().queue is FCFS
    assert TokenBudgetPolicy().queue is FCFS
    assert TokenBudgetPolicy(priority_scheduling=True).queue is PRIORITY
    assert ShortestJobFirstPolicy().queue is SJF


# ---------------------------------------------------------------------------------- purity
ALL_POLICIES = [
    TokenBudgetPolicy(max_num_batched_tokens=96),
    TokenBudgetPolicy(max_num_batched_tokens=96, priority_scheduling=True,
                      long_prefill_token_threshold=32, max_num_partial_prefills=1),
    TokenBudgetPolicy(max_num_batched_tokens=96, reserve_full_prompt=False, max_num_seqs=4),
    ShortestJobFirstPolicy(max_num_batched_tokens=96),
    WholePrefillPolicy(max_num_batched_tokens=2048),
    WholePrefillPolicy(variant="mixed", max_num_batched_tokens=2048),
    FixedChunkPolicy(chunk=32, prefill_budget=80),
    FixedChunkPolicy(chunk=32, prefill_budget=80, variant="two-pass"),
    FixedChunkPolicy(chunk=32, prefill_budget=80, variant="alternate"),
]
POLICY_IDS = [f"{p.name}-{i}" for i, p in enumerate(ALL_POLICIES)]


def snapshot(kv, requests) -> tuple:
    """Every counter a policy could touch: the requests' and the cache's."""
    reqs = [(r.num_computed_tokens, r.num_output_tokens, r.num_blocks, r.num_cached_tokens,
             r.num_preemptions, r.block_keys) for r in requests]
    cache = [kv.free_blocks]
    if kv.prefix_caching:
        cache += [kv.uncached_free, list(kv.lru.items()), kv.lru_blocks, dict(kv.refs),
                  {k: list(v) for k, v in kv.keys.items()}, kv.groups, kv.hit_tokens,
                  kv.query_tokens]
    return reqs, cache


def _pressure_state(kv):
    """A cache under pressure, with prefix hits for the queue: decodes at block
    boundaries, a prompt mid-prefill, queued prompts sharing a finished one's prefix."""
    finished_request(kv, request_spec(0, 64, output=1, hashes=(1, 2, 3, 4)))
    running = [decoding_request(kv, request_spec(i, 16)) for i in (1, 2, 3)]
    running.append(running_request(kv, request_spec(4, 100, hashes=(7, 8)), computed=40))
    waiting = [waiting_request(request_spec(5, 90, hashes=(1, 2, 3, 9))),
               waiting_request(request_spec(6, 20))]
    for r in running + waiting:  # the cache memoizes block identities on the request
        kv.shareable_keys(r)
    return running, waiting


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=POLICY_IDS)
@pytest.mark.parametrize("blocks", [14, 40])
@pytest.mark.parametrize("last_step_prefill", [False, True])
def test_plan_is_pure_and_deterministic(policy, blocks, last_step_prefill):
    kv = kv_cache(blocks, prefix_block_tokens=16)
    running, waiting = _pressure_state(kv)
    state = scheduler_state(kv, running, waiting, last_step_prefill)
    before = snapshot(kv, running + waiting)
    first = policy.plan(state)
    assert snapshot(kv, running + waiting) == before
    assert list(state.running) == running and list(state.waiting) == waiting
    assert policy.plan(state) == first
    assert first.scheduled or first.preempted
    apply_plan(kv, running, waiting, first)  # and the engine can carry it out


# ------------------------------------------------------------- random states (hypothesis)
@st.composite
def states(draw, decodes_only: bool = False):
    """A cache with finished requests' blocks cached, running requests (decodes, and
    unless `decodes_only`, prompts mid-prefill) and a queue (new and preempted requests);
    prompts share one of three hashed prefixes so the cache has hits."""
    kv = kv_cache(draw(st.integers(4, 30)), prefix_block_tokens=16)
    rid = 0

    def spec():
        nonlocal rid
        # whole blocks often: a decode right after a block boundary needs a new block
        prompt = draw(st.integers(1, 120) | st.sampled_from([16, 32, 48]))
        output = draw(st.integers(1, 8))
        fam = draw(st.integers(0, 2))
        n = blocks_for(prompt, 16)
        hashes = tuple(fam * 100 + j for j in range(min(n, 2 + 2 * fam)))
        hashes += tuple(10**4 * (rid + 1) + j for j in range(n - len(hashes)))
        rid += 1
        return request_spec(rid - 1, prompt, output, hashes=hashes)

    def fits(s, computed):
        probe = waiting_request(s)
        cached, from_free = kv.prefix_hit(probe)
        need = blocks_for(max(computed, cached), 16) - cached // 16 + from_free
        return need <= kv.free_blocks and cached <= computed

    for _ in range(draw(st.integers(0, 3))):
        s = spec()
        if fits(s, s.prompt_tokens + s.output_tokens - 1):
            finished_request(kv, s)
    running = []
    for _ in range(draw(st.integers(0, 6))):
        s = spec()
        if s.output_tokens > 1 and (decodes_only or draw(st.booleans())):
            outputs = draw(st.just(1) | st.integers(1, s.output_tokens - 1))
            computed = s.prompt_tokens + outputs - 1
        elif s.prompt_tokens > 1:
            outputs, computed = 0, draw(st.integers(0, s.prompt_tokens - 1))
        else:
            continue
        if decodes_only and not outputs:
            continue
        if fits(s, computed):
            running.append(running_request(kv, s, computed, outputs))
    waiting = []
    for _ in range(draw(st.integers(0, 4))):
        s = spec()
        if blocks_for(s.prompt_tokens + s.output_tokens - 1, 16) > kv.num_blocks:
            continue  # the engine rejects what can never fit
        outputs = draw(st.integers(0, s.output_tokens - 1))
        waiting.append(waiting_request(s, outputs, preemptions=int(outputs > 0)))
    for r in running + waiting:
        kv.shareable_keys(r)
    return kv, running, waiting, draw(st.booleans())


def check_plan(policy, kv, running, waiting, plan):
    scheduled = [r for r, _ in plan.scheduled]
    assert len(set(map(id, scheduled))) == len(scheduled)
    assert all(n >= 1 for _, n in plan.scheduled)
    # admission takes a prefix of the queue; a step that preempts admits nobody
    assert list(plan.admitted) == waiting[:len(plan.admitted)]
    assert not (plan.admitted and plan.preempted)
    assert all(any(v is r for r in running) for v in plan.preempted)
    live = [r for r in running if not any(r is v for v in plan.preempted)] + list(plan.admitted)
    assert all(any(r is x for x in live) for r in scheduled)
    # (n <= what is left after the prefix hit, which can include blocks registered by
    # earlier entries of the plan, is checked by apply_plan as the engine takes the hits)
    assert len(live) <= max(len(running), policy.max_num_seqs)
    if running or waiting:
        assert plan.scheduled or plan.preempted, "the policy would hang"
    prefill = sum(n for r, n in plan.scheduled if not plan.is_decode(r))
    decodes = sum(1 for r, n in plan.scheduled if plan.is_decode(r))
    if policy.name in ("budget", "sjf"):
        assert plan.num_tokens <= policy.max_num_batched_tokens
    elif policy.name == "whole":
        assert plan.num_tokens <= policy.max_num_batched_tokens
        if policy.variant == "prefill-first":
            assert not (prefill and decodes)
    else:
        assert all(n <= policy.chunk for r, n in plan.scheduled if not plan.is_decode(r))
        cap = policy.chunk if policy.variant == "alternate" else policy.prefill_budget
        assert prefill <= cap
        if policy.variant == "alternate":
            assert not (prefill and decodes)


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=POLICY_IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_states_give_pure_valid_plans_the_cache_can_hold(policy, data):
    kv, running, waiting, last = data.draw(states(decodes_only=policy.name == "whole"))
    if policy.queue.key is not None:
        waiting.sort(key=policy.queue.key)
    state = scheduler_state(kv, running, waiting, last)
    before = snapshot(kv, running + waiting)
    plan = policy.plan(state)
    assert snapshot(kv, running + waiting) == before
    assert policy.plan(state) == plan
    check_plan(policy, kv, running, waiting, plan)
    apply_plan(kv, running, waiting, plan)  # raises if the plan overflows the cache
    assert 0 <= kv.free_blocks <= kv.num_blocks


# ----------------------------------------------------------------------------- make_policy
def test_make_policy_refuses_another_familys_knob_naming_its_flag():
    with pytest.raises(ValueError) as e:
        make_policy("budget", {"prefill_budget": 64})
    msg = str(e.value)
    assert "--prefill-budget" in msg and "chunk" in msg and "--policy budget" in msg
    with pytest.raises(ValueError, match="--variant does not apply to --policy budget"):
        make_policy("budget", {"variant": "mixed"})
    with pytest.raises(ValueError, match="no policy knob"):
        make_policy("chunk", {"warp_speed": 9})
    with pytest.raises(ValueError, match="unknown"):
        make_policy("fastest", {})


def test_make_policy_maps_chunk_onto_each_familys_chunk_knob():
    assert make_policy("budget", {}, chunk=512).max_num_batched_tokens == 512
    assert make_policy("sjf", {}, chunk=512).max_num_batched_tokens == 512
    assert make_policy("chunk", {}, chunk=512).chunk == 512
    # the same value given both ways is one knob, not a conflict
    assert make_policy("budget", {"max_num_batched_tokens": 512}, chunk=512
                       ).max_num_batched_tokens == 512
    with pytest.raises(ValueError, match="--chunk does not apply to --policy whole"):
        make_policy("whole", {}, chunk=64)
    with pytest.raises(ValueError, match="disagree"):
        make_policy("budget", {"max_num_batched_tokens": 1024}, chunk=512)


def test_make_policy_unset_knobs_take_defaults():
    p = make_policy("chunk", {"variant": "alternate", "prefill_budget": None})
    assert (p.variant, p.prefill_budget) == ("alternate", 8192)
    assert type(make_policy("whole")) is WholePrefillPolicy
    assert set(POLICIES) == {"whole", "chunk", "budget", "sjf", "vllm"}


@pytest.mark.parametrize("device,budget,seats", [
    ("NVIDIA H200", 8192, 1024), ("NVIDIA H100 80GB HBM3", 8192, 1024),
    ("NVIDIA B200", 16384, 1024), ("cpu", 2048, 128), ("NVIDIA A100-SXM4-80GB", 2048, 256),
    ("NVIDIA A100-SXM4-40GB", 2048, 256), (None, 2048, 256)])
def test_device_defaults_follow_vllm(device, budget, seats):
    p = make_policy("budget", device_name=device)
    assert (p.max_num_batched_tokens, p.max_num_seqs) == (budget, seats)
    assert make_policy("sjf", device_name=device).max_num_batched_tokens == budget
    for family in ("chunk", "whole"):
        assert make_policy(family, device_name=device).max_num_seqs == seats
    # what the user sets wins over the device default
    assert make_policy("budget", {"max_num_seqs": 8}, device_name=device).max_num_seqs == 8


def test_chosen_defaults_reports_exactly_the_unset_device_knobs():
    got = chosen_defaults("budget", device_name="NVIDIA H200")
    assert {k: v["value"] for k, v in got.items()} == {"max_num_batched_tokens": 8192,
                                                        "max_num_seqs": 1024}
    assert all("NVIDIA H200" in v["why"] for v in got.values())
    assert list(chosen_defaults("budget", {}, chunk=4096, device_name="NVIDIA H200")) == [
        "max_num_seqs"]
    assert list(chosen_defaults("budget", {"max_num_seqs": 64}, device_name="cpu")) == [
        "max_num_batched_tokens"]
    cpu = chosen_defaults("chunk", device_name="cpu")
    assert cpu == {"max_num_seqs": {"value": 128, "why": cpu["max_num_seqs"]["why"]}}
    assert "'cpu'" in cpu["max_num_seqs"]["why"] and "on CPU" in cpu["max_num_seqs"]["why"]
    assert "'unknown'" in chosen_defaults("whole")["max_num_seqs"]["why"]
    assert chosen_defaults("budget", {"max_num_seqs": 64, "max_num_batched_tokens": 64}) == {}


# ------------------------------------------------------------- prefix hits within a plan
def test_the_ledger_sees_blocks_earlier_entries_of_the_plan_register():
    # Four 100-token prompts share 4 blocks (64 tokens) and arrive together: the first
    # computes them, the next three hit them in the same plan (vLLM registers a block's
    # hash at allocation) and compute 36 each. A running request whose next chunk fills
    # the same blocks registers them too.
    kv = kv_cache(100, prefix_block_tokens=16)
    shared = (1, 2, 3, 4)
    waiting = [waiting_request(request_spec(i, 100, hashes=shared + (10 * i + 5, 10 * i + 6,
                                                                      10 * i + 7)))
               for i in range(4)]
    policy = TokenBudgetPolicy(max_num_batched_tokens=1000)
    plan = plan_of(policy, kv, [], waiting)
    assert [n for _, n in plan.scheduled] == [100, 36, 36, 36]
    running = []
    apply_plan(kv, running, list(waiting), plan)
    assert [r.num_cached_tokens for r in running] == [0, 64, 64, 64]
    # a running prompt's chunk registers what it will fill for a later admission
    kv2 = kv_cache(100, prefix_block_tokens=16)
    p = running_request(kv2, request_spec(0, 100, hashes=shared + (5, 6, 7)), computed=16)
    w = waiting_request(request_spec(1, 80, hashes=shared + (9,)))
    plan = plan_of(policy, kv2, [p], [w])
    assert plan.scheduled == ((p, 84), (w, 16))
    # with the chunk cut to 32 tokens (48 computed: 3 blocks), the hit is 3 blocks
    plan = plan_of(TokenBudgetPolicy(max_num_batched_tokens=1000,
                                     long_prefill_token_threshold=32), kv2, [p], [w])
    assert plan.scheduled == ((p, 32), (w, 32))


# ------------------------------------------- the bulk decode: the same plan, decodes pinned
def _pinned_plan(pol, kv, n: int, rest, waiting, slots: int):
    """`pol.plan` with the running list's first n requests pinned (the bulk decode's
    stretch members, `SchedulerState.pinned`): they stand in as bare objects, so a plan
    that read any of their fields would fail."""
    from chunksim.core.plan import SchedulerState

    opaque = [object() for _ in range(n)]
    return pol.plan(SchedulerState(opaque + list(rest), list(waiting), kv, False,
                                   pinned=n, pinned_blocks=slots))


POLICY_FAMILIES = ["budget", "chunk-mixed", "chunk-two-pass", "chunk-alternate",
                   "whole-prefill-first", "whole-mixed"]


def _policy(family, budget, chunk, seats, partial, threshold, reserve, chunked):
    if family == "budget":
        return TokenBudgetPolicy(max_num_batched_tokens=budget, max_num_seqs=seats,
                                 max_num_partial_prefills=partial, reserve_full_prompt=reserve,
                                 enable_chunked_prefill=chunked,
                                 long_prefill_token_threshold=threshold if chunked else 0)
    if family.startswith("chunk-"):
        return FixedChunkPolicy(chunk=chunk, variant=family[len("chunk-"):],
                                prefill_budget=budget, max_num_seqs=seats)
    return WholePrefillPolicy(variant=family[len("whole-"):], max_num_batched_tokens=budget,
                              max_num_seqs=seats)


@settings(max_examples=300, deadline=None)
@given(running=st.lists(st.tuples(st.integers(1, 90), st.integers(1, 20)), max_size=8),
       landed=st.lists(st.integers(1, 90), min_size=1, max_size=6),
       family=st.sampled_from(POLICY_FAMILIES),
       budget=st.integers(1, 14), seats=st.integers(1, 14), partial=st.integers(0, 4),
       blocks=st.integers(1, 80), reserve=st.booleans(), chunked=st.booleans(),
       caching=st.booleans(), prompt=st.sampled_from([None, 1, 3, 40]))
def test_a_pinned_plan_admits_landed_decodes_as_plan_does(running, landed, family, budget,
                                                          seats, partial, blocks, reserve,
                                                          chunked, caching, prompt):
    """The bulk decode takes in requests that land with their prompt's KV (P/D,
    `BulkDecoder.join_step`) where `plan`, with the running decodes pinned, schedules them
    all, preempts nothing and admits every landed request for one token: exactly where
    `plan` on the same state unpinned does so. (A plain prompt queued last, `prompt`
    tokens, is admitted for all of them or part.)"""
    from chunksim.core.ledger import KVLedger

    pol = _policy(family, budget, 8, seats, partial, 0, reserve, chunked)
    kv = kv_cache(400, prefix_block_tokens=16 if caching else None)
    run = [decoding_request(kv, request_spec(i, p, o + 1), outputs=o)
           for i, (p, o) in enumerate(running)]
    waiting = []
    for j, p in enumerate(landed):
        req = waiting_request(request_spec(100 + j, p + 1, 8))
        req.kv_carried = True
        kv.carry(req, p)  # all of the prompt's KV but its last token's (sim.fleet.pd)
        waiting.append(req)
    if prompt is not None:
        waiting.append(waiting_request(request_spec(200, prompt, 8)))
    kv.take(kv.free_blocks - blocks)  # leave `blocks` free
    bs = kv.block_size
    slots = sum(r.num_computed_tokens % bs == 0 for r in run)  # decodes opening a block
    plan = plan_of(pol, kv, run, waiting)
    expected = (not plan.preempted and plan.admitted == tuple(waiting)
                and plan.scheduled == tuple((r, 1) for r in (*run, *waiting)))
    if slots > KVLedger(kv).free:
        assert not expected  # (the bulk decode does not ask: the policy preempts)
        return
    got = _pinned_plan(pol, kv, len(run), [], waiting, slots)
    takes = (got.pinned == len(run) and not got.preempted
             and len(got.admitted) == len(waiting) and all(n == 1 for _, n in got.scheduled))
    assert takes == expected
    if expected:
        assert got.scheduled == plan.scheduled[len(run):]


@settings(max_examples=400, deadline=None)
# the decodes' new blocks evict two cached blocks a queued prompt would have hit
@example(decodes=[(16, 1)] * 3, tail=[], queued=[(128, 2)], family="budget", budget=300,
         chunk=1, seats=14, partial=0, threshold=0, blocks=0, reserve=True, chunked=True,
         caching=True, last_prefill=False)
@given(decodes=st.lists(st.tuples(st.integers(1, 90), st.integers(1, 20)), max_size=8),
       tail=st.lists(st.tuples(st.integers(1, 120), st.integers(0, 119), st.integers(0, 3)),
                     max_size=4),
       queued=st.lists(st.tuples(st.integers(1, 200), st.integers(-1, 2)), max_size=4),
       family=st.sampled_from(POLICY_FAMILIES),
       budget=st.integers(1, 300), chunk=st.integers(1, 100), seats=st.integers(1, 14),
       partial=st.integers(0, 3), threshold=st.sampled_from([0, 7, 50]),
       blocks=st.integers(0, 60), reserve=st.booleans(), chunked=st.booleans(),
       caching=st.booleans(), last_prefill=st.booleans())
def test_a_pinned_plan_is_what_plan_does_after_the_decodes(decodes, tail, queued, family,
                                                           budget, chunk, seats, partial,
                                                           threshold, blocks, reserve,
                                                           chunked, caching, last_prefill):
    """The bulk decode carries on through prefills (`BulkDecoder.mixed_step`) asking
    `plan` with its decodes pinned: on a state whose running list is one-token decodes
    then a tail (prompts mid-prefill, a prompt's 1-token tail, decodes), that plan
    schedules every pinned decode and preempts nothing exactly where `plan` unpinned
    schedules every decode first and preempts nothing, and then lists exactly its entries
    after the decodes, its admissions and its passes. The pinned decodes are bare
    objects: the plan never reads them, and their slots are taken up front
    (`KVLedger.take_decodes`)."""
    from chunksim.core.ledger import KVLedger

    pol = _policy(family, budget, chunk, seats, partial, threshold, reserve, chunked)
    kv = kv_cache(400, prefix_block_tokens=16 if caching else None)
    # prefixes to share: the decodes' (registered), the first tail prompt's (registered
    # as its chunks are scheduled: a later admission in the same plan may hit them)
    families = (tuple(range(1, 9)), tuple(range(500, 508)), tuple(range(700, 708)))
    run = [decoding_request(kv, request_spec(i, p, o + 1, hashes=families[0][: p // 16]),
                            outputs=o) for i, (p, o) in enumerate(decodes)]
    rest = []
    for j, (p, done, outs) in enumerate(tail):
        own = families[1] if j == 0 else tuple(1000 * (j + 1) + k for k in range(8))
        spec = request_spec(50 + j, p, outs + 2, hashes=own[: p // 16])
        if outs or family.startswith("whole"):  # (whole prompts are never mid-prefill)
            rest.append(decoding_request(kv, spec, outputs=outs or 1))
        else:
            rest.append(running_request(kv, spec, computed=min(done, p - 1)))
    waiting = [waiting_request(request_spec(100 + j, p, 8,
                                            hashes=families[f][: p // 16] if f >= 0
                                            else ()))
               for j, (p, f) in enumerate(queued)]
    # a finished request's blocks stay cached (LRU) among the free ones: new blocks evict
    # them once `blocks` uncached ones are gone, the decodes' first (a hit may be lost)
    finished_request(kv, request_spec(300, 128, 2, hashes=families[2]))
    finished_request(kv, request_spec(301, 128, 2, hashes=tuple(range(900, 908))))
    kv.take(max(0, getattr(kv, "uncached_free", kv.free_blocks) - blocks))
    bs = kv.block_size
    slots = sum(r.num_computed_tokens % bs == 0 for r in run)  # decodes opening a block
    plan = plan_of(pol, kv, run + rest, waiting, last_step_prefill=last_prefill)
    n = len(run)
    expected = not plan.preempted and plan.scheduled[:n] == tuple((r, 1) for r in run)
    if slots > KVLedger(kv).free:
        assert not expected or n == 0  # (the bulk decode does not ask: it preempts)
        return
    from chunksim.core.plan import SchedulerState

    got = pol.plan(SchedulerState([object() for _ in range(n)] + rest, waiting, kv,
                                  last_prefill, pinned=n, pinned_blocks=slots))
    assert (got.pinned == n and not got.preempted) == expected
    if expected:
        assert got.scheduled == plan.scheduled[n:]
        assert got.admitted == plan.admitted and got.two_pass == plan.two_pass

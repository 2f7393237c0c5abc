"""vLLM V1 scheduler conformance, checked on the schedule log (`--schedule-log`).

Small scenarios in the style of vLLM's own scheduler tests (`tests/v1/core/
test_scheduler.py`, `test_prefix_caching.py`): few KV blocks, tiny budgets, and the exact
tokens each request gets in each step. Expected values are derived in the comments from
vLLM V1's documented behaviour and its scheduler source (0.8 to 0.11: `Scheduler.schedule`,
`KVCacheManager.allocate_slots` / `cache_blocks`, `AsyncScheduler`); every step lasts
10 ms (the `const_profile`), blocks hold 16 tokens and prefix hashes cover one block each
unless a test says otherwise. A cache of `kv_blocks=N` is vLLM's `num_gpu_blocks = N`: one
is vLLM's null block, so N - 1 hold KV (the counts below are those N - 1).
"""

from __future__ import annotations

import pytest

from chunksim.core.spec import RequestSpec, Workload
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate

BS = 16


def prefix(*ids: int) -> tuple[int, ...]:
    """Prefix hashes, one per 16-token block."""
    return tuple(ids)


def run(profile, reqs, hash_tokens: int = BS, **cfg):
    """Simulate `reqs` = [(arrival_s, prompt, output, hashes=(), priority=0), ...] and
    return (schedule log, requests frame, steps frame, summary)."""
    specs = []
    for i, r in enumerate(reqs):
        arrival, prompt, output, *rest = r
        hashes = rest[0] if rest else ()
        priority = rest[1] if len(rest) > 1 else 0
        specs.append(RequestSpec(i, arrival, prompt, output, hashes, "default", priority))
    w = Workload("conformance", tuple(specs), hash_tokens)
    cfg.setdefault("kv_blocks", 1000)
    res, summary = simulate(w, profile, RunConfig(**cfg), schedule_log=True)
    return res.schedule, res.requests, res.steps, summary


def steps_of(log, upto: int | None = None) -> list[dict[int, tuple[str, int]]]:
    """Per step, {request: (kind, tokens)} of the scheduled rows, in batch order."""
    out: list[dict] = []
    for row in log.itertuples():
        if row.kind == "preempted":
            continue
        while len(out) <= row.step:
            out.append({})
        out[row.step][row.request_id] = (row.kind, row.tokens)
    return out if upto is None else out[:upto]


def tokens_of(log, upto: int | None = None) -> list[dict[int, int]]:
    return [{r: n for r, (_, n) in s.items()} for s in steps_of(log, upto)]


def budget(n: int, **knobs) -> dict:
    return dict(policy="budget", chunk=n, knobs=knobs)


# ------------------------------------------------------------------ the log itself
def test_log_rows_agree_with_steps_and_requests(const_profile):
    reqs = [(0.0, 300, 5), (0.0, 200, 3), (0.012, 90, 4)]
    log, requests, steps, _ = run(const_profile, reqs, **budget(256))
    sched = log[log.kind != "preempted"]
    # every step's batch is numbered 0.. in order and its tokens add up to steps.csv's
    for step, rows in sched.groupby("step"):
        assert list(rows.position) == list(range(len(rows)))
        st = steps.iloc[step]
        assert rows.tokens.sum() == st.prefill_tokens + st.decodes
        assert (rows.kind == "decode").sum() == st.decodes
    # a request's tokens over the log are what it computed
    assert sched.groupby("request_id").tokens.sum().to_dict() == dict(
        zip(requests.request_id, requests.computed_tokens, strict=True))
    # its context grows by what each step gave it
    for _, rows in sched.groupby("request_id"):
        c = rows.computed_tokens.to_numpy()
        assert list(c[1:]) == list((c + rows.tokens.to_numpy())[:-1])


def test_bulk_decode_stretches_log_the_same_rows_as_stepping(const_profile):
    reqs = [(0.0, 40, 30), (0.0, 70, 20), (0.4, 50, 10)]
    fast, *_ = run(const_profile, reqs, **budget(512))
    slow, *_ = run(const_profile, reqs, engine=EngineConfig(fast_forward=False), **budget(512))
    assert fast.equals(slow)


# ------------------------------------------------------------------ budget and threshold
def test_budget_splits_prompts_first_come_first_served(const_profile):
    # three 800-token prompts, budget 1024: 800 + 224, then 1 (decode) + 576 + 447
    log, *_ = run(const_profile, [(0.0, 800, 3)] * 3, **budget(1024))
    assert tokens_of(log, 3) == [{0: 800, 1: 224}, {0: 1, 1: 576, 2: 447},
                                 {0: 1, 1: 1, 2: 353}]
    assert steps_of(log)[1][2] == ("new", 447)
    assert steps_of(log)[1][1] == ("prefill", 576)


def test_long_prefill_threshold_caps_each_request(const_profile):
    # vLLM's test_schedule_concurrent_partial_requests: budget 1024, threshold 400:
    # 400 + 400 + 224, again 400 + 400 + 224, then two decodes and the last 352
    log, *_ = run(const_profile, [(0.0, 800, 3)] * 3,
                  **budget(1024, long_prefill_token_threshold=400))
    assert tokens_of(log, 3) == [{0: 400, 1: 400, 2: 224}, {0: 400, 1: 400, 2: 224},
                                 {0: 1, 1: 1, 2: 352}]


def test_long_prefill_threshold_spares_a_lone_request(const_profile):
    # vLLM 0.32 `Scheduler.schedule`: the threshold is off in a step that starts with one
    # request running or waiting ("nobody to starve"): a lone 900-token prompt under a
    # 512 budget and a 128 threshold gets 512 + 388. A second request arriving during
    # step 0 turns it back on: step 1 starts with two, each capped at 128.
    log, *_ = run(const_profile, [(0.0, 900, 2)], **budget(512, long_prefill_token_threshold=128))
    assert tokens_of(log) == [{0: 512}, {0: 388}, {0: 1}]
    log, *_ = run(const_profile, [(0.0, 900, 2), (0.005, 300, 2)],
                  **budget(512, long_prefill_token_threshold=128))
    assert tokens_of(log, 3) == [{0: 512}, {0: 128, 1: 128}, {0: 128, 1: 128}]


def test_seat_cap_admits_when_a_seat_frees(const_profile):
    # two seats: the third request waits until one finishes (after 3 output tokens)
    log, *_ = run(const_profile, [(0.0, 100, 3)] * 3, **budget(2048, max_num_seqs=2))
    assert tokens_of(log) == [{0: 100, 1: 100}, {0: 1, 1: 1}, {0: 1, 1: 1}, {2: 100},
                              {2: 1}, {2: 1}]


# ------------------------------------------------------------------ order and victims
def test_fcfs_and_priority_order_admission(const_profile):
    reqs = [(0.0, 600, 2, (), 2), (0.0, 600, 2, (), 0), (0.0, 600, 2, (), 1)]
    fcfs, *_ = run(const_profile, reqs, **budget(1000))
    assert tokens_of(fcfs, 1) == [{0: 600, 1: 400}]
    # priority: a heap on (priority, arrival): request 1, then 2; request 0 waits
    prio, *_ = run(const_profile, reqs, **budget(1000, priority_scheduling=True))
    assert tokens_of(prio, 1) == [{1: 600, 2: 400}]
    assert list(steps_of(prio)[0]) == [1, 2]


def _preemption_case(const_profile, **knobs):
    # 9 blocks (kv_blocks=10); two 64-token prompts take 4 each. Step 1: the first decode takes the
    # last free block, the second finds none: a victim is preempted (its 4 full blocks go to the
    # prefix cache, so the pool regains 4). It cannot come back while the other runs (64 cached + 1
    # new token need 5 blocks, 4 are free), and resumes once that one finishes, hitting its own 64
    # cached tokens: 1 token to compute.
    reqs = [(0.0, 64, 3, (), 1), (0.0, 64, 3, (), 0)]
    return run(const_profile, reqs, kv_blocks=10, **budget(2048, **knobs))


def test_preemption_victim_is_the_last_admitted_and_resumes_from_its_cache(const_profile):
    log, requests, *_ = _preemption_case(const_profile)
    pre = log[log.kind == "preempted"]
    assert pre[["step", "request_id", "blocks", "blocks_freed", "computed_tokens"]
               ].values.tolist() == [[1, 1, 4, 4, 64]]
    assert steps_of(log) == [{0: ("new", 64), 1: ("new", 64)}, {0: ("decode", 1)},
                             {0: ("decode", 1)}, {1: ("resumed", 1)}, {1: ("decode", 1)}]
    resumed = log[log.kind == "resumed"].iloc[0]
    assert (resumed.cached_tokens, resumed.computed_tokens) == (64, 64)
    assert requests.preemptions.tolist() == [0, 1]


def test_priority_victim_is_the_least_urgent_even_if_admitted_first(const_profile):
    # vLLM: victim = max(running, key=(priority, arrival)): request 0 (priority 1), though
    # it was scheduled first. The block planned for its decode was never allocated (the
    # engine preempts before allocating), so the pool regains its 4.
    log, requests, *_ = _preemption_case(const_profile, priority_scheduling=True)
    pre = log[log.kind == "preempted"]
    assert pre[["step", "request_id", "blocks_freed"]].values.tolist() == [[1, 0, 4]]
    assert tokens_of(log) == [{0: 64, 1: 64}, {1: 1}, {1: 1}, {0: 1}, {0: 1}]
    assert requests.preemptions.tolist() == [1, 0]


# ------------------------------------------------------------------ prefix cache
def test_prefix_hit_after_a_step_on_blocks_still_held(const_profile):
    # budget 64: request 0 computes 64 of its 100 tokens in step 0 (4 full blocks).
    # Request 1 (same first 4 blocks) arrives during step 0 and in step 1 hits them
    # while request 0 still holds them: 16 to compute; it gets them after request 0's 36.
    a = prefix(1, 2, 3, 4, 5, 6, 7)
    b = prefix(1, 2, 3, 4, 99)
    log, *_ = run(const_profile, [(0.0, 100, 2, a), (0.005, 80, 2, b)], **budget(64))
    assert tokens_of(log, 2) == [{0: 64}, {0: 36, 1: 16}]
    row = log[(log.request_id == 1) & (log.kind == "new")].iloc[0]
    assert (row.cached_tokens, row.computed_tokens) == (64, 64)


def test_prefix_hit_after_a_free_takes_blocks_from_the_pool(const_profile):
    # request 0 finishes in step 0; its 4 full blocks stay cached, free. Request 1 hits
    # all 4 (taking them back out of the free pool) and computes 16 tokens.
    a = prefix(1, 2, 3, 4, 5)
    b = prefix(1, 2, 3, 4, 99)
    log, _, steps, _ = run(const_profile, [(0.0, 65, 1, a), (0.5, 80, 1, b)], kv_blocks=8,
                           **budget(2048))
    assert tokens_of(log) == [{0: 65}, {1: 16}]
    assert log[log.request_id == 1].cached_tokens.tolist() == [64]
    # 5 blocks held in each step: request 1's are the 4 it hit plus 1 new
    assert steps.kv_blocks_used.tolist() == [5, 5]


def test_prefix_hit_after_eviction_keeps_the_leading_blocks(const_profile):
    # 8 blocks (kv_blocks=9). Request 0 (65 tokens) finishes: its full blocks are freed tail first.
    # Request 2 (96 tokens, nothing shared) needs 6 blocks: the 3 never used, request 0's
    # partial block, then evicts the two least recently freed cached blocks: request 0's
    # blocks 3 and 2. Request 1 (same 4-block prefix) then hits blocks 0-1 only: 32.
    a = prefix(1, 2, 3, 4, 5)
    b = prefix(1, 2, 3, 4, 99)
    reqs = [(0.0, 65, 1, a), (0.5, 96, 1), (1.0, 80, 1, b)]
    log, *_ = run(const_profile, reqs, kv_blocks=9, **budget(2048))
    assert tokens_of(log) == [{0: 65}, {1: 96}, {2: 48}]
    assert log[log.request_id == 2].cached_tokens.tolist() == [32]


def test_prefix_hit_within_a_step_the_issue_case(const_profile):
    # Eight 1,100-token prompts sharing their first 1,024 tokens (Mooncake-style hashes of
    # 512 tokens: [1, 2, unique]) arrive together under a budget of 2,048. vLLM registers
    # a block's hash when it allocates it, so requests 1-7 hit the 64 blocks request 0 is
    # about to compute: 1,100 + 7 x 76 = 1,632 tokens in one step.
    reqs = [(0.0, 1100, 2, (1, 2, 100 + i)) for i in range(8)]
    log, requests, steps, summary = run(const_profile, reqs, hash_tokens=512, **budget(2048))
    assert tokens_of(log, 1) == [{0: 1100, **{i: 76 for i in range(1, 8)}}]
    assert steps.prefill_tokens.iloc[0] == 1632
    assert log[log.step == 0].cached_tokens.tolist() == [0] + [1024] * 7
    # KV: 69 blocks for request 0, 5 more for each of the others (4 past the shared 64)
    assert steps.kv_blocks_used.iloc[0] == 69 + 7 * 5
    assert requests.cached_tokens.sum() == 7 * 1024
    assert summary["prefix_cache_hit_rate"] == pytest.approx(7 * 1024 / (8 * 1100))


@pytest.mark.parametrize("n,prompt,shared,hash_tokens,bud", [
    (2, 300, 160, 16, 4096), (5, 1100, 1024, 16, 8192), (6, 700, 520, 8, 4096),
    (4, 1000, 1000, 16, 4096), (3, 1100, 1024, 512, 1300)])
def test_same_step_hits_closed_form(const_profile, n, prompt, shared, hash_tokens, bud):
    # n identical-prefix prompts arrive together. The first registers the blocks it
    # allocates; every later one hits the full 16-token blocks of the shared part, at
    # most all but its last token: hit = min(shared // 16, (prompt - 1) // 16) * 16. The
    # budget admits the first whole, then min(prompt - hit, what is left) for each.
    uniq = lambda i: tuple(10_000 * (i + 1) + j for j in range(-(-(prompt - shared)  # noqa: E731
                                                                  // hash_tokens)))
    shared_ids = tuple(range(1, shared // hash_tokens + 1))
    reqs = [(0.0, prompt, 2, shared_ids + uniq(i)) for i in range(n)]
    log, *_ = run(const_profile, reqs, hash_tokens=hash_tokens, **budget(bud))
    hit = min(shared // hash_tokens * hash_tokens // BS, (prompt - 1) // BS) * BS
    want, left = {0: prompt}, bud - prompt
    for i in range(1, n):
        if left <= 0:
            break
        want[i] = min(prompt - hit, left)
        left -= want[i]
    assert tokens_of(log, 1) == [want]
    assert log[(log.step == 0) & (log.request_id > 0)].cached_tokens.tolist() == [
        hit] * (len(want) - 1)


def test_blocks_being_computed_are_not_evicted(const_profile):
    # 11 blocks (kv_blocks=12). Request 0 (64 tokens) is admitted with request 1 (same
    # 4 blocks + 16): request 1 hits the 4 blocks request 0 is computing. Request 2 (no prefix, 96
    # tokens) needs 6 blocks and the pool has exactly 11 - 4 - 1 = 6 left: nothing cached
    # is evictable, so it fits only because the shared blocks are counted once.
    a = prefix(1, 2, 3, 4)
    b = prefix(1, 2, 3, 4, 5)
    log, _, steps, _ = run(const_profile, [(0.0, 64, 2, a), (0.0, 80, 2, b), (0.0, 96, 2)],
                           kv_blocks=12, **budget(2048))
    assert tokens_of(log, 1) == [{0: 64, 1: 16, 2: 96}]
    assert steps.kv_blocks_used.iloc[0] == 11


# ------------------------------------------------------------------ chunked prefill off
def test_chunked_prefill_off_schedules_prompts_whole_or_waits(const_profile):
    # budget 512, three prompts at once: 300 fits; 300 more does not fit the 212 left, so
    # admission stops there (vLLM 0.32: "we can stop the scheduling here"; 0.10 skipped
    # it and let the 100 behind it go ahead); next step 1 decode + 300 + 100 fit.
    reqs = [(0.0, 300, 3), (0.0, 300, 3), (0.0, 100, 3)]
    off, *_ = run(const_profile, reqs, **budget(512, enable_chunked_prefill=False))
    assert tokens_of(off, 2) == [{0: 300}, {0: 1, 1: 300, 2: 100}]
    on, *_ = run(const_profile, reqs, **budget(512))
    assert tokens_of(on, 2) == [{0: 300, 1: 212}, {0: 1, 1: 88, 2: 100}]


def test_chunked_prefill_off_rejects_what_the_budget_cannot_hold(const_profile):
    # a recompute re-prefills prompt + output - 1 tokens in one step: 500 + 13 - 1 > 511
    reqs = [(0.0, 500, 13), (0.0, 500, 12)]
    log, requests, *_ = run(const_profile, reqs,
                            **budget(511, enable_chunked_prefill=False))
    assert requests.rejected.tolist() == [True, False]
    assert "--no-enable-chunked-prefill" in requests.reject_reason.iloc[0]
    assert tokens_of(log, 1) == [{1: 500}]


def test_chunked_prefill_off_refuses_a_chunking_knob():
    from chunksim.policies import make_policy

    with pytest.raises(ValueError, match="--no-enable-chunked-prefill"):
        make_policy("budget", {"enable_chunked_prefill": False,
                               "long_prefill_token_threshold": 64})


# ------------------------------------------------------------------ async scheduling
def test_async_scheduling_sees_arrivals_a_step_later(const_profile):
    # request 1 arrives at 15 ms, during step 1 (10-20 ms). Synchronous: step 2 (planned
    # at 20 ms) admits it. Async: step 2 was planned at 10 ms, when step 1 started, so
    # request 1 joins step 3.
    reqs = [(0.0, 100, 6), (0.015, 50, 2)]
    sync, *_ = run(const_profile, reqs, **budget(2048))
    asy, *_ = run(const_profile, reqs, engine=EngineConfig(async_scheduling=True),
                  **budget(2048))
    assert tokens_of(sync, 4) == [{0: 100}, {0: 1}, {0: 1, 1: 50}, {0: 1, 1: 1}]
    assert tokens_of(asy, 4) == [{0: 100}, {0: 1}, {0: 1}, {0: 1, 1: 50}]


def test_async_scheduling_finishing_requests_hold_seats_a_step(const_profile):
    # two seats; request 0 finishes in step 1. Synchronous: request 2 takes its seat in
    # step 2. Async: step 2 is planned while step 1 runs, request 0 still holds its seat
    # (vLLM does not schedule it again, as it reached max_tokens): request 2 joins step 3.
    reqs = [(0.0, 50, 2), (0.0, 50, 8), (0.0, 50, 2)]
    sync, *_ = run(const_profile, reqs, **budget(2048, max_num_seqs=2))
    asy, *_ = run(const_profile, reqs, engine=EngineConfig(async_scheduling=True),
                  **budget(2048, max_num_seqs=2))
    assert tokens_of(sync, 3) == [{0: 50, 1: 50}, {0: 1, 1: 1}, {1: 1, 2: 50}]
    assert tokens_of(asy, 4) == [{0: 50, 1: 50}, {0: 1, 1: 1}, {1: 1}, {1: 1, 2: 50}]


def test_async_scheduling_waits_for_outputs_when_nothing_else_can_run(const_profile):
    # one seat: nothing can be planned ahead while request 0 finishes, so the engine
    # waits for its output and plans with everything known: no step is lost
    reqs = [(0.0, 50, 2), (0.0, 50, 2)]
    asy, *_ = run(const_profile, reqs, engine=EngineConfig(async_scheduling=True),
                  **budget(2048, max_num_seqs=1))
    assert tokens_of(asy) == [{0: 50}, {0: 1}, {1: 50}, {1: 1}]


@pytest.mark.parametrize("overhead_ms,sync_ms,async_ms", [(4.0, 14.0, 10.0),
                                                          (15.0, 25.0, 15.0)])
def test_async_scheduling_hides_host_time_behind_the_forward_pass(
        const_profile, overhead_ms, sync_ms, async_ms):
    # a step lasts forward + host work synchronously, the longer of the two async
    reqs = [(0.0, 50, 5)]
    for asyn, ms in ((False, sync_ms), (True, async_ms)):
        _, _, steps, _ = run(const_profile, reqs, step_overhead_s=overhead_ms / 1000,
                             engine=EngineConfig(async_scheduling=asyn), **budget(2048))
        assert steps.duration_s.tolist() == pytest.approx([ms / 1000] * 5)


def test_a_threshold_above_max_model_len_is_refused_as_vllm_refuses_it(const_profile):
    # vLLM's SchedulerConfig.verify_max_model_len: long_prefill_token_threshold cannot be
    # greater than max_model_len
    with pytest.raises(ValueError, match="--long-prefill-token-threshold 300 exceeds "
                                         "--max-model-len 200"):
        run(const_profile, [(0.0, 100, 3)], engine=EngineConfig(max_model_len=200),
            **budget(512, long_prefill_token_threshold=300))
    log, *_ = run(const_profile, [(0.0, 100, 3)], engine=EngineConfig(max_model_len=300),
                  **budget(512, long_prefill_token_threshold=300))
    assert tokens_of(log, 1) == [{0: 100}]

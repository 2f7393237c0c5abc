"""Prefix caching, priority scheduling and request classes."""

import pytest
from factories import workload

from chunksim.core.spec import RequestSpec, Workload
from chunksim.sim.run import RunConfig, simulate


def shared(k_blocks: int, hb: int = 16, p1: int = 400, p2: int = 300, gap: float = 1.0):
    """Two requests whose first k_blocks hash blocks are equal."""
    h1 = tuple(range(100, 100 + -(-p1 // hb)))
    h2 = h1[:k_blocks] + tuple(range(900, 900 + -(-p2 // hb) - k_blocks))
    return Workload("shared", (RequestSpec(0, 0.0, p1, 2, h1), RequestSpec(1, gap, p2, 2, h2)),
                    prefix_block_tokens=hb)


@pytest.mark.parametrize("k", [0, 1, 5, 12])
def test_second_request_prefills_only_what_is_not_shared(const_profile, k):
    res, s = simulate(shared(k), const_profile, RunConfig(policy="budget",
                                                          chunk=2048))
    r = res.requests
    assert r.cached_tokens.tolist() == [0, 16 * k]
    assert r.computed_tokens.iloc[1] == 300 + 2 - 1 - 16 * k
    second = res.steps[res.steps.start_s >= 1.0]
    assert second.prefill_tokens.iloc[0] == 300 - 16 * k
    assert s["prefix_cache_hit_rate"] == pytest.approx(16 * k / 700)


def test_mooncake_sized_hash_blocks_map_onto_16_token_kv_blocks(const_profile):
    # one shared 512-token hash block = 32 KV blocks of 16 tokens
    w = shared(1, hb=512, p1=1200, p2=1100)
    res, _ = simulate(w, const_profile, RunConfig(chunk=4096))
    assert res.requests.cached_tokens.tolist() == [0, 512]


def test_the_last_token_is_always_recomputed(const_profile):
    # identical 320-token prompts (20 full blocks): the hit stops one block short
    h = tuple(range(20))
    w = Workload("same", (RequestSpec(0, 0.0, 320, 2, h), RequestSpec(1, 1.0, 320, 2, h)),
                 prefix_block_tokens=16)
    res, _ = simulate(w, const_profile, RunConfig())
    assert res.requests.cached_tokens.tolist() == [0, 304]


def test_no_prefix_caching_means_no_hits(const_profile):
    res, s = simulate(shared(12), const_profile, RunConfig(prefix_caching=False))
    assert res.requests.cached_tokens.sum() == 0 and s["prefix_cache_hit_rate"] is None


def test_freed_blocks_are_evicted_lru_tail_first_when_space_is_needed(const_profile):
    # request 0's 25 blocks stay cached after it ends. Request 1 needs 94 of the 100
    # blocks (kv_blocks=101: one is vLLM's null block): 75 never-used ones, then 19
    # evicted. vLLM frees a request's blocks tail first, so the tail goes and the first
    # 6 blocks (96 tokens) survive for request 2.
    hb = 16
    h0 = tuple(range(25))
    w = Workload("evict", (
        RequestSpec(0, 0.0, 400, 1, h0),
        RequestSpec(1, 1.0, 1500, 1, tuple(range(500, 594))),
        RequestSpec(2, 2.0, 400, 1, h0)), prefix_block_tokens=hb)
    res, _ = simulate(w, const_profile, RunConfig(kv_blocks=101))
    assert res.requests.cached_tokens.tolist() == [0, 0, 96]
    res, _ = simulate(w, const_profile, RunConfig(kv_blocks=201))
    assert res.requests.cached_tokens.tolist() == [0, 0, 384]


def test_preempted_requests_re_prefill_from_their_cached_blocks(const_profile):
    w = workload([(0.0, 200, 60), (0.0, 200, 60), (0.0, 200, 60)])
    on, s_on = simulate(w, const_profile, RunConfig(kv_blocks=30))
    off, s_off = simulate(w, const_profile, RunConfig(kv_blocks=30, prefix_caching=False))
    assert s_on["preemptions"] > 0 and s_off["preemptions"] > 0
    assert on.requests.cached_tokens.sum() > 0
    # recomputation is cheaper with the cache: fewer tokens actually computed
    assert on.requests.computed_tokens.sum() < off.requests.computed_tokens.sum()


def _prio(reqs):
    return Workload("prio", tuple(RequestSpec(i, a, p, o, priority=pr, request_class=c)
                                  for i, (a, p, o, pr, c) in enumerate(reqs)))


def test_priority_admits_the_most_urgent_waiting_request_first(const_profile):
    # one seat: r0 runs; r1 (priority 5) and r2 (priority 0) wait; r2 must go first
    w = _prio([(0.0, 50, 5, 1, "a"), (0.001, 50, 5, 5, "b"), (0.002, 50, 5, 0, "c")])
    fcfs, _ = simulate(w, const_profile, RunConfig(chunk=512, knobs=dict(max_num_seqs=1)))
    prio, _ = simulate(w, const_profile, RunConfig(
        chunk=512, knobs=dict(max_num_seqs=1, priority_scheduling=True)))
    assert fcfs.requests.first_token_s.iloc[1] < fcfs.requests.first_token_s.iloc[2]
    assert prio.requests.first_token_s.iloc[2] < prio.requests.first_token_s.iloc[1]


def test_priority_preempts_the_least_urgent_running_request(const_profile):
    # decodes outgrow the cache; under priority the victim is the priority-9 request
    # even though it was admitted first (14 blocks: kv_blocks=15 with vLLM's null block)
    w = _prio([(0.0, 60, 40, 9, "batch"), (0.0, 60, 40, 0, "interactive"),
               (0.0, 60, 40, 0, "interactive")])
    res, s = simulate(w, const_profile, RunConfig(
        kv_blocks=15, prefix_caching=False, knobs=dict(priority_scheduling=True)))
    assert s["preemptions"] > 0
    assert res.requests.preemptions.iloc[0] > 0
    assert res.requests.preemptions.iloc[1:].sum() == 0


def test_class_chunk_cap_and_per_class_metrics(const_profile):
    w = _prio([(0.0, 3000, 4, 0, "batch"), (0.0, 3000, 4, 0, "interactive")])
    res, s = simulate(w, const_profile, RunConfig(
        chunk=4096, knobs=dict(class_chunk_caps=(("interactive", 256),)),
        slos_s={"ttft": 10.0}, class_slos_s={"interactive": {"ttft": 0.05}}))
    # batch takes 3000 in one step, interactive 256 per step: 12 steps of prefill
    assert s["by_class"]["batch"]["mean_ttft_ms"] == pytest.approx(10.0)
    assert s["by_class"]["interactive"]["mean_ttft_ms"] == pytest.approx(120.0)
    assert s["by_class"]["interactive"]["request_goodput"] == 0.0
    assert s["by_class"]["batch"]["request_goodput"] > 0.0
    assert s["by_class"]["batch"]["completed"] == 1
    assert len(res.itl_by_class_s["batch"]) == 3


def test_class_slo_for_an_unknown_class_is_refused(const_profile):
    w = _prio([(0.0, 30, 4, 0, "a"), (0.0, 30, 4, 0, "b")])
    with pytest.raises(ValueError, match="lacks"):
        simulate(w, const_profile, RunConfig(class_slos_s={"zzz": {"ttft": 1.0}}))


def test_mooncake_sample_hit_rate_tracks_its_block_reuse():
    """With a cache that never runs short, the token hit rate is the trace's block reuse
    up to the partial last block and the recomputed last token."""
    from chunksim.latency.profile import load_profile
    from chunksim.workloads import describe_workload, load_trace, sample_path

    w = load_trace(sample_path("mooncake-synthetic"))
    _, s = simulate(w, load_profile(), RunConfig(chunk=2048))
    reuse = describe_workload(w)["prefix_reuse_fraction"]
    assert 0 < reuse < 1
    assert s["prefix_cache_hit_rate"] == pytest.approx(reuse, abs=0.02)
    assert s["prefix_cache_hit_rate"] > 0.02

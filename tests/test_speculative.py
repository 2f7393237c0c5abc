"""Speculative decoding as vLLM V1 schedules it (`core.speculative`).

Closed forms on long runs, the step cost of a verify query by hand, byte-identity with the
feature off, vLLM's accounting on the schedule log (budget and KV slots taken by drafts,
their release on rejection, drafts crowding out a prefill), the policy alone on a hand-built
state, metrics as `vllm bench serve` reports them, and bad input.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from factories import (
    decoding_request,
    kv_cache,
    make_profile,
    request_spec,
    scheduler_state,
    waiting_request,
    workload,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.core.plan import Plan, SchedulerState
from chunksim.core.speculative import Acceptance, SpecConfig
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


def spec(method: str = "ngram", k: int = 3, a: float | None = None, rates=(), **kw):
    return SpecConfig(method, k, a, tuple(rates), **kw)


def cfg(sp: SpecConfig | None = None, chunk: int = 2048, policy: str = "budget",
        kv_blocks: int = 4000, **engine) -> RunConfig:
    return RunConfig(policy=policy, chunk=chunk, kv_blocks=kv_blocks, prefix_caching=False,
                     engine=EngineConfig(speculative=sp or SpecConfig(), **engine))


def run(profile, reqs, sp=None, schedule_log=True, **kw):
    res, summary = simulate(workload(reqs), profile, cfg(sp, **kw), schedule_log=schedule_log)
    return res, summary


def moments(rates) -> tuple[float, float]:
    """Mean and variance of the tokens a decode with len(rates) drafts emits, where
    P(at least i accepted) = rates[i-1]: E = 1 + sum r_i, E[M^2] = sum (2i - 1) r_i."""
    m1 = sum(rates)
    m2 = sum((2 * i - 1) * r for i, r in enumerate(rates, 1))
    return 1.0 + m1, m2 - m1 * m1


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("rate, k", [(0.44, 4), (0.8, 3), (0.5, 5), (0.3, 1), (1.0, 4),
                                     (0.0, 2)])
def test_vllms_acceptance_rate_comes_back_out_with_its_acceptance_length(const_profile,
                                                                         rate, k):
    # vLLM's acceptance rate R (accepted / drafted tokens) fed in at k drafts: the run
    # reports R back, and the acceptance length 1 + k R, within sampling error. 8
    # requests of 2,000 output tokens: ~ 8 x 2000 / (1 + k R) verified decodes.
    reqs = [(0.0, 32, 2000)] * 8
    sp = spec("ngram", k, rate)
    _, s = run(const_profile, reqs, sp, schedule_log=False)
    want = 1.0 + k * rate
    mean, var = moments(sp.position_rates)
    assert mean == pytest.approx(want, rel=1e-12)  # the conversion holds exactly
    n = s["spec_drafts"]
    assert n > 2000
    assert s["spec_draft_tokens"] == k * n  # every decode verified all k drafts
    sigma = math.sqrt(var / n)
    assert abs(s["spec_mean_acceptance_length"] - want) <= 4 * sigma + 1e-12
    # accepted / drafted = (length - 1) / k: the same draws, the same error over k
    assert s["spec_acceptance_rate"] == pytest.approx(s["spec_accepted_tokens"] / (k * n))
    assert abs(s["spec_acceptance_rate"] - rate) <= 4 * sigma / k + 1e-12


def test_the_issue_case_44_percent_at_k4_is_an_acceptance_length_of_2_76():
    # read as a per-draft probability, 0.44 gave 1 + .44 + .44^2 + .44^3 + .44^4 = 1.74
    sp = SpecConfig("eagle", 4, 0.44)
    assert sp.mean_tokens_per_step == pytest.approx(2.76, rel=1e-12)
    a = sp.per_draft_probability
    assert (a + a**2 + a**3 + a**4) / 4 == pytest.approx(0.44, rel=1e-12)
    assert sp.position_rates == pytest.approx((a, a**2, a**3, a**4), rel=1e-12)
    assert SpecConfig("eagle", 1, 0.44).position_rates == (0.44,)  # k = 1: a = R


@pytest.mark.parametrize("text, value", [("44%", 0.44), ("0.44", 0.44), ("100%", 1.0),
                                         ("0", 0.0)])
def test_the_rate_is_taken_as_vllm_prints_it(text, value):
    from chunksim.core.speculative import _rate, _rates

    assert _rate(text) == pytest.approx(value, rel=1e-12)
    assert _rates(f"80%,{text}") == pytest.approx((0.8, value), rel=1e-12)
    with pytest.raises(ValueError, match="a fraction in .0, 1. or a percentage with %"):
        _rate("44")


def test_vllm_per_position_rates_are_reproduced(layered_profile):
    rates = (0.9, 0.6, 0.45, 0.2)
    reqs = [(0.0, 32, 2000)] * 8
    _, s = run(layered_profile, reqs, spec("eagle", None, rates=rates), schedule_log=False)
    assert s["speculative"]["num_speculative_tokens"] == 4  # defaults to the list's length
    n = s["spec_drafts"]
    for got, r in zip(s["spec_position_acceptance"], rates, strict=True):
        assert abs(got - r) <= 4 * math.sqrt(r * (1 - r) / n)
    mean, var = moments(rates)
    assert abs(s["spec_mean_acceptance_length"] - mean) <= 4 * math.sqrt(var / n)


def test_acceptance_draws_are_exact_position_rates():
    # the count accepted is #{i : u < r_i}: P(count >= i) = r_i exactly, drawn from a stream
    # of uniforms (checked against the same stream by hand)
    rates = (0.7, 0.5, 0.1)
    acc = Acceptance(rates, [1, 2])
    got = [acc.draw(3) for _ in range(50)]
    u = np.random.default_rng([1, 2]).random(4096)[:50]
    assert got == [sum(x < r for r in rates) for x in u]
    # fewer drafts scheduled (the budget cut them): the count never exceeds them
    assert all(acc.draw(1) <= 1 for _ in range(100))


def test_zero_acceptance_emits_one_token_per_step_priced_as_the_whole_query(tmp_path):
    # a = 0: every step emits one token and costs the (k + 1)-token query, here priced as
    # k + 1 decode rows at contexts c .. c + k on a table linear in each key (exact), plus
    # the eagle head: k passes of one layer's share (1/4) of a 1-decode step at that mean
    layers, k, prompt, out = 4, 3, 40, 30
    prof = make_profile(tmp_path, provenance={"model": {"name": "x", "n_layers": layers}})
    res, s = run(prof, [(0.0, prompt, out)], spec("eagle", k, 0.0))
    steps = res.steps
    assert len(steps) == out  # one prompt step, then one token per step
    dec = steps.iloc[1:]
    assert (dec.tokens_emitted == 1).all()
    assert (dec.decodes == k + 1).all()

    def t(d, kv):  # factories.linear_time with no prefill
        return 0.002 + 10e-6 * d + 20e-9 * d * kv

    for j, row in enumerate(dec.itertuples()):
        c = prompt + j  # context before the step
        kv_mean = c + k / 2
        want = t(k + 1, kv_mean) + k * (1 / layers) * t(1, kv_mean)
        assert row.decode_kv_tokens == pytest.approx(kv_mean)
        assert row.duration_s == pytest.approx(want, rel=1e-9)
    assert s["spec_accepted_tokens"] == 0
    assert s["spec_mean_acceptance_length"] == 1.0


def test_ngram_prices_no_drafter_and_draft_model_prices_its_profile(tmp_path):
    prof = make_profile(tmp_path, name="target")
    make_profile(tmp_path, lambda c, p, d, kv: 0.001, name="draft")
    k, prompt = 2, 40
    r_ng, _ = run(prof, [(0.0, prompt, 10)], spec("ngram", k, 0.0))
    r_dm, _ = run(prof, [(0.0, prompt, 10)],
                  spec("draft-model", k, 0.0, draft_profile=str(tmp_path / "draft.csv")))
    # decode steps: the draft model adds k passes of its own 1 ms step (prefill step: + one
    # pass over the prompt chunk as well)
    diff = r_dm.steps.duration_s.to_numpy() - r_ng.steps.duration_s.to_numpy()
    np.testing.assert_allclose(diff[1:], k * 0.001, rtol=1e-9)
    assert diff[0] == pytest.approx((k + 1) * 0.001, rel=1e-9)


# ------------------------------------------------------------------ off = today
def test_k_zero_is_byte_identical_to_no_speculation(linear_profile, tmp_path):
    from chunksim.sim.run import write_outputs

    reqs = [(0.01 * i, 50 + 37 * i % 300, 20 + 13 * i % 90) for i in range(60)]
    outs = []
    for n, sp in enumerate((None, spec("eagle", 0, 0.7))):
        res, s = run(linear_profile, reqs, sp, chunk=256, kv_blocks=300, jitter=True, seed=3)
        write_outputs(tmp_path / str(n), res, s, "csv")
        outs.append({f.name: f.read_bytes() for f in sorted((tmp_path / str(n)).iterdir())})
    assert outs[0] == outs[1]
    assert b"spec_" not in outs[0]["summary.json"]


def test_speculation_steps_one_by_one_and_is_deterministic(layered_profile):
    reqs = [(0.0, 32, 300)] * 4
    a, sa = run(layered_profile, reqs, spec("mtp", 3, 0.6), schedule_log=False)
    b, sb = run(layered_profile, reqs, spec("mtp", 3, 0.6), schedule_log=False,
                fast_forward=False)
    assert a.steps.equals(b.steps) and a.requests.equals(b.requests)
    assert sa["spec_accepted_tokens"] == sb["spec_accepted_tokens"]
    # another seed draws other acceptances
    _, sc = run(layered_profile, reqs, spec("mtp", 3, 0.6), schedule_log=False, seed=1)
    assert sc["spec_accepted_tokens"] != sa["spec_accepted_tokens"]


# ------------------------------------------------------------------ vLLM's accounting
def _rows(log, rid):
    return log[(log.request_id == rid) & (log.kind != "preempted")].reset_index(drop=True)


@pytest.mark.parametrize("method, lookahead", [("ngram", 0), ("eagle", 3)])
def test_drafts_take_budget_and_kv_slots_all_accepted(layered_profile, method, lookahead):
    # a = 1, k = 3: after the 20-token prompt step every step schedules 1 + 3 tokens and
    # keeps all of them; blocks cover computed + scheduled (+ lookahead for eagle)
    k, prompt = 3, 20
    res, _ = run(layered_profile, [(0.0, prompt, 41)], spec(method, k, 1.0))
    rows = _rows(res.schedule, 0)
    assert rows.tokens.iloc[0] == prompt
    dec = rows.iloc[1:]
    assert (dec.kind == "decode").all() and (dec.tokens == k + 1).all()
    assert len(dec) == 10  # 40 more tokens, 4 a step
    c = prompt + 4 * np.arange(len(dec))  # context before each decode: prompt + 4j
    np.testing.assert_array_equal(dec.computed_tokens, c)
    np.testing.assert_array_equal(dec.blocks, -(-(c + k + 1 + lookahead) // BS))
    assert (res.steps.tokens_emitted.iloc[1:] == k + 1).all()


@pytest.mark.parametrize("method, lookahead", [("ngram", 0), ("draft-model", 2)])
def test_rejected_drafts_give_back_computed_tokens_and_slots(tmp_path, const_profile,
                                                             method, lookahead):
    # a = 0, k = 2: each step schedules 3 tokens but computes 1 (num_computed_tokens -=
    # rejected): the next step reuses the rejected slots, so blocks held never exceed what
    # the furthest allocation needed: ceil((c + 3 + lookahead) / 16) with c = prompt + j
    extra = {}
    if method == "draft-model":
        make_profile(tmp_path, lambda c, p, d, kv: 0.001, name="draft")
        extra["draft_profile"] = str(tmp_path / "draft.csv")
    k, prompt, out = 2, 14, 40
    res, _ = run(const_profile, [(0.0, prompt, out)], spec(method, k, 0.0, **extra))
    dec = _rows(res.schedule, 0).iloc[1:]
    assert (dec.tokens == k + 1).all() and len(dec) == out - 1
    c = prompt + np.arange(len(dec))
    np.testing.assert_array_equal(dec.computed_tokens, c)  # advanced by 1 a step
    np.testing.assert_array_equal(dec.blocks, -(-(c + k + 1 + lookahead) // BS))
    # the request's computed-token total counts every verified row (the work done)
    assert res.requests.computed_tokens.iloc[0] == prompt + (k + 1) * (out - 1)


def test_drafts_of_the_decodes_leave_no_room_for_a_prefill(const_profile):
    # budget 8, k = 3, a = 0: two 4-token prompts fill step 0; from then on each decode
    # schedules 1 + 3 tokens, so the two decodes take the whole budget and the prompt that
    # arrived waits until they finish (without drafts it would get 6 tokens in step 1)
    reqs = [(0.0, 4, 20), (0.0, 4, 20), (0.001, 100, 5)]
    res, _ = run(const_profile, reqs, spec("ngram", 3, 0.0), chunk=8)
    log = res.schedule
    first = int(log[log.request_id == 2].step.min())
    before = log[log.step < first]
    per_step = before.groupby("step").tokens.sum()
    assert (per_step == 8).all()
    assert first == 20  # step 0: prompts; steps 1..19: 19 decodes of each; then r2
    assert set(before[before.step >= 1].tokens) == {4}

    plain, _ = run(const_profile, reqs, None, chunk=8)
    got = plain.schedule
    assert got[(got.request_id == 2)].step.min() == 1
    assert got[(got.request_id == 2) & (got.step == 1)].tokens.item() == 6


def test_budget_cuts_the_last_decodes_drafts(const_profile):
    # budget 6, k = 3: the first decode takes 1 + 3, the second only 1 + 1 (vLLM:
    # num_new_tokens = min(num_tokens_with_spec - num_computed_tokens, budget left))
    res, _ = run(const_profile, [(0.0, 3, 10), (0.0, 3, 10)], spec("ngram", 3, 0.0),
                 chunk=6)
    log = res.schedule
    step1 = log[log.step == 1].sort_values("position")
    assert step1.tokens.tolist() == [4, 2]
    assert step1.kind.tolist() == ["decode", "decode"]


# ------------------------------------------------------------------ the policy alone
def test_budget_plan_schedules_drafts_and_reserves_lookahead():
    kv = kv_cache(1000)
    d1 = decoding_request(kv, request_spec(0, 15))  # computed 15, 1 block
    d2 = decoding_request(kv, request_spec(1, 40))
    p = request_spec(2, 300)
    d1.num_spec_tokens = d2.num_spec_tokens = 3
    w = waiting_request(p)
    plan = TokenBudgetPolicy(max_num_batched_tokens=20).plan(
        SchedulerState([d1, d2], [w], kv, False, 0, 3))
    assert plan == Plan(((d1, 4), (d2, 4), (w, 12)), (w,))


def test_budget_plan_preempts_when_drafts_or_lookahead_need_a_block():
    # 3 blocks; two decodes at computed 10 hold one each, one free.
    def state(drafts: int, lookahead: int):
        kv = kv_cache(3)
        d1 = decoding_request(kv, request_spec(0, 10))
        d2 = decoding_request(kv, request_spec(1, 10))
        d1.num_spec_tokens = d2.num_spec_tokens = drafts
        return d1, d2, SchedulerState([d1, d2], [], kv, False, 0, lookahead)

    pol = TokenBudgetPolicy(max_num_batched_tokens=100)
    d1, d2, st = state(0, 0)  # 11 tokens: both fit their block
    assert pol.plan(st) == Plan(((d1, 1), (d2, 1)))
    d1, d2, st = state(3, 0)  # 14 tokens: still one block each
    assert pol.plan(st) == Plan(((d1, 4), (d2, 4)))
    d1, d2, st = state(3, 3)  # 14 + 3 lookahead = 17: a second block each, one is free
    assert pol.plan(st) == Plan(((d1, 4),), (), (d2,))
    d1, d2, st = state(6, 0)  # 17 tokens of drafts alone: the same
    assert pol.plan(st) == Plan(((d1, 7),), (), (d2,))


def test_plan_without_drafts_is_unchanged_by_the_state_field():
    kv = kv_cache(100)
    d1 = decoding_request(kv, request_spec(0, 15))
    a = TokenBudgetPolicy(max_num_batched_tokens=20).plan(scheduler_state(kv, [d1]))
    b = TokenBudgetPolicy(max_num_batched_tokens=20).plan(
        SchedulerState([d1], [], kv, False, 0, 5))  # lookahead only with drafts' method
    assert a == Plan(((d1, 1),))
    assert b == a  # d1 has no drafts; lookahead 5 still fits its one block (15 + 1 + 5)


# ------------------------------------------------------------------ metrics
def test_itl_is_per_chunk_and_tpot_per_token(const_profile):
    # a = 1, k = 3, 10 ms steps: 41 tokens = the prompt step's first token + 10 chunks of
    # 4; ITL: 10 gaps of 10 ms; TPOT: 100 ms / 40 tokens = 2.5 ms
    res, s = run(const_profile, [(0.0, 20, 41)], spec("ngram", 3, 1.0))
    assert len(res.itl_s) == 10
    np.testing.assert_allclose(res.itl_s, 0.010, rtol=1e-9)
    assert s["mean_tpot_ms"] == pytest.approx(2.5, rel=1e-9)
    assert s["mean_itl_ms"] == pytest.approx(10.0, rel=1e-9)
    assert s["spec_mean_acceptance_length"] == 4.0
    assert res.requests.generated_tokens.iloc[0] == 41


def test_tokens_past_max_tokens_are_dropped(const_profile):
    # 10 tokens: first from the prompt, then 4 + 4, then only 1 of the last 4 is kept
    res, s = run(const_profile, [(0.0, 20, 10)], spec("ngram", 3, 1.0))
    assert res.requests.generated_tokens.iloc[0] == 10
    assert res.steps.tokens_emitted.tolist() == [1, 4, 4, 1]
    assert s["spec_accepted_tokens"] == 9  # what the target accepted, as vLLM counts it


def test_fleets_and_pd_decode_instances_speculate(const_profile):
    reqs = [(0.01 * i, 32, 200) for i in range(16)]
    sp = spec("ngram", 2, 0.5)
    w = workload(reqs)
    for fleet in ({"replicas": 2}, {"pd": "1:1"}):
        from chunksim.sim.fleet.config import FleetConfig

        c = RunConfig(policy="budget", chunk=512, kv_blocks=4000, prefix_caching=False,
                      engine=EngineConfig(speculative=sp), fleet=FleetConfig(**fleet))
        res, s = simulate(w, const_profile, c)
        assert s["completed"] == 16
        assert (res.requests.generated_tokens == 200).all()
        # every decode of every engine counted: ~ 16 x 199 / 2 verified decodes
        mean, var = moments(sp.position_rates)  # R = 0.5 at k = 2: a = 0.618...
        n = s["spec_drafts"]
        assert n > 1500
        assert abs(s["spec_mean_acceptance_length"] - mean) <= 4 * math.sqrt(var / n)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kw, msg", [
    (dict(num_speculative_tokens=-1), "must be >= 0"),
    (dict(speculative_method="eagle", num_speculative_tokens=2, spec_acceptance_rate=1.2),
     "must be in [0, 1]"),
    (dict(speculative_method="eagle", num_speculative_tokens=2, spec_acceptance_rate=-0.1),
     "must be in [0, 1]"),
    (dict(speculative_method="eagle", spec_acceptance=(0.5, 1.5)), "must be in [0, 1]"),
    (dict(speculative_method="eagle", spec_acceptance=(0.5, 0.7)), "never increase"),
    (dict(speculative_method="eagle", num_speculative_tokens=2), "needs the acceptance"),
    (dict(num_speculative_tokens=2, spec_acceptance_rate=0.5), "need --speculative-method"),
    (dict(speculative_method="eagle", num_speculative_tokens=3, spec_acceptance=(0.5,)),
     "a rate for each draft position"),
    (dict(speculative_method="draft-model", num_speculative_tokens=2,
          spec_acceptance_rate=0.5), "needs --draft-profile"),
    (dict(speculative_method="ngram", draft_profile="x"), "needs --speculative-method draft"),
    (dict(speculative_method="ngram", num_speculative_tokens=2, spec_acceptance_rate=0.5,
          spec_acceptance=(0.5, 0.2)), "give one"),
    (dict(speculative_method="medusa"), "unknown"),
    (dict(speculative_method="ngram", num_speculative_tokens=2, spec_acceptance_rate=0.5,
          draft_head_layers=2.0), "needs --speculative-method eagle or mtp"),
    (dict(speculative_method="eagle", num_speculative_tokens=2, spec_acceptance_rate=0.5,
          draft_head_layers=-1.0), "must be >= 0"),
])
def test_bad_spec_input_is_refused_with_a_sentence(kw, msg):
    with pytest.raises(ValueError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        SpecConfig(**kw)


@pytest.mark.parametrize("policy", ["whole", "chunk"])
def test_policies_vllm_does_not_speculate_under_are_refused(const_profile, policy):
    with pytest.raises(ValueError, match="token-budget scheduler only"):
        run(const_profile, [(0.0, 20, 5)], spec("ngram", 2, 0.5), policy=policy, chunk=None)


def test_async_scheduling_with_speculation_is_refused():
    with pytest.raises(ValueError, match="async-scheduling"):
        EngineConfig(async_scheduling=True, speculative=spec("ngram", 2, 0.5))


def test_draft_profile_of_another_tokenizer_warns(tmp_path):
    target = make_profile(tmp_path, name="t", provenance={"model": {"name": "a",
                                                                    "vocab_size": 128256}})
    make_profile(tmp_path, name="d", provenance={"model": {"name": "b", "vocab_size": 32000}})
    _, s = run(target, [(0.0, 20, 5)], spec("draft-model", 2, 0.5,
                                             draft_profile=str(tmp_path / "d.csv")))
    assert any("vocab_size 32000" in w and "tokenizer" in w for w in s["warnings"])
    make_profile(tmp_path, name="d2", provenance={"model": {"name": "c",
                                                            "vocab_size": 128256}})
    _, s = run(target, [(0.0, 20, 5)], spec("draft-model", 2, 0.5,
                                             draft_profile=str(tmp_path / "d2.csv")))
    assert not any("tokenizer" in w for w in s["warnings"])


def test_cli_speculates_and_refuses_bad_input_in_one_line():
    from chunksim.cli import app

    r = CliRunner().invoke(app, ["run", "-n", "30", "--speculative-method", "eagle",
                                 "--num-speculative-tokens", "2", "--spec-acceptance",
                                 "0.8,0.5", "--json"])
    assert r.exit_code == 0, r.output
    import json

    s = json.loads(r.output.strip().splitlines()[-1])
    assert s["speculative"]["position_rates"] == [0.8, 0.5]
    assert s["speculative"]["lookahead_tokens"] == 2
    assert 1.0 <= s["spec_mean_acceptance_length"] <= 3.0
    bad = CliRunner().invoke(app, ["run", "-n", "5", "--speculative-method", "eagle",
                                   "--num-speculative-tokens", "2",
                                   "--spec-acceptance-rate", "1.5"])
    assert bad.exit_code != 0
    assert "--spec-acceptance-rate 1.5" in str(bad.exception) + bad.output


# ------------------------------------------------------------------ invariants
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 600), st.integers(1, 80)),
                     min_size=1, max_size=15),
       k=st.integers(1, 5), a=st.floats(0, 1), method=st.sampled_from(["ngram", "eagle"]),
       chunk=st.sampled_from([8, 64, 512]), kv_blocks=st.integers(45, 200),
       caching=st.booleans())
def test_speculation_invariants(layered_profile, reqs, k, a, method, chunk, kv_blocks,
                                caching):
    t, rows = 0.0, []
    for gap, p, o in reqs:
        t += gap
        rows.append((t, p, o))
    c = RunConfig(policy="budget", chunk=chunk, kv_blocks=kv_blocks, prefix_caching=caching,
                  engine=EngineConfig(speculative=spec(method, k, a)))
    res, s = simulate(workload(rows), layered_profile, c, schedule_log=True)
    r, log = res.requests, res.schedule
    done = r[~r.rejected]
    assert s["completed"] + s["rejected"] == len(rows)
    assert (done.generated_tokens == done.output_tokens).all()
    sched = log[log.kind != "preempted"]
    # the budget holds drafts and all; the cache never holds more blocks than it has
    assert (sched.groupby("step").tokens.sum() <= chunk).all()
    assert (res.steps.kv_blocks_used <= kv_blocks).all()
    # a decode schedules at most 1 + k tokens, and tokens emitted never exceed them
    dec = sched[sched.kind == "decode"]
    assert (dec.tokens <= k + 1).all()
    assert int(res.steps.tokens_emitted.sum()) == int(done.generated_tokens.sum())
    assert s["spec_accepted_tokens"] <= s["spec_draft_tokens"]


# ------------------------------------------------------------------ grid axis
def test_grid_axis_runs_each_k_and_labels_it(tmp_path):
    from chunksim.cli import app

    out = tmp_path / "cmp"
    r = CliRunner().invoke(app, [
        "compare", "-n", "60", "--policies", "budget", "--chunks", "512",
        "--num-speculative-tokens", "0,3", "--speculative-method", "ngram",
        "--spec-acceptance-rate", "0.9", "--seeds", "0", "--no-report", "--workers", "1",
        "--out", str(out)])
    assert r.exit_code == 0, r.output
    import pandas as pd

    df = pd.read_csv(out / "comparison.csv")
    assert df.num_speculative_tokens.tolist() == [0, 3]
    assert df.config.tolist() == ["budget 512 · spec 0", "budget 512 · spec 3"]
    # the k = 3 run speculated (fewer steps per token: TPOT falls on this run) and k = 0
    # did not
    assert pd.isna(df.spec_mean_acceptance_length.iloc[0])
    assert df.spec_mean_acceptance_length.iloc[1] > 2.5
    assert df.mean_tpot_ms.iloc[1] < df.mean_tpot_ms.iloc[0]


def test_grid_axis_refuses_policies_that_cannot_speculate():
    from chunksim.sweep.configs import PolicySpec, make_configs

    cfgs = make_configs([PolicySpec("whole"), PolicySpec("budget")], [512], None, [0])
    assert [c.spec_tokens for c in cfgs] == [0, 0]
    with pytest.raises(ValueError, match="--policies whole has no place for draft tokens"):
        make_configs([PolicySpec("whole"), PolicySpec("budget")], [512], None, [0, 2])


def test_grid_axis_values_are_checked_before_running():
    from chunksim.sweep.configs import parse_spec_tokens

    run_cfg = RunConfig(engine=EngineConfig(speculative=SpecConfig("eagle", None, None,
                                                                   (0.8, 0.5))))
    assert run_cfg.engine.speculative.num_speculative_tokens == 2  # the rates' count
    assert parse_spec_tokens("0,2", run_cfg) == [0, 2]
    with pytest.raises(ValueError, match="a rate for each draft position"):
        parse_spec_tokens("0,4", run_cfg)
    with pytest.raises(ValueError, match="must be >= 0"):
        parse_spec_tokens("-1", run_cfg)


def test_drafts_stay_within_max_model_len(const_profile):
    # vLLM: num_new_tokens <= max_model_len - 1 - num_computed_tokens; the drafter proposes
    # no more than that, so the last steps of a request at the cap verify fewer drafts
    mml, prompt, out = 64, 40, 24  # prompt + output = max_model_len
    res, s = run(const_profile, [(0.0, prompt, out)], spec("ngram", 4, 0.0),
                 max_model_len=mml)
    dec = _rows(res.schedule, 0).iloc[1:]
    assert (dec.computed_tokens + dec.tokens <= mml - 1).all()
    assert dec.tokens.iloc[-1] < 5  # cut near the cap
    assert s["completed"] == 1


def test_a_method_without_a_draft_count_is_refused(const_profile):
    # unset k: refused when the engine starts (a grid sets it per configuration first)
    sp = SpecConfig("eagle", None, 0.7)
    assert not sp.enabled
    with pytest.raises(ValueError, match="needs --num-speculative-tokens"):
        run(const_profile, [(0.0, 20, 5)], sp)
    # k = 0 given: off, and the run is today's
    a, _ = run(const_profile, [(0.0, 20, 5)], SpecConfig("eagle", 0, 0.7))
    b, _ = run(const_profile, [(0.0, 20, 5)], None)
    assert a.steps.equals(b.steps)


def test_draft_head_layers_scales_the_head_cost(tmp_path):
    prof = make_profile(tmp_path, provenance={"model": {"name": "x", "n_layers": 4}})
    durs = []
    for head in (None, 2.0):
        res, _ = run(prof, [(0.0, 40, 6)], spec("mtp", 2, 0.0, draft_head_layers=head))
        durs.append(res.steps.duration_s.to_numpy()[1:])
    # decode steps: target + 2 x head/4 x T(1 decode); the head's part doubles with 2 layers
    ng, _ = run(prof, [(0.0, 40, 6)], spec("ngram", 2, 0.0))
    base = ng.steps.duration_s.to_numpy()[1:]
    np.testing.assert_allclose(durs[1] - base, 2 * (durs[0] - base), rtol=1e-9)
    assert (durs[0] > base).all()


def test_console_says_what_each_spec_number_counts(const_profile):
    from chunksim.cli import app

    r = CliRunner().invoke(app, ["run", "-n", "30", "--speculative-method", "ngram",
                                 "--num-speculative-tokens", "4", "--spec-acceptance-rate",
                                 "44%", "--seed", "1"])
    assert r.exit_code == 0, r.output
    line = " ".join(r.output.split())  # (however the console wrapped it)
    got = re.search(r"acceptance rate ([\d.]+)% \(accepted / drafted tokens\), acceptance "
                    r"length ([\d.]+) \(tokens per verified decode: its accepted drafts \+ "
                    r"the token sampled after them\)", line)
    assert got, r.output
    rate, length = float(got.group(1)) / 100, float(got.group(2))
    assert length == pytest.approx(1 + 4 * rate, abs=0.01)  # the bonus token counted once
    assert "accepted tokens per step" not in r.output

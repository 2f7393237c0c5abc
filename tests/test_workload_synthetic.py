"""Synthetic workloads: determinism, arrival-process statistics, clamping, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chunksim.workloads import (
    ArrivalKind,
    ArrivalProcess,
    Constant,
    LogNormal,
    LongPromptConfig,
    Normal,
    SharedPrefixConfig,
    SyntheticConfig,
    Uniform,
    describe_workload,
    generate,
    long_prompt,
    longest_request_id,
    sample_arrivals,
    shared_prefix,
)
from chunksim.workloads.scenarios import LONG_PROMPT_DEFAULT_RATE_PER_S


def _gaps(kind: ArrivalKind, rate: float, n: int, burstiness: float = 1.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = sample_arrivals(ArrivalProcess(kind, rate, burstiness), rng, num_requests=n)
    return np.diff(t)


def test_same_seed_same_workload_and_different_seed_differs():
    cfg = SyntheticConfig(arrivals=ArrivalProcess(ArrivalKind.GAMMA, 3.0, 0.5), num_requests=500)
    assert generate(cfg) == generate(cfg)
    other = generate(SyntheticConfig(arrivals=cfg.arrivals, num_requests=500, seed=1))
    assert other != generate(cfg)


def test_changing_lengths_keeps_arrivals():
    # Separate child streams: one factor can vary while the others stay fixed.
    a = generate(SyntheticConfig(num_requests=100))
    b = generate(SyntheticConfig(num_requests=100, output=Constant(7)))
    assert [r.arrival_s for r in a.requests] == [r.arrival_s for r in b.requests]
    assert [r.prompt_tokens for r in a.requests] == [r.prompt_tokens for r in b.requests]


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_gamma_cv_is_one_over_sqrt_burstiness(burstiness):
    n = 40_000
    gaps = _gaps(ArrivalKind.GAMMA, 5.0, n, burstiness)
    cv = gaps.std() / gaps.mean()
    expected = 1 / math.sqrt(burstiness)
    # The CV estimate's relative error is ~ sqrt((1 + 1.5 cv^2) / n) scale; 5% is > 4 sigma.
    assert cv == pytest.approx(expected, rel=0.05)
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.05)


def test_poisson_rate_and_cv():
    gaps = _gaps(ArrivalKind.POISSON, 8.0, 20_000)
    assert 1 / gaps.mean() == pytest.approx(8.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.04)


def test_fixed_rate_and_burst():
    assert np.allclose(_gaps(ArrivalKind.FIXED_RATE, 4.0, 10), 0.25)
    w = generate(SyntheticConfig(arrivals=ArrivalProcess(ArrivalKind.BURST), num_requests=50))
    assert {r.arrival_s for r in w.requests} == {0.0}


def test_duration_mode_keeps_arrivals_inside_span_at_the_rate():
    w = generate(SyntheticConfig(arrivals=ArrivalProcess(rate_per_s=10.0), duration_s=500.0))
    arrivals = [r.arrival_s for r in w.requests]
    assert arrivals[0] == 0.0 and max(arrivals) < 500.0
    assert len(w) / 500.0 == pytest.approx(10.0, rel=0.05)  # 5000 expected, sd ~71


@pytest.mark.parametrize(
    "dist",
    [
        LogNormal(1155, 1109, 32, 2048),
        Normal(300, 400, 16, 512),
        Uniform(10, 20),
        Constant(77),
    ],
)
def test_lengths_respect_bounds(dist):
    x = dist.sample(20_000, np.random.default_rng(3))
    lo = getattr(dist, "min_tokens", getattr(dist, "tokens", None))
    hi = getattr(dist, "max_tokens", getattr(dist, "tokens", None))
    assert x.dtype == np.int64 and x.min() >= lo and x.max() <= hi


def test_lognormal_matches_mean_and_std_when_barely_clamped():
    x = LogNormal(1155, 1109, 1, 10**7).sample(200_000, np.random.default_rng(0))
    assert x.mean() == pytest.approx(1155, rel=0.02)
    assert x.std() == pytest.approx(1109, rel=0.05)


def test_uniform_hits_both_ends():
    x = Uniform(5, 7).sample(1000, np.random.default_rng(0))
    assert set(x.tolist()) == {5, 6, 7}


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ArrivalProcess(rate_per_s=0.0), "rate_per_s=0.0"),
        (lambda: ArrivalProcess(ArrivalKind.POISSON, 2.0, burstiness=0.5), "gamma"),
        (lambda: ArrivalProcess(ArrivalKind.GAMMA, 2.0, burstiness=-1), "burstiness=-1"),
        (lambda: LogNormal(100, 10, 50, 20), "max_tokens=20 < min_tokens=50"),
        (lambda: LogNormal(-5, 10), "mean_tokens=-5"),
        (lambda: Uniform(0, 5), "min_tokens=0"),
        (lambda: Constant(0), "tokens=0"),
        (lambda: SyntheticConfig(num_requests=5, duration_s=3.0), "drop the other"),
        (lambda: SyntheticConfig(num_requests=0), "num_requests=0"),
        (
            lambda: SyntheticConfig(arrivals=ArrivalProcess(ArrivalKind.BURST), duration_s=5.0),
            "num_requests",
        ),
        (lambda: LongPromptConfig(long_arrival_s=40.0, duration_s=30.0), "long_arrival_s=40"),
        (lambda: SharedPrefixConfig(SyntheticConfig(), share_fraction=1.5), "1.5"),
    ],
)
def test_validation_messages_name_the_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_long_prompt_scenario():
    w = long_prompt()
    rid = longest_request_id(w)
    long_req = w.requests[rid]
    assert long_req.prompt_tokens == 8192 and long_req.output_tokens == 128
    assert long_req.arrival_s == 10.0 and long_req.request_class == "long"
    assert f"id {rid}" in w.notes[0] and w.params["long_request_id"] == rid
    chat = [r for r in w.requests if r.request_class == "chat"]
    assert all(32 <= r.prompt_tokens <= 1024 and 16 <= r.output_tokens <= 512 for r in chat)
    expected = LONG_PROMPT_DEFAULT_RATE_PER_S * 30  # Poisson mean over the 30 s stream
    assert abs(len(chat) - expected) < 5 * expected**0.5
    assert w == long_prompt()
    moved = long_prompt(LongPromptConfig(long_arrival_s=2.5, long_prompt_tokens=4000))
    assert moved.requests[longest_request_id(moved)].arrival_s == 2.5


def test_shared_prefix_hashes_share_system_prompt_blocks():
    cfg = SharedPrefixConfig(SyntheticConfig(num_requests=200), num_prefixes=4, prefix_tokens=64)
    w = shared_prefix(cfg)
    assert w.prefix_block_tokens == 16
    for r in w.requests:
        assert len(r.prefix_hashes) == r.prompt_tokens // 16
    heads = {r.prefix_hashes[:4] for r in w.requests}
    assert len(heads) == 4  # every request shares one of the 4 system prompts
    stats = describe_workload(w)
    assert stats["prefix_reuse_fraction"] > 0
    none_shared = shared_prefix(SharedPrefixConfig(SyntheticConfig(num_requests=50), 4, 64, 0.0))
    assert describe_workload(none_shared)["prefix_reuse_fraction"] == 0.0


def test_describe_workload_numbers():
    w = generate(
        SyntheticConfig(
            arrivals=ArrivalProcess(ArrivalKind.FIXED_RATE, 2.0),
            prompt=Constant(100),
            output=Constant(10),
            num_requests=11,
        )
    )
    s = describe_workload(w)
    assert s["num_requests"] == 11 and s["duration_s"] == pytest.approx(5.0)
    assert s["mean_rate_per_s"] == pytest.approx(11 / 5.0)
    assert s["interarrival_cv"] == pytest.approx(0.0, abs=1e-9)
    assert s["prompt_tokens_p99"] == 100 and s["output_tokens_max"] == 10
    assert s["prefix_reuse_fraction"] is None


def test_twenty_thousand_requests_build_fast():
    import time

    t0 = time.perf_counter()
    w = generate(SyntheticConfig(num_requests=20_000))
    assert len(w) == 20_000
    assert time.perf_counter() - t0 < 1.0


def test_renumbered_sorts_stably_and_reassigns_ids():
    from chunksim.core.spec import RequestSpec, Workload, renumbered

    reqs = [RequestSpec(7, 2.0, 5, 5), RequestSpec(3, 1.0, 6, 6), RequestSpec(9, 1.0, 7, 7)]
    w = Workload("x", renumbered(reqs))
    assert [(r.request_id, r.prompt_tokens) for r in w.requests] == [(0, 6), (1, 7), (2, 5)]

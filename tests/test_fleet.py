"""Fleets: replicas behind a router (`sim run --replicas N --router R`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_properties import POLICIES, build, config
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.spec import RequestSpec, Workload
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.fleet.routers import ROUTERS
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess
from chunksim.workloads.lengths import LogNormal
from chunksim.workloads.synthetic import SyntheticConfig, generate

RUNNER = CliRunner()
STATEFUL = [name for name, cls in ROUTERS.items() if cls.reads_state]


def conversations(w: Workload, k: int = 5) -> Workload:
    """`w` with request i in conversation i mod k (the last one of several has none)."""
    n = len(w.requests)
    return replace(w, requests=tuple(
        replace(s, conversation_id=None if i == n - 1 > 0 else f"c{i % k}")
        for i, s in enumerate(w.requests)))


def fleet(cfg, n=None, router="round-robin", staleness_s=0.0, **kw):
    return replace(cfg, fleet=FleetConfig(replicas=n, router=router,
                                          router_staleness_s=staleness_s, **kw))


# ------------------------------------------------------------------ one replica = one engine
def _trace(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    n = 80
    t = np.cumsum(rng.exponential(0.08, n))
    df = pd.DataFrame({"t": t, "p": rng.integers(20, 1500, n), "o": rng.integers(1, 120, n),
                       "conv": [f"s{i % 7}" for i in range(n)]})
    path = tmp_path / "conv.csv"
    df.to_csv(path, index=False)
    return path


def _outputs(args: list[str], out: Path) -> dict[str, bytes]:
    res = RUNNER.invoke(app, ["run", *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return {f: (out / f).read_bytes()
            for f in ("summary.json", "requests.parquet", "steps.parquet")}


SCENARIOS = {
    "poisson": ["-n", "150", "--rate", "12", "--kv-blocks", "300", "--block-size", "16",
                "--max-num-seqs", "16"],
    "shared-prefix-jitter": ["-w", "shared-prefix", "-n", "120", "--rate", "10", "--jitter"],
}


@pytest.mark.slow  # every router x scenario through the whole CLI output
@pytest.mark.parametrize("router", list(ROUTERS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_one_replica_reproduces_the_lone_engine_byte_for_byte(router, scenario, tmp_path):
    args = list(SCENARIOS[scenario])
    if router == "conversation":
        args = ["--trace", str(_trace(tmp_path)), "--trace-format", "generic",
                "--time-unit", "s", "--time-column", "t", "--prompt-column", "p",
                "--output-column", "o", "--conversation-column", "conv",
                "--kv-blocks", "200", *(["--jitter"] if "jitter" in scenario else [])]
    lone = _outputs(args, tmp_path / "lone")
    extra = ["--router-staleness-ms", "20"] if router in STATEFUL else []
    one = _outputs([*args, "--replicas", "1", "--router", router, *extra], tmp_path / "one")
    assert one == lone
    # the lone run preempted (so the check covered preemption) in the poisson scenario
    if scenario == "poisson" and router != "conversation":
        assert b'"preemptions": 0,' not in lone["summary.json"]


# ------------------------------------------------------------------ conservation
ROUTER_ST = st.sampled_from(list(ROUTERS))


def check_fleet(w, res, s, n, kv_blocks):
    r = res.requests
    assert list(r.request_id) == list(range(len(w)))
    assert s["completed"] + s["rejected"] == len(w)
    done = r[~r.rejected]
    assert (done.generated_tokens == done.output_tokens).all()
    assert done.finish_s.notna().all()
    if n == 1:
        return
    # every request has exactly one replica, and only that replica's steps did its work
    assert set(r.replica) <= set(range(n))
    assert int(res.steps.tokens_emitted.sum()) == int(done.output_tokens.sum())
    assert int(res.steps.prefill_tokens.sum() + res.steps.decodes.sum()) == int(
        r.computed_tokens.sum())
    assert sum(row["requests"] for row in s["replicas"]) == len(w)
    for k in range(n):
        mine = r[r.replica == k]
        steps = res.steps[res.steps.replica == k]
        assert int(steps.tokens_emitted.sum()) == int(mine[~mine.rejected].output_tokens.sum())
        if len(steps):
            assert steps.kv_blocks_used.max() <= kv_blocks
            ends = (steps.start_s + steps.duration_s).to_numpy()
            assert (steps.start_s.to_numpy()[1:] >= ends[:-1] - 1e-12).all()
        assert ((mine.first_scheduled_s >= mine.arrival_s) | mine.rejected).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.floats(0, 0.1), st.integers(1, 3000), st.integers(1, 60)),
                     min_size=1, max_size=30),
       router=ROUTER_ST, n=st.integers(1, 4), kv_blocks=st.integers(40, 300),
       caching=st.booleans(), prefixed=st.booleans(), stale=st.sampled_from([0.0, 0.015]),
       pol=st.sampled_from(POLICIES))
def test_no_request_is_lost_or_served_twice(linear_profile, reqs, router, n, kv_blocks,
                                            caching, prefixed, stale, pol):
    w = conversations(build(reqs, prefixed, priorities=pol[2]))
    stale = stale if router in STATEFUL else 0.0
    cfg = fleet(config(*pol[:2], 256, 4, kv_blocks, caching=caching, priority=pol[2]), n,
                router, stale)
    res, s = simulate(w, linear_profile, cfg)
    check_fleet(w, res, s, n, kv_blocks)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.floats(0, 0.2), st.integers(1, 3000), st.integers(1, 60)),
                     min_size=1, max_size=30),
       router=ROUTER_ST, n=st.integers(2, 4), kv_blocks=st.integers(40, 400),
       jitter=st.booleans(), caching=st.booleans(), prefixed=st.booleans(),
       stale=st.sampled_from([0.0, 0.02]))
@pytest.mark.slow
def test_fleet_fast_forward_changes_nothing(linear_profile, reqs, router, n, kv_blocks, jitter,
                                            caching, prefixed, stale):
    """A replica's bulk decode ends before the next fleet read or arrival: stepping and
    bulk give the same records, routing included."""
    w = conversations(build(reqs, prefixed))
    stale = stale if router in STATEFUL else 0.0
    runs = []
    for ff in (True, False):
        cfg = fleet(config("budget", None, 512, 4, kv_blocks, jitter, ff=ff, caching=caching),
                    n, router, stale)
        runs.append(simulate(w, linear_profile, cfg))
    (a, _), (b, _) = runs
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=1e-12)
    ints = ["replica", "prefill_tokens", "decodes", "tokens_emitted", "kv_blocks_used",
            "running", "waiting", "preempted"]
    pd.testing.assert_frame_equal(a.steps[ints], b.steps[ints])
    np.testing.assert_allclose(a.steps.start_s, b.steps.start_s, rtol=1e-12)
    np.testing.assert_allclose(np.sort(a.itl_s), np.sort(b.itl_s), rtol=1e-9)


def test_fleet_bulk_decode_is_exercised(linear_profile, monkeypatch):
    """The fast-forward property above is not vacuous: replicas run most decode steps in
    bulk, and stop their stretches at the router's reads."""
    from chunksim.sim.engine import fast_forward

    bulk_steps = []
    orig = fast_forward.apply_run

    def counting(core, k, *args, **kw):
        bulk_steps.append(k)
        return orig(core, k, *args, **kw)

    monkeypatch.setattr(fast_forward, "apply_run", counting)
    w = build([(0.0, 100, 400)] * 6 + [(0.5, 100, 50)])
    cfg = config("budget", None, 512, 8, 400)
    res, _ = simulate(w, linear_profile, fleet(cfg, 2, "least-requests"))
    assert sum(bulk_steps) > 0.9 * len(res.steps)
    fast = len(bulk_steps)
    monkeypatch.setattr(fast_forward, "apply_run", orig)
    slow, _ = simulate(w, linear_profile, fleet(replace(cfg, engine=replace(
        cfg.engine, fast_forward=False)), 2, "least-requests"))
    pd.testing.assert_frame_equal(res.requests, slow.requests, rtol=1e-12)
    assert fast >= 3  # broken at the read at 0.5 s and at finishes


# ------------------------------------------------------------------ routers
def test_round_robin_and_least_requests_spread_an_idle_fleet(linear_profile):
    w = build([(1.0, 100, 5)] * 12)  # far apart: every replica idle at each arrival
    for router in ("round-robin", "least-requests", "least-tokens"):
        res, s = simulate(w, linear_profile, fleet(config("budget", None, 512, 4, 400), 3,
                                                   router))
        assert [row["requests"] for row in s["replicas"]] == [4, 4, 4], router
        assert list(res.requests.replica[:6]) == [0, 1, 2, 0, 1, 2]


def test_least_requests_avoids_the_busy_replica(linear_profile):
    # one long request pins replica 0; the short ones that follow go elsewhere
    w = build([(0.0, 3000, 400)] + [(0.01, 50, 2)] * 8)
    res, _ = simulate(w, linear_profile, fleet(config("budget", None, 4096, 8, 400), 2,
                                               "least-requests"))
    assert res.requests.replica[0] == 0
    assert (res.requests.replica[1:] == 1).all()


def test_staleness_makes_the_router_herd(linear_profile):
    """A router seeing load 50 ms old sends a burst to the replica that looked idle."""
    w = build([(0.0, 2000, 200)] + [(0.001, 50, 50)] * 6)
    fresh, _ = simulate(w, linear_profile, fleet(config("budget", None, 4096, 8, 400), 2,
                                                 "least-requests"))
    stale, _ = simulate(w, linear_profile, fleet(config("budget", None, 4096, 8, 400), 2,
                                                 "least-requests", 0.05))
    assert sorted(np.bincount(fresh.requests.replica)) == [3, 4]
    # the burst's six were read at t = 0 (50 ms before), when replica 0 had just taken
    # the long request and replica 1 nothing: all six herd onto replica 1
    assert list(stale.requests.replica) == [0, 1, 1, 1, 1, 1, 1]


def test_prefix_router_follows_the_cache_within_its_load_cap(linear_profile):
    # family A (hash 7) first lands on replica 0; later A requests follow it, up to the cap
    specs = [RequestSpec(0, 0.0, 640, 300, tuple(range(7, 17)))]
    specs += [RequestSpec(i, 0.5 + 0.001 * i, 640, 300, tuple(range(7, 17)))
              for i in range(1, 8)]
    w = Workload("p", tuple(specs), prefix_block_tokens=64)
    res, _ = simulate(w, linear_profile, fleet(config("budget", None, 4096, 16, 4000), 3,
                                               "prefix", prefix_load_cap=2))
    rep = list(res.requests.replica)
    # request 0 still runs at 0.5 s: the cached prefix wins while replica 0's load is
    # within 2 of the idle replicas' (loads 1, 2), then the cap sends the rest elsewhere
    assert rep[:3] == [0, 0, 0]
    assert rep[3] != 0
    assert res.requests.cached_tokens[1:3].min() >= 512


def test_conversation_router_is_sticky(linear_profile):
    w = conversations(build([(0.01, 100, 5)] * 20), k=3)
    res, _ = simulate(w, linear_profile, fleet(config("budget", None, 512, 4, 400), 2,
                                               "conversation"))
    convs = [s.conversation_id for s in w.requests]
    homes = {}
    for c, r in zip(convs, res.requests.replica, strict=True):
        if c is not None:
            assert homes.setdefault(c, r) == r
    assert homes == {"c0": 0, "c1": 1, "c2": 0}


# ------------------------------------------------------------------ random = Poisson split
@pytest.mark.slow
def test_random_routing_splits_a_poisson_stream(linear_profile):
    """Random routing of a Poisson(lam) stream over N identical replicas gives each one a
    Poisson(lam/N) stream, so the fleet's mean TTFT matches one replica at lam/N. The
    reference is 8 seeded single-replica runs at lam/N with the per-replica request count;
    each replica's mean TTFT is an independent draw of the same statistic, so the fleet's
    mean (of 4) and the reference mean (of 8) differ by a normal error of sd
    sigma*sqrt(1/4 + 1/8): tolerance 4 such sd (one false alarm in ~16,000)."""
    lam, n, per = 100.0, 4, 400
    prompt, output = LogNormal(1200, 900, 16, 6000), LogNormal(120, 90, 1, 400)

    def wl(rate, count, seed):
        return generate(SyntheticConfig(arrivals=ArrivalProcess(ArrivalKind.POISSON, rate),
                                        prompt=prompt, output=output, num_requests=count,
                                        seed=seed))

    cfg = config("budget", None, 2048, 64, 20000)
    res, s = simulate(wl(lam, n * per, 1), linear_profile, replace(cfg, engine=replace(
        cfg.engine, seed=5), fleet=FleetConfig(replicas=n, router="random")))
    r = res.requests
    ttft = (r.first_token_s - r.arrival_s).to_numpy()
    per_replica = np.array([ttft[r.replica == k].mean() for k in range(n)])
    ref = np.array([simulate(wl(lam / n, per, 100 + k), linear_profile, cfg)[1]["mean_ttft_ms"]
                    for k in range(8)]) / 1000.0
    sigma = np.std(np.concatenate([ref, per_replica]), ddof=1)
    assert abs(per_replica.mean() - ref.mean()) <= 4 * sigma * np.sqrt(1 / 4 + 1 / 8)
    # the check has teeth: one replica taking the whole stream queues far longer
    whole = simulate(wl(lam, per, 99), linear_profile, cfg)[1]["mean_ttft_ms"] / 1000.0
    assert whole - ref.mean() > 10 * sigma
    # each replica's stream: rate lam/N (count within 4 binomial sd), exponential gaps
    counts = np.bincount(r.replica, minlength=n)
    assert (np.abs(counts - per) <= 4 * np.sqrt(n * per * (1 / n) * (1 - 1 / n))).all()
    for k in range(n):
        gaps = np.diff(r.arrival_s[r.replica == k].to_numpy())
        cv = gaps.std() / gaps.mean()
        assert abs(gaps.mean() * lam / n - 1) < 0.25 and abs(cv - 1) < 0.15


# ------------------------------------------------------------------ outputs
def test_fleet_outputs_carry_the_replica(tmp_path):
    out = _outputs(["-n", "60", "--rate", "30", "--replicas", "3", "--router", "least-tokens"],
                   tmp_path)
    import json

    s = json.loads(out["summary.json"])
    req = pd.read_parquet(tmp_path / "requests.parquet")
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    assert set(req.replica) == set(steps.replica) == {0, 1, 2}
    assert [row["replica"] for row in s["replicas"]] == [0, 1, 2]
    assert sum(row["requests"] for row in s["replicas"]) == 60 == s["completed"]
    assert s["fleet"] == {"replicas": 3, "router": "least-tokens", "router_staleness_ms": 0.0}
    busy = [row["busy_fraction"] for row in s["replicas"]]
    assert s["busy_fraction"] == pytest.approx(np.mean(busy))
    for key in ("p99_ttft_ms", "p99_itl_ms", "preemptions"):
        assert all(key in row for row in s["replicas"])


@pytest.mark.parametrize("args, message", [
    (["--replicas", "0"], "--replicas 0: a fleet needs at least 1 replica"),
    (["--replicas", "2", "--router", "fastest"], "--router 'fastest' is unknown"),
    (["--replicas", "2", "--router", "conversation"], "has no conversation ids"),
    (["--router", "random"], "--router random needs --replicas N or --pd P:D"),
    (["--replicas", "2", "--router-staleness-ms", "5"], "applies to routers that read"),
    (["--pd", "0:2"], "--pd '0:2': give P:D"),
    (["--pd", "2"], "--pd '2': give P:D"),
    (["--replicas", "2", "--kv-link", "ib-400g"], "only apply to --pd"),
    (["--replicas", "2", "--pd", "1:1"], "both size the fleet"),
    (["--pd", "1:1", "--decode-router", "nearest"], "--decode-router 'nearest' is unknown"),
    (["--pd", "1:1", "--kv-link", "carrier-pigeon"], "--kv-link 'carrier-pigeon' is unknown"),
    (["--pd", "1:1", "--kv-link-gbps", "0"], "--kv-link-gbps 0.0: must be"),
])
def test_bad_fleet_input_gets_a_clear_error(args, message):
    res = RUNNER.invoke(app, ["run", "-n", "5", *args])
    assert isinstance(res.exception, ValueError) and message in str(res.exception), res.output


# ------------------------------------------------------------------ P/D disaggregation
def test_a_lone_request_under_pd_pays_its_prefill_transfer_and_one_step_to_ttft(
        linear_profile):
    from chunksim.core.shape import StepShape
    from chunksim.latency.model import LatencyModel

    prompt = 3000
    w = build([(0.25, prompt, 4)])
    cfg = replace(config("budget", None, 1024, 4, 1000), fleet=FleetConfig(
        pd="1:1", kv_link="ib-400g"))
    res, s = simulate(w, linear_profile, cfg)
    r = res.requests.iloc[0]
    pre = res.steps[res.steps.replica == 0]
    dec = res.steps[res.steps.replica == 1]
    # its prefill steps (3 chunks of <= 1024 tokens), back to back from its arrival
    assert list(pre.prefill_tokens) == [1024, 1024, 952]
    assert pre.start_s.iloc[0] == r.arrival_s
    prefill_end = pre.start_s.iloc[-1] + pre.duration_s.iloc[-1]
    # the transfer: prompt KV bytes over 400 Gb/s plus 5 us
    transfer = r.kv_transfer_s
    assert transfer == pytest.approx(prompt * 2048 / (400e9 / 8) + 5e-6, rel=1e-12)
    assert r.kv_bytes == prompt * 2048
    assert s["kv_transfer"]["transfers"] == 1
    assert s["kv_transfer"]["kv_bytes_moved"] == prompt * 2048
    # the decode instance starts the moment the KV lands; its first step computes the
    # prompt's last token (vLLM recomputes it), a decode row, and samples the first token:
    # TTFT ends there; then one decode a token. Each step is priced as the profile prices
    # one decode at its context.
    lat = LatencyModel(linear_profile)
    one_decode = [sum(lat.step_s(b, None)[0] for b in StepShape(
        0, 0, 0.0, 1, float(prompt - 1 + j), False).batch_shapes()) + lat.overhead(1)
        for j in range(4)]
    first = dec.iloc[0]
    assert first.start_s == prefill_end + transfer
    assert list(dec.decodes) == [1, 1, 1, 1] and dec.prefill_tokens.sum() == 0
    assert list(dec.tokens_emitted) == [1, 1, 1, 1]
    assert list(dec.duration_s) == pytest.approx(one_decode, rel=1e-12)
    assert r.first_token_s == first.start_s + first.duration_s
    assert s["p99_ttft_ms"] == pytest.approx((r.first_token_s - r.arrival_s) * 1000.0)
    assert np.sort(res.itl_s) == pytest.approx(np.sort(one_decode[1:]), rel=1e-12)
    assert (r.generated_tokens, r.prefill_replica, r.decode_replica) == (4, 0, 0)
    # the prompt's last token is computed twice: by the prefill and by the decode instance
    assert r.computed_tokens == prompt + 1 + 3


PD_ST = st.sampled_from(["1:1", "1:2", "2:1", "2:3"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# found exploring: a request that fits the prefill instance but no decode instance was
# prefilled, then dropped; it is now refused on arrival
@example(reqs=[(0.0, 582, 60)], pd_="1:1", router="round-robin", drouter="round-robin",
         kv_blocks=40, caching=False, prefixed=False, link="nvlink")
@example(reqs=[(0.0, 641, 1)], pd_="1:1", router="round-robin", drouter="round-robin",
         kv_blocks=40, caching=False, prefixed=False, link="nvlink")
@given(reqs=st.lists(st.tuples(st.floats(0, 0.1), st.integers(1, 3000), st.integers(1, 60)),
                     min_size=1, max_size=30),
       pd_=PD_ST, router=ROUTER_ST, drouter=ROUTER_ST, kv_blocks=st.integers(40, 300),
       caching=st.booleans(), prefixed=st.booleans(), link=st.sampled_from(
           ["nvlink", "pcie-gen5"]))
@pytest.mark.slow
def test_pd_loses_and_repeats_nothing(linear_profile, reqs, pd_, router, drouter, kv_blocks,
                                      caching, prefixed, link):
    w = conversations(build(reqs, prefixed))
    cfg = replace(config("budget", None, 256, 4, kv_blocks, caching=caching),
                  fleet=FleetConfig(pd=pd_, router=router, decode_router=drouter,
                                    kv_link=link))
    res, s = simulate(w, linear_profile, cfg)
    r = res.requests
    p, d = map(int, pd_.split(":"))
    assert s["completed"] + s["rejected"] == len(w)
    done = r[~r.rejected]
    assert (done.generated_tokens == done.output_tokens).all()
    # a request leaves its prefill instance iff it wants more than one token
    multi = done.output_tokens > 1
    assert ((done.decode_replica >= 0) == multi).all()
    assert done.prefill_replica.between(0, p - 1).all()
    assert done.decode_replica[multi].between(0, d - 1).all()
    assert (done.kv_bytes[multi] == done.prompt_tokens[multi] * 2048).all()
    # every token computed once per round, by the prefill or the decode instance, but
    # the prompt's last, which a decode instance computes again to sample the first token
    assert (done.computed_tokens + done.cached_tokens
            == done.prompt_tokens + done.output_tokens - 1 + multi
            + done.recomputed_tokens).all()
    # a prefill instance samples one token a request; the decode instance's are the ones
    # the client sees
    assert int(res.steps.tokens_emitted.sum()) == int(done.output_tokens.sum() + multi.sum())
    assert int(res.steps.prefill_tokens.sum() + res.steps.decodes.sum()) == int(
        r.computed_tokens.sum())
    # prefill instances never decode; the first token comes after the transfer lands
    assert res.steps[res.steps.replica < p].decodes.sum() == 0
    assert len(res.itl_s) == int((done.output_tokens - 1).sum())
    ttft = done.first_token_s - done.arrival_s
    assert (ttft[multi] > done.kv_transfer_s[multi]).all()
    assert (res.steps.kv_blocks_used <= kv_blocks).all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.floats(0, 0.2), st.integers(1, 3000), st.integers(1, 60)),
                     min_size=1, max_size=30),
       pd_=PD_ST, drouter=ROUTER_ST, kv_blocks=st.integers(40, 400), jitter=st.booleans(),
       caching=st.booleans())
@pytest.mark.slow
def test_pd_fast_forward_changes_nothing(linear_profile, reqs, pd_, drouter, kv_blocks, jitter,
                                         caching):
    w = conversations(build(reqs))
    runs = []
    for ff in (True, False):
        cfg = replace(config("budget", None, 512, 4, kv_blocks, jitter, ff=ff, caching=caching),
                      fleet=FleetConfig(pd=pd_, router="least-tokens", decode_router=drouter))
        runs.append(simulate(w, linear_profile, cfg)[0])
    a, b = runs
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=1e-12)
    np.testing.assert_allclose(a.steps.start_s, b.steps.start_s, rtol=1e-12)
    pd.testing.assert_frame_equal(a.steps[["replica", "decodes", "prefill_tokens"]],
                                  b.steps[["replica", "decodes", "prefill_tokens"]])


@pytest.mark.slow
@pytest.mark.parametrize("pd_, drouter", [("2:2", "least-tokens"), ("1:3", "round-robin"),
                                          ("1:2", "least-requests")])
@pytest.mark.parametrize("jitter", [False, True])
@pytest.mark.parametrize("seats, kv_blocks", [(48, 1500), (6, 160)])
def test_pd_decode_stretches_take_in_landings_and_change_nothing(
        linear_profile, monkeypatch, pd_, drouter, jitter, seats, kv_blocks):
    """A decode instance's bulk stretch takes in the requests that land while it runs,
    when the policy would admit them all (`fast_forward.BulkDecoder.join_step`): under routers that
    read nothing a segment leaves inexact it does so often, and every record is what
    stepping gives (two request classes, prefix caching with shared prefixes, jitter;
    few seats and KV blocks, where many landings must wait and requests are preempted)."""
    from chunksim.sim.engine import fast_forward

    rng = np.random.default_rng(11)
    n = 240
    w = build([(float(g), int(p), int(o)) for g, p, o in zip(
        rng.exponential(0.002, n), rng.integers(16, 400, n), rng.integers(2, 80, n),
        strict=True)], prefixed=True)
    w = replace(w, requests=tuple(replace(s, request_class="chat" if i % 3 else "batch")
                                  for i, s in enumerate(w.requests)))
    taken = []
    join = fast_forward.BulkDecoder.join_step

    def counting(*args):
        end = yield from join(*args)
        taken.append(end is not None)
        return end

    monkeypatch.setattr(fast_forward.BulkDecoder, "join_step", counting)
    runs = []
    for ff in (True, False):
        cfg = replace(config("budget", None, 512, seats, kv_blocks, jitter, ff=ff),
                      fleet=FleetConfig(pd=pd_, router="least-tokens", decode_router=drouter))
        runs.append(simulate(w, linear_profile, cfg))
    (a, sa), (b, sb) = runs
    assert sum(taken) >= 100 if seats > 8 else sum(taken) < len(taken), taken
    assert sa["completed"] == n
    ints = ["replica", "prefill_tokens", "decodes", "tokens_emitted", "kv_blocks_used",
            "running", "waiting", "preempted", "extrapolated"]
    pd.testing.assert_frame_equal(a.steps[ints], b.steps[ints])
    np.testing.assert_allclose(a.steps.duration_s, b.steps.duration_s, rtol=0, atol=0)
    np.testing.assert_allclose(a.steps.start_s, b.steps.start_s, rtol=1e-12)
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=1e-12)
    np.testing.assert_allclose(np.sort(a.itl_s), np.sort(b.itl_s), rtol=1e-9)
    for cls in ("chat", "batch"):
        np.testing.assert_allclose(np.sort(a.itl_by_class_s[cls]),
                                   np.sort(b.itl_by_class_s[cls]),
                                   rtol=1e-9)


def _counted_tokens(rep) -> int:
    """A replica's outstanding tokens by their definition, counted afresh from every
    request it holds: tokens still to compute, prompt and output, the last sampled token
    aside (a waiting request's computed tokens counted too: none, if the core's sum is
    right), less what a bulk segment in flight has decoded and what the stretch in flight
    has computed that the requests' own counters do not show yet."""
    c = rep.engine.core
    work = 0
    for req in (*c.running, *c.waiting):
        s = req.spec
        work += s.prompt_tokens + s.output_tokens - 1 - req.num_computed_tokens
    for req in c.loading:
        work += req.spec.prompt_tokens + req.spec.output_tokens - 1
    for s in rep.inbox.specs[c.next_arrival:]:
        work += s.prompt_tokens + s.output_tokens - 1
    st = rep.engine.decoder.stretch if rep.engine.decoder is not None else None
    return work - rep.engine.decoded_by() - (st.unsettled() if st is not None else 0)


def _checked_token_sums(mp: pytest.MonkeyPatch) -> dict:
    """Make every `Replica.outstanding_tokens` read (the core's running sums) check its
    value against the tokens counted afresh; counts the reads."""
    from chunksim.sim.fleet.fleet import Replica

    reads = {"n": 0}
    summed = Replica.outstanding_tokens

    def checked(self):
        got = summed(self)
        reads["n"] += 1
        assert got == _counted_tokens(self)
        return got

    mp.setattr(Replica, "outstanding_tokens", checked)
    return reads


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.floats(0, 0.01), st.integers(1, 1500), st.integers(1, 60)),
                     min_size=2, max_size=40),
       n=st.integers(2, 3), kv_blocks=st.integers(30, 200), caching=st.booleans(),
       prefixed=st.booleans(), spec=st.booleans(), pol=st.sampled_from(POLICIES),
       layout=st.sampled_from(["replicas", "pd"]), stale=st.sampled_from([0.0, 0.015]))
@pytest.mark.slow
def test_a_replicas_token_sum_is_the_sum_counted_afresh(
        linear_profile, reqs, n, kv_blocks, caching, prefixed, spec, pol, layout, stale):
    """`Replica.outstanding_tokens` reads the core's running sums: every read, whatever
    happened since the last (steps, preemptions, admissions with prefix hits, pulls,
    deliveries, bulk segments, drafts rejected), equals the sum counted afresh."""
    from chunksim.core.speculative import SpecConfig
    from chunksim.sim.engine.engine import EngineConfig

    cfg = config(*pol[:2], 256, 4, kv_blocks, caching=caching, priority=pol[2])
    if spec and pol[0] in ("budget", "sjf"):
        cfg = replace(cfg, engine=EngineConfig(speculative=SpecConfig(
            speculative_method="ngram", num_speculative_tokens=2, spec_acceptance_rate=0.6)))
    cfg = (fleet(cfg, n, "least-tokens", stale) if layout == "replicas"
           else replace(cfg, fleet=FleetConfig(pd=f"1:{n}", decode_router="least-tokens")))
    with pytest.MonkeyPatch.context() as mp:
        reads = _checked_token_sums(mp)
        simulate(build(reqs, prefixed, priorities=pol[2]), linear_profile, cfg)
    assert reads["n"] >= (len(reqs) if layout == "replicas" else 0)


def test_a_prefix_hit_at_wake_up_changes_the_token_sum_a_router_reads(linear_profile):
    """Request 2 reaches idle replica 0 together with request 3, whose routing reads
    replica 0 before it wakes; its step then admits request 2 with a 64-token prefix hit,
    so request 4, routed during that step, must read the sum less those 64 tokens."""
    shared = (1, 2, 3, 4)
    specs = (RequestSpec(0, 0.0, 64, 1, shared), RequestSpec(1, 0.0, 64, 1, (5, 6, 7, 8)),
             RequestSpec(2, 5.0, 80, 5, (*shared, 9)), RequestSpec(3, 5.0, 16, 5, (10,)),
             RequestSpec(4, 5.0 + 1e-6, 16, 5, (11,)))
    w = Workload("wake", specs, 16)
    with pytest.MonkeyPatch.context() as mp:
        reads = _checked_token_sums(mp)
        res, s = simulate(w, linear_profile, fleet(RunConfig(), 2, "least-tokens"))
    r = res.requests
    assert list(r.replica) == [0, 1, 0, 1, 0] and r.cached_tokens[2] == 64
    assert reads["n"] >= 3


@pytest.mark.slow
def test_token_sums_read_across_bulk_segments_are_exact(linear_profile):
    """Chat traffic on four replicas: reads land mid-stretch, between a stretch's
    segments and after finishes, and each equals the sum counted afresh."""
    w = generate(SyntheticConfig(arrivals=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=40.0),
                                 prompt=LogNormal(600, 500, 1, 4000),
                                 output=LogNormal(120, 90, 1, 600), num_requests=400, seed=2))
    with pytest.MonkeyPatch.context() as mp:
        reads = _checked_token_sums(mp)
        simulate(w, linear_profile, fleet(RunConfig(policy="budget", chunk=2048), 4,
                                          "least-tokens"))
    assert reads["n"] == 4 * 400


@pytest.mark.parametrize("kind", ["offload", "async"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_sums_stay_exact_with_kv_loads_and_async_steps(linear_profile, kind, seed):
    """Requests that wait out a KV load from the CPU tier (out of the queue, holding
    nothing computed), or that finish in a step whose output is processed a step later,
    leave every router read equal to the sum counted afresh."""
    from chunksim.sim.engine.engine import EngineConfig
    from chunksim.sim.engine.offload_config import OffloadConfig

    rng = np.random.default_rng(seed)
    reqs = [(float(rng.exponential(0.004)), int(rng.integers(40, 900)),
             int(rng.integers(1, 40))) for _ in range(60)]
    w = conversations(build(reqs, prefixed=True))
    cfg = config("budget", None, 512, 8, 60)
    if kind == "offload":
        cfg = replace(cfg, offload=OffloadConfig(kv_offload_gib=0.001, kv_offload_link="1"))
    else:
        cfg = replace(cfg, engine=EngineConfig(async_scheduling=True))
    with pytest.MonkeyPatch.context() as mp:
        reads = _checked_token_sums(mp)
        res, s = simulate(w, linear_profile, fleet(cfg, 2, "least-tokens"))
    assert reads["n"] >= len(reqs)
    if kind == "offload":
        assert s["kv_loads"] > 0  # the case the test is for happened


@given(st.lists(st.tuples(st.integers(1, 900), st.integers(1, 50), st.sampled_from("abc"),
                          st.integers(0, 3), st.booleans()), min_size=1, max_size=12))
def test_the_prefill_pools_workload_is_every_request_cut_to_its_first_token(rows):
    """`pd.first_tokens` keeps every column but the output length (1 for all), as
    building each request again with one output token would."""
    from chunksim.sim.fleet.pd import first_tokens

    specs = [RequestSpec(i, 0.5 * i, p, o, tuple(range(i, i + p // 100)) if h else (),
                         cls, prio, f"c{i % 2}" if h else None)
             for i, (p, o, cls, prio, h) in enumerate(rows)]
    w = Workload("w", tuple(specs), prefix_block_tokens=100)
    got = first_tokens(w)
    assert list(got.requests) == [replace(s, output_tokens=1) for s in specs]
    assert (got.name, got.prefix_block_tokens) == (w.name, w.prefix_block_tokens)

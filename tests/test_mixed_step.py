"""The bulk decode carrying on through prefills (`fast_forward.BulkDecoder.mixed_step`): a step in
which the running requests after the stretch's members and the waiting ones get what the
policy plans for them alone (its `plan` with the decodes pinned) must record exactly what stepping
records, under every knob that changes what the tail gets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import make_component_profile

from chunksim.core.spec import RequestSpec, Workload
from chunksim.sim.engine import fast_forward
from chunksim.sim.engine.engine import Engine, EngineConfig
from chunksim.sim.run import RunConfig, simulate

CASES = [
    ("budget", 256, {}),
    ("budget", 512, {"long_prefill_token_threshold": 96}),
    ("budget", 512, {"max_num_partial_prefills": 1, "max_num_seqs": 12}),
    ("budget", 4096, {"enable_chunked_prefill": False}),
    ("budget", 384, {"class_chunk_caps": (("chat", 64),), "priority_scheduling": True}),
    ("sjf", 512, {}),
    ("chunk", 128, {}),
    ("chunk", 200, {"variant": "two-pass", "prefill_budget": 300}),
]


def _counter():
    """([mixed steps run], a `mixed_step` that counts them, the real one)."""
    mixed = [0]
    orig = fast_forward.BulkDecoder.mixed_step

    def counting(*a, **k):
        end = yield from orig(*a, **k)
        mixed[0] += end is not None
        return end

    return mixed, counting, orig


def _workload(seed: int, shared: bool) -> Workload:
    """Poisson arrivals a few steps apart, lognormal-ish lengths, two request classes and
    (with `shared`) prompts opening with one of three shared prefixes."""
    rng = np.random.default_rng(seed)
    t, specs = 0.0, []
    for i in range(120):
        t += float(rng.exponential(0.004))
        p = int(min(3000, rng.lognormal(5.5, 0.9)) + 1)
        o = int(min(120, rng.lognormal(3.0, 0.8)) + 1)
        hashes = ()
        if shared:
            n, fam = -(-p // 16), i % 3
            k = min(n, 6 + 10 * fam)
            hashes = tuple(fam * 1000 + j for j in range(k)) + tuple(
                10**6 + 1000 * i + j for j in range(n - k))
        specs.append(RequestSpec(i, t, p, o, hashes, "chat" if i % 4 else "batch",
                                 priority=(5 * i) % 3))
    return Workload("mixed", tuple(specs), prefix_block_tokens=16 if shared else 0)


@pytest.mark.slow
@pytest.mark.parametrize("policy,chunk,knobs", CASES)
@pytest.mark.parametrize("kv_blocks,jitter,shared", [(4000, False, False), (4000, True, True),
                                                     (700, True, True), (120, True, True)])
def test_mixed_steps_record_what_stepping_records(tmp_path, monkeypatch, policy, chunk,
                                                  knobs, kv_blocks, jitter, shared):
    # a per-step host cost that grows with the requests in the step, as `sim profile`
    # fits it: the step's count of entries prices it
    prof = make_component_profile(tmp_path, spread=1.3, provenance={
        "step_overhead": {"base_s": 2e-4, "per_request_s": 3e-5}})
    w = _workload(len(knobs) + chunk, shared)
    mixed, counting, orig = _counter()
    closed = []  # the engine's running token count and work held, once all is done
    result = Engine.result

    def closing(self):
        closed.append((self.core.running_computed, self.core.work_in))
        return result(self)

    monkeypatch.setattr(Engine, "result", closing)
    runs = []
    for ff in (True, False):
        monkeypatch.setattr(fast_forward.BulkDecoder, "mixed_step", counting if ff else orig)
        cfg = RunConfig(policy=policy, chunk=chunk, knobs=dict(knobs), kv_blocks=kv_blocks,
                        engine=EngineConfig(jitter=jitter, fast_forward=ff, seed=3))
        runs.append(simulate(w, prof, cfg))
    (a, sa), (b, sb) = runs
    # the mixed steps ran, many of them (every prompt's chunks but a stretch's first)
    assert mixed[0] >= 40, mixed[0]
    if kv_blocks == 120:
        # KV runs short: requests are preempted (the policy plans those steps) and come
        # back, and stretches end and start again around them (in all but two cases)
        assert sa["preemptions"] > 0 or (policy, chunk) in (("budget", 256),
                                                             ("budget", 4096))
    assert closed == [(0, 0), (0, 0)]
    assert len(a.steps) == len(b.steps)
    ints = ["prefill_tokens", "prefill_requests", "decodes", "tokens_emitted",
            "kv_blocks_used", "running", "waiting", "preempted", "extrapolated"]
    pd.testing.assert_frame_equal(a.steps[ints], b.steps[ints])
    for col in ("duration_s", "prior_tokens", "decode_kv_tokens"):
        np.testing.assert_array_equal(a.steps[col], b.steps[col])
    np.testing.assert_allclose(a.steps.start_s, b.steps.start_s, rtol=1e-12)
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=1e-12)
    np.testing.assert_array_equal(np.sort(a.itl_s), np.sort(b.itl_s))
    assert a.itl_by_class_s.keys() == b.itl_by_class_s.keys()
    for cls, gaps in a.itl_by_class_s.items():
        np.testing.assert_array_equal(np.sort(gaps), np.sort(b.itl_by_class_s[cls]))
    _same(sa, sb)


def _same(a, b, key: str = "summary") -> None:
    """Summaries equal to the bit (NaN equal to NaN), nested dicts (per class) key by
    key: the moments sum the sorted gaps, however a run pooled them."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), key
        for k in a:
            _same(a[k], b[k], f"{key}.{k}")
    elif isinstance(a, float) and a != a:
        assert isinstance(b, float) and b != b, key
    else:
        assert a == b, key


@pytest.mark.slow
@pytest.mark.parametrize("router", ["least-requests", "least-tokens", "prefix", "round-robin"])
@pytest.mark.parametrize("policy,chunk,knobs", [CASES[1], CASES[6]])
def test_fleet_replicas_mix_as_stepping_does(tmp_path, monkeypatch, router, policy, chunk,
                                             knobs):
    """A fleet replica read live carries its stretch through prefills too: every record,
    routing included, as stepping gives (its mixed step waits out its time between its
    admissions and its tokens, as a step does)."""
    from chunksim.sim.fleet.config import FleetConfig
    from chunksim.sim.fleet.routers import ROUTERS

    prof = make_component_profile(tmp_path, spread=1.3, provenance={
        "step_overhead": {"base_s": 2e-4, "per_request_s": 3e-5}})
    w = _workload(7, shared=True)
    mixed, counting, orig = _counter()
    runs = []
    for ff in (True, False):
        monkeypatch.setattr(fast_forward.BulkDecoder, "mixed_step", counting if ff else orig)
        cfg = RunConfig(policy=policy, chunk=chunk, knobs=dict(knobs), kv_blocks=1500,
                        engine=EngineConfig(jitter=True, fast_forward=ff, seed=5),
                        fleet=FleetConfig(replicas=3, router=router))
        runs.append(simulate(w, prof, cfg))
    (a, sa), (b, sb) = runs
    # replicas read live mix; under a router that reads each replica only between its
    # stretches, or reads nothing, a replica's stretch ends at each read or delivery
    live = ROUTERS[router].reads_state and ROUTERS[router].reads_mid_stretch
    assert mixed[0] >= 20 if live else mixed[0] == 0, mixed[0]
    pd.testing.assert_frame_equal(a.requests, b.requests, rtol=1e-12)
    ints = ["replica", "prefill_tokens", "decodes", "tokens_emitted", "kv_blocks_used",
            "running", "waiting", "preempted"]
    pd.testing.assert_frame_equal(a.steps[ints], b.steps[ints])
    np.testing.assert_array_equal(a.steps.duration_s, b.steps.duration_s)
    np.testing.assert_allclose(a.steps.start_s, b.steps.start_s, rtol=1e-12)
    np.testing.assert_array_equal(np.sort(a.itl_s), np.sort(b.itl_s))
    _same(sa, sb)

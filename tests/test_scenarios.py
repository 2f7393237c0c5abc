"""The seed question on the shipped profile: what one long prompt does under each policy,
and what a stream of long prompts does to P99 ITL."""

import math
import os

import pytest
from scenario_checks import long_prompt_effect

from chunksim.latency.profile import load_profile
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads import longest_request_id
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess
from chunksim.workloads.lengths import LogNormal
from chunksim.workloads.scenarios import LongPromptConfig, long_prompt
from chunksim.workloads.synthetic import SyntheticConfig, generate

CONFIGS = {"whole": ("whole", None), "chunk 512": ("chunk", 512), "budget 512": ("budget", 512)}


@pytest.fixture(scope="module")
def shipped():
    return load_profile(os.environ.get("CHUNKSIM_TEST_PROFILE"))


def run_all(profile, workload):
    return {name: simulate(workload, profile,
                           RunConfig(policy=pol, chunk=chunk))
            for name, (pol, chunk) in CONFIGS.items()}


def test_one_long_prompt_stalls_decodes_under_whole_prefill(shipped):
    w = long_prompt(LongPromptConfig())
    long_id = longest_request_id(w)
    runs = run_all(shipped, w)
    eff = {n: long_prompt_effect(res.requests, long_id) for n, (res, _) in runs.items()}
    for n, (_, s) in runs.items():  # every figure of the comparison is a real latency
        assert s["completed"] == len(w.requests), n
        for value in (s["p99_itl_ms"], s["max_decode_stall_ms"],
                      eff[n]["victim_max_itl_ms_mean"], eff[n]["long_ttft_ms"]):
            assert math.isfinite(value) and value > 0, n
    whole = eff["whole"]
    assert whole["victims"] >= 1  # the long prompt lands on running decodes
    for n in ("chunk 512", "budget 512"):
        # the decodes in flight stall for the whole 8K prefill under `whole` only ...
        assert eff[n]["victim_max_itl_ms_mean"] < whole["victim_max_itl_ms_mean"] / 3
        assert runs[n][1]["max_decode_stall_ms"] < runs["whole"][1]["max_decode_stall_ms"] / 3
        # ... and chunking pays for it with the long prompt's own TTFT
        assert eff[n]["long_ttft_ms"] > whole["long_ttft_ms"]


def test_a_stream_of_long_prompts_moves_p99_itl(shipped):
    # arXiv-summarization-like prompts (mean ~2.6K tokens) at 5 req/s: every prefill stalls
    # the decodes, often enough (> 1 % of gaps) for P99 ITL to see it
    w = generate(SyntheticConfig(
        arrivals=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=5.0),
        prompt=LogNormal(2600, 900, 256, 4096), output=LogNormal(200, 100, 16, 512),
        num_requests=300, seed=1))
    runs = run_all(shipped, w)
    p99_ttft = {n: s["p99_ttft_ms"] for n, (_, s) in runs.items()}
    assert all(math.isfinite(v) and v > 0 for v in p99_ttft.values()), p99_ttft
    p99 = {n: s["p99_itl_ms"] for n, (_, s) in runs.items()}
    assert p99["budget 512"] < 0.4 * p99["whole"]
    assert p99["chunk 512"] < p99["whole"]

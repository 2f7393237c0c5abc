"""`sim run` never answers confidently and wrongly: a run that completes nothing fails with
its reasons, requests longer than the model's maximum are rejected by default, heavy
extrapolation is warned about, and an absurd jittered step is refused."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from factories import constant_time, make_profile, workload

from chunksim.latency.model import LatencyModel
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.run import RunConfig, simulate

MAX_POSITION = 32768


def _sim(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory):
    """A quick-grid profile measured to 1,024 tokens of context whose spread widens with
    the context, as a real one's does (the widening is what extrapolation blows up)."""
    return make_profile(
        tmp_path_factory.mktemp("quick"), name="mine", chunks=(0, 16, 64, 256, 1024),
        decodes=(0, 1, 4, 16), kvs=(1, 256, 1024), priors=(256, 1024),
        spread_fn=lambda c, p, d, k: 1.1 + 3 * (k + c + p) / 1024,
        provenance={"model": {"name": "synthetic", "max_position": MAX_POSITION}})


# ------------------------------------------------------------------ nothing completes
@pytest.mark.slow
def test_a_run_that_rejects_everything_fails_with_its_reasons(tmp_path):
    # --kv-blocks 2: one block holds KV (the other is vLLM's null block)
    out = tmp_path / "run"
    proc = _sim("run", "--kv-blocks", "2", "-n", "50", "--out", str(out))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "all 50 requests were rejected" in proc.stderr
    assert "--kv-blocks" in proc.stderr
    assert "0.00" not in proc.stdout  # no table of zero latencies
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 0 and summary["rejected"] == 50
    assert summary["rejected_reasons"] == {"kv_blocks": 50}
    assert summary["mean_ttft_ms"] is None and summary["p99_itl_ms"] is None
    assert summary["duration"] is None


@pytest.mark.slow
def test_huge_prompts_are_rejected_by_the_model_length_not_simulated():
    proc = _sim("run", "--workload", "burst", "-n", "3", "--prompt-dist", "constant",
                "--prompt-mean", "1e12", "--output-dist", "constant", "--output-mean", "10")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "all 3 requests were rejected" in proc.stderr
    assert f"--max-model-len {MAX_POSITION}" in proc.stderr  # tiny's max position


def test_rejected_reasons_are_counted_in_the_summary(tmp_path):
    prof = make_profile(tmp_path, constant_time(0.01),
                        provenance={"model": {"name": "m", "max_position": 1000}})
    w = workload([(0.0, 100, 10), (0.1, 5000, 10), (0.2, 995, 10), (0.3, 100, 10)])
    res, s = simulate(w, prof, RunConfig(kv_blocks=41))  # 40 x 16 = 640 tokens of KV + null
    assert s["max_model_len"] == 1000
    assert s["rejected"] == 2 and s["completed"] == 2
    assert s["rejected_reasons"] == {"max_model_len": 2}
    assert "max_model_len 1000" in res.requests.reject_reason.iloc[1]
    # an explicit --max-model-len wins over the profile's; KV is then what refuses
    _, s = simulate(w, prof, RunConfig(kv_blocks=41, engine=EngineConfig(max_model_len=10**6)))
    assert s["max_model_len"] == 10**6
    assert s["rejected_reasons"] == {"kv_blocks": 2}
    # a profile that does not say its model's length caps nothing
    plain = make_profile(tmp_path, constant_time(0.01), name="plain")
    _, s = simulate(w, plain, RunConfig())
    assert s["max_model_len"] is None and s["rejected"] == 0 and s["rejected_reasons"] == {}


def test_a_prompt_beyond_the_models_maximum_is_rejected_by_default():
    proc = _sim("run", "--workload", "burst", "-n", "2", "--prompt-dist", "constant",
                "--prompt-mean", "100000", "--output-dist", "constant", "--output-mean", "10")
    assert proc.returncode != 0
    assert "max_model_len" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ extrapolation
@pytest.mark.slow
def test_heavy_extrapolation_is_warned_naming_the_axis_and_its_range(quick_profile):
    args = ["run", "--profile", quick_profile.path, "--workload", "burst", "-n", "2",
            "--prompt-dist", "constant", "--prompt-mean", "12000", "--output-dist",
            "constant", "--output-mean", "200", "--seed", "1"]
    proc = _sim(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    share = summary["extrapolated_steps"] / summary["steps"]
    assert share > 0.05
    assert len(summary["warnings"]) == 1
    warning = summary["warnings"][0]
    assert f"{share:.0%}" in warning
    assert "kv_len" in warning and "1–1,024" in warning  # the axis and what it covers
    assert "warning:" in proc.stderr and "kv_len" in proc.stderr


def test_no_warning_below_the_threshold(linear_profile):
    w = workload([(0.0, 100, 20), (0.5, 200, 20)])
    _, s = simulate(w, linear_profile, RunConfig())
    assert s["extrapolated_steps"] == 0 and s["warnings"] == []


def test_extrapolation_warning_counts_each_axis():
    import pandas as pd

    from chunksim.latency.coverage import extrapolation_warnings
    from chunksim.sim.records.records import StepTotals

    ranges = {"chunk_len": (0, 1024), "prior_len": (0, 1024), "decode_count": (0, 16),
              "kv_len": (1, 1024)}
    steps = StepTotals.of(pd.DataFrame({
        "start_s": [0.0, 1.0, 2.0, 3.0, 4.0], "duration_s": [0.5] * 5,
        "kv_blocks_used": [1] * 5,
        "prefill_tokens": [0, 0, 0, 2048, 0], "prior_tokens": [0, 0, 0, 0, 0],
        "decodes": [1, 1, 1, 0, 1], "decode_kv_tokens": [10.0, 5000.0, 6000.0, 0.0, 20.0],
        "extrapolated": [False, True, True, True, False]}), ranges)
    (msg,) = extrapolation_warnings(steps, ranges, threshold=0.05)
    assert "60% of steps (3 of 5)" in msg
    assert "kv_len up to 6,000 in 2 steps" in msg and "chunk_len up to 2,048 in 1 step" in msg
    assert extrapolation_warnings(steps, ranges, threshold=0.7) == []


def test_a_profiles_grid_ranges_are_worked_out_once_per_profile_object(linear_profile):
    from chunksim.latency.coverage import grid_ranges, profile_ranges

    first = profile_ranges(linear_profile)
    assert first == grid_ranges(linear_profile.table)
    first["kv_len"] = (0.0, 0.0)  # a copy: the kept ranges do not change
    assert profile_ranges(linear_profile) == grid_ranges(linear_profile.table)
    assert linear_profile.derived["grid_ranges"] == grid_ranges(linear_profile.table)
    # a changed table is a new profile object, with its own ranges
    table = linear_profile.table.copy()
    table["kv_len"] = table["kv_len"] * 2
    doubled = linear_profile.with_table(table)
    assert profile_ranges(doubled)["kv_len"] == tuple(
        2 * x for x in profile_ranges(linear_profile)["kv_len"])


# ------------------------------------------------------------------ jitter guard
class _ExplodingSpread(LatencyModel):
    """A latency model whose jitter is absurd (a spread extrapolated without bound)."""

    def step_s(self, shape, jitter_z=None):
        t, out = super().step_s(shape, None)
        return (t * math.exp(40.0 * jitter_z) if jitter_z is not None else t), out

    def decode_steps_s(self, decode_count, kv_tokens, jitter_z=None, *spread, **hints):
        t, out = super().decode_steps_s(decode_count, kv_tokens, None, *spread, **hints)
        return (t * np.exp(40.0 * jitter_z) if jitter_z is not None else t), out


@pytest.mark.parametrize("fast_forward", [True, False])
def test_an_absurd_jittered_step_is_refused(linear_profile, monkeypatch, fast_forward):
    import chunksim.sim.build as build_mod

    monkeypatch.setattr(build_mod, "latency_model",
                        lambda profile, overhead_s, *_: _ExplodingSpread(profile, overhead_s))
    w = workload([(0.0, 100, 200), (0.0, 300, 200)])
    cfg = RunConfig(engine=EngineConfig(jitter=True, seed=1, fast_forward=fast_forward))
    with pytest.raises(ValueError, match=r"--jitter: step \d+ .* its median") as exc:
        simulate(w, linear_profile, cfg)
    assert "chunk_len 0–16,384" in str(exc.value)  # names what the profile covers


def test_a_sane_jitter_passes_the_guard(linear_profile):
    w = workload([(0.0, 100, 200), (0.0, 300, 200)])
    cfg = RunConfig(engine=EngineConfig(jitter=True, seed=1))
    _, s = simulate(w, linear_profile, cfg)
    _, calm = simulate(w, linear_profile, replace(cfg, engine=EngineConfig(seed=1)))
    assert s["completed"] == 2 and s["duration"] != calm["duration"]


@pytest.mark.slow
def test_jitter_outside_the_grid_is_never_confident_nonsense(quick_profile):
    args = ["run", "--profile", quick_profile.path, "--workload", "burst", "-n", "2",
            "--prompt-dist", "constant", "--prompt-mean", "12000", "--output-dist",
            "constant", "--output-mean", "200", "--seed", "1", "--json"]
    calm = _sim(*args)
    assert calm.returncode == 0, calm.stderr
    base = json.loads(calm.stdout.strip().splitlines()[-1])["duration"]
    jit = _sim(*args, "--jitter")
    assert "Traceback" not in jit.stderr
    if jit.returncode == 0:  # the spread is held at the grid's edge: a plausible answer
        d = json.loads(jit.stdout.strip().splitlines()[-1])["duration"]
        assert base / 3 < d < base * 3
    else:  # or the run refuses, naming the cause
        assert jit.returncode == 2
        assert "--jitter" in jit.stderr and "kv_len 1–1,024" in jit.stderr



# ------------------------------------------------------------------ the grid commands
@pytest.mark.slow
def test_compare_leaves_a_configuration_that_completed_nothing_out_of_the_report(tmp_path):
    out = tmp_path / "cmp"
    proc = _sim("compare", "-n", "3", "--prompt-dist", "constant", "--prompt-mean", "20000",
                "--output-dist", "constant", "--output-mean", "5", "--policies",
                "budget,whole", "--chunks", "256", "--no-svg", "--workers", "1",
                "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "whole completed no request (all 3 rejected: 3 by policy)" in proc.stderr
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    whole = next(r for r in rows if r["policy"] == "whole")
    assert whole["completed"] == 0 and whole["mean_ttft_ms"] is None
    assert (out / "report.md").is_file()


@pytest.mark.slow
def test_compare_where_every_configuration_rejects_everything_fails(tmp_path):
    proc = _sim("compare", "--kv-blocks", "2", "-n", "5", "--policies", "budget,whole",
                "--chunks", "256", "--no-report", "--workers", "1", "--out",
                str(tmp_path / "c"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no configuration did" in proc.stderr and "kv_blocks" in proc.stderr


def test_a_run_that_completed_nothing_fails_every_slo():
    from chunksim.sweep.slos import meets, violations

    summary = {"completed": 0, "rejected": 7, "p99_itl_ms": None}
    assert not meets(summary, {"p99_itl_ms": 100.0})
    assert violations(summary, {"p99_itl_ms": 100.0}) == ["completed nothing (7 rejected)"]


def test_a_class_that_completed_nothing_prints_dashes_not_zeros(tmp_path):
    from rich.console import Console

    from chunksim.core.spec import RequestSpec, Workload
    from chunksim.reports.console import print_summary

    prof = make_profile(tmp_path, constant_time(0.01),
                        provenance={"model": {"name": "m", "max_position": 1000}})
    reqs = (RequestSpec(0, 0.0, 100, 10, request_class="chat"),
            RequestSpec(1, 0.1, 5000, 10, request_class="batch"))
    _, s = simulate(Workload("two", reqs), prof, RunConfig())
    assert s["by_class"]["batch"]["completed"] == 0
    assert s["by_class"]["batch"]["p99_ttft_ms"] is None
    con = Console(record=True, width=120)
    print_summary(s, con)
    batch = next(ln for ln in con.export_text().splitlines() if ln.startswith("batch"))
    assert "0.0" not in batch and "-" in batch

"""`sim calibrate` and `sim validate --against`: the calibrated latency model's arithmetic,
the optimizers on closed forms, a synthetic ground truth recovered, an ill-posed fit
refused with the sentence, and the commands end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.latency.calibrated import KEY, CalibratedModel, Calibration
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.sim.run import RunConfig, simulate
from chunksim.validate.bench_format import vllm_result
from chunksim.validate.calibrate import (
    _with,
    calibrate,
    gauss_newton,
    parse_fit,
    pattern_search,
    write_calibrated,
)
from chunksim.validate.results import load_results
from chunksim.workloads.options import WorkloadKind, WorkloadOptions, build_workload

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "tiny-cpu-components"
CFG = RunConfig(policy="budget", chunk=512)


# ------------------------------------------------------------------ the calibrated model
@pytest.mark.parametrize("name", ["tiny-cpu", "tiny-cpu-components"])
def test_calibrated_model_scales_each_part(name):
    profile = load_profile(name)
    base = latency_model(profile)
    cal = Calibration(0.002, 1.5, 0.5)
    m = latency_model(_with(profile, cal))
    assert isinstance(m, CalibratedModel) and m.profile_sha256 != base.profile_sha256
    decode = BatchShape(0, 0.0, 8, 300.0)
    prefill = BatchShape(256, 0.0, 0, 0.0)
    mixed = BatchShape(256, 0.0, 8, 300.0)
    assert m.step_s(decode)[0] == pytest.approx(0.5 * base.step_s(decode)[0])
    assert m.step_s(prefill)[0] == pytest.approx(1.5 * base.step_s(prefill)[0])
    tp, t = base.step_s(prefill)[0], base.step_s(mixed)[0]
    assert m.step_s(mixed)[0] == pytest.approx(1.5 * tp + 0.5 * (t - tp))
    assert m.overhead(3) == pytest.approx(base.overhead(3) + 0.002)
    kv = np.asarray([100.0, 200.0, 400.0])
    bulk, _ = m.decode_steps_s(4, kv)
    assert np.allclose(bulk, 0.5 * base.decode_steps_s(4, kv)[0])
    # the identity leaves the base model itself in place
    assert not isinstance(latency_model(_with(profile, Calibration())), CalibratedModel)


def test_calibration_bounds_and_fit_names():
    with pytest.raises(ValueError, match="framework_s"):
        Calibration(-1e-3)
    with pytest.raises(ValueError, match="memory_scale"):
        Calibration(0.0, 1.0, 0.0)
    assert parse_fit("memory, framework") == ("framework", "memory")
    with pytest.raises(ValueError, match="--fit"):
        parse_fit("speed")


# ------------------------------------------------------------------ the optimizers
def test_gauss_newton_solves_a_linear_least_squares():
    A = np.asarray([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5], [2.0, 1.0]])
    truth = np.asarray([0.7, -0.3])
    b = A @ truth
    x, cost, _ = gauss_newton(lambda x: A @ x - b, np.zeros(2), np.full(2, 1e-3),
                              np.full(2, -5.0), iterations=20)
    assert np.allclose(x, truth, atol=1e-6) and cost < 1e-12


def test_pattern_search_follows_a_diagonal_valley():
    def f(x):  # a narrow valley along x0 = x1, minimum at (1, 1)
        return (x[0] - x[1]) ** 2 * 100 + (x[0] + x[1] - 2) ** 2

    v = np.asarray([[1.0, 1.0], [1.0, -1.0]]) / math.sqrt(2)
    x, fx, _ = pattern_search(f, np.zeros(2), v, np.full(2, 0.5), np.full(2, -5.0),
                              np.full(2, 1e-5), max_evals=500)
    assert np.allclose(x, [1.0, 1.0], atol=1e-3) and fx < 1e-6


# ------------------------------------------------------------------ synthetic ground truth
TRUTH = Calibration(framework_s=0.0005, compute_scale=1.2, memory_scale=1.3)


def _made_run(tmp_path, profile, rate, seed, truth=TRUTH, **opts):
    """Simulate on the profile perturbed by `truth` with step noise (--jitter) and write
    the result in vllm bench serve's format; read it back."""
    base = dict(rate=rate, duration_s=20.0, prompt_mean=300, prompt_std=250, prompt_min=32,
                prompt_max=1024, output_mean=128, output_std=96, output_min=16,
                output_max=400, seed=seed)
    base.update(opts)
    cfg = replace(CFG, engine=replace(CFG.engine, jitter=True, seed=3))
    result, _ = simulate(build_workload(WorkloadOptions(**base)), _with(profile, truth), cfg)
    path = tmp_path / f"run{rate}.json"
    path.write_text(json.dumps(vllm_result(result.requests, request_rate=rate)))
    return load_results(path)


@pytest.mark.slow
def test_synthetic_ground_truth_is_recovered(tmp_path):
    """Runs at 2 and 12 req/s are fitted, 7 req/s is held out. Tolerances: the framework
    time within 0.25 ms, the compute scale within 5 %, the memory scale within 12 % (the
    step noise is log-normal: its mean, above its median, is what the memory scale
    absorbs); the held-out mean TTFT, TPOT and E2E within 3 %."""
    profile = load_profile(PROFILE)
    runs = [_made_run(tmp_path, profile, r, i + 1) for i, r in enumerate((2.0, 12.0, 7.0))]
    fit = calibrate(runs, profile, CFG)
    c = fit.calibration
    assert abs(c.framework_s - TRUTH.framework_s) <= 0.25e-3, c
    assert c.compute_scale == pytest.approx(TRUTH.compute_scale, rel=0.05), c
    assert c.memory_scale == pytest.approx(TRUTH.memory_scale, rel=0.12), c
    (before,) = fit.held_out_error_before_pct.values()
    (after,) = fit.held_out_error_after_pct.values()
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"):
        assert abs(before[key]) > 10, before  # uncalibrated, the prediction is far off
        assert abs(after[key]) <= 3.0, after
    assert fit.held_out == ["run2:run7.0.json"] and len(fit.fit_cases) == 2
    assert all(abs(r) < 0.05 for r in fit.residuals)


@pytest.mark.slow
def test_run_that_never_queued_is_refused_for_framework_time(tmp_path):
    """One request at a time, all of one length: every step of a kind costs the same,
    so a fixed cost per step cannot be told from the scales."""
    profile = load_profile(PROFILE)
    run = _made_run(tmp_path, profile, 0.5, 1, workload=WorkloadKind.FIXED_RATE,
                    duration_s=None, num_requests=36, prompt_mean=256, prompt_std=0,
                    prompt_min=256, prompt_max=256, output_mean=24, output_std=0,
                    output_min=24, output_max=24)
    assert run.ttft_s.max() < 0.5  # each finishes long before the next arrives (2 s)
    with pytest.raises(ValueError) as exc:
        calibrate([run], profile, CFG)
    msg = str(exc.value)
    assert "framework time cannot be told apart" in msg and "never queued" in msg
    assert "--fit compute,memory" in msg
    fit = calibrate([run], profile, CFG, fitted=("compute", "memory"))  # what it does tell
    assert fit.calibration.framework_s == 0.0


# ------------------------------------------------------------------ the commands
@pytest.mark.slow
def test_calibrate_command_writes_a_profile_that_applies(tmp_path):
    profile = load_profile(PROFILE)
    files = []
    for i, rate in enumerate((3.0, 10.0)):
        run = _made_run(tmp_path, profile, rate, i + 1, duration_s=12.0)
        files.append(run.path)
    out = tmp_path / "cal.csv"
    res = CliRunner().invoke(app, ["calibrate", "--against", files[0], "--against", files[1],
                                   "--profile", PROFILE, "--policy", "budget", "--chunk",
                                   "512", "--fit", "compute,memory", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "held out, after" in res.output
    prov = json.loads(out.with_suffix(".json").read_text())
    fit = prov["serving_calibration_fit"]
    assert [r["path"] for r in fit["runs"]] == files and fit["held_out"] == [
        f"run1:{Path(files[1]).name}"]
    assert fit["residuals"] and "held_out_error_after_pct" in fit
    cal = Calibration.from_provenance(prov)
    assert cal.framework_s == 0.0 and cal.compute_scale != 1.0
    loaded = load_profile(str(out))
    assert loaded.sha256 == profile.sha256  # the table is the same bytes
    wl = build_workload(WorkloadOptions(rate=5.0, num_requests=30, seed=4))
    _, a = simulate(wl, loaded, CFG)
    _, b = simulate(wl, _with(profile, cal), CFG)
    _, c = simulate(wl, profile, CFG)
    assert a["mean_e2el_ms"] == b["mean_e2el_ms"] != c["mean_e2el_ms"]
    assert a["profile_sha256"] != c["profile_sha256"]
    with pytest.raises(ValueError, match="calibrated already"):
        calibrate([load_results(files[0])], loaded, CFG)
    with pytest.raises(ValueError, match="--out .*is the profile"):
        write_calibrated(loaded, None, [], loaded.path)


@pytest.mark.slow
def test_validate_against_its_own_replay_is_exact(tmp_path):
    """A run the simulator made, replayed under the same settings: every TTFT, TPOT and
    E2E figure matches (ITL does not: the file's gaps are each request's TPOT repeated)."""
    profile = load_profile(PROFILE)
    wl = build_workload(WorkloadOptions(rate=6.0, num_requests=60, seed=2))
    result, _ = simulate(wl, profile, CFG)
    doc = vllm_result(result.requests, request_rate=6.0)
    path = tmp_path / "own.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "v"
    res = CliRunner().invoke(app, ["validate", "--against", str(path), "--profile", PROFILE,
                                   "--policy", "budget", "--chunk", "512", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "P99 TTFT (ms)" in res.output and "requests/s" in res.output
    report = json.loads((out / "validation.json").read_text())
    for m in ("ttft", "tpot", "e2el"):
        for s in ("mean", "median", "p99"):
            assert report["metrics"][f"{s}_{m}_ms"]["error_pct"] == pytest.approx(0, abs=1e-6)
    assert report["metrics"]["request_throughput"]["error_pct"] == pytest.approx(0, abs=1e-6)
    assert report["arrivals"] == "recorded (start_times)" and report["requests"] == 60
    page = (out / "validation.html").read_text()
    assert "validation.png" in page and "P50 TTFT" in page
    assert (out / "validation.png").read_bytes()[:4] == b"\x89PNG"
    assert {p.name for p in out.iterdir()} >= {"measured_requests.csv", "sim_requests.csv"}


def test_validate_against_refuses_workload_flags(tmp_path):
    res = CliRunner().invoke(app, ["validate", "--against", "x.json", "--rate", "3",
                                   "--out", str(tmp_path / "v")])
    assert res.exit_code != 0 and "drop the workload flags" in str(res.exception)


def test_malformed_results_file_is_one_error_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"input_lens": [10, 20], "output_lens": [2, 2],
                               "ttfts": [0.1], "itls": [[0.1], [0.1]], "request_rate": 1.0}))
    proc = subprocess.run([sys.executable, "-m", "chunksim.cli", "validate", "--against",
                           str(bad), "--out", str(tmp_path / "v")], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: results file")
    assert str(bad) in lines[0] and "'ttfts'" in lines[0]


def test_calibration_in_provenance_is_checked(tmp_path):
    profile = load_profile(PROFILE)
    bad = replace(profile, provenance={**profile.provenance, KEY: {"memory_scale": -1}})
    with pytest.raises(ValueError, match="memory_scale"):
        latency_model(bad)


def test_validate_against_refuses_live_loop_flags(tmp_path):
    res = CliRunner().invoke(app, ["validate", "--against", "x.json", "--live-runs", "3",
                                   "--grid", "fine", "--out", str(tmp_path / "v")])
    assert res.exit_code != 0
    assert "--grid, --live-runs" in str(res.exception) and "live loop" in str(res.exception)


def test_validate_against_is_deterministic(tmp_path):
    src = ROOT / "examples" / "data" / "results" / "made_up_low.json"
    outs = []
    for k in range(2):
        out = tmp_path / f"v{k}"
        res = CliRunner().invoke(app, ["validate", "--against", str(src), "--profile",
                                       "llama-3.1-8b-h200", "--no-plot", "--out", str(out)])
        assert res.exit_code == 0, res.output
        outs.append(out)
    for name in ("validation.json", "sim_requests.csv", "measured_requests.csv"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()

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
    assert "framework time cannot be told apart" in msg and "in flight on average" in msg
    assert "add a run at another load" in msg and "higher request rate" not in msg
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


# ------------------------------------------------------------------ saying the true thing
MADE_UP = ROOT / "examples" / "data" / "results"
H200 = "llama-3.1-8b-h200"
CFG_2048 = RunConfig(policy="budget", chunk=2048)


def _doctored(tmp_path, name: str, ttft_factor: float = 1.0, time_factor: float = 1.0) -> str:
    """A made-up run with its TTFTs (and E2Es by the same amount) stretched, or every
    time scaled by `time_factor`: a run the calibration's parameters cannot explain, or
    one faster than the profile prices."""
    doc = json.loads((MADE_UP / f"made_up_{name}.json").read_text())
    extra = [t * (ttft_factor - 1) for t in doc["ttfts"]]
    doc["ttfts"] = [(t + x) * time_factor for t, x in zip(doc["ttfts"], extra, strict=True)]
    doc["latencies"] = [(e + x) * time_factor
                        for e, x in zip(doc["latencies"], extra, strict=True)]
    doc["itls"] = [[g * time_factor for g in gaps] for gaps in doc["itls"]]
    doc["start_times"] = [1000 + (t - 1000) * time_factor for t in doc["start_times"]]
    path = tmp_path / f"{name}_x{ttft_factor:g}_t{time_factor:g}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _split(tmp_path, at: int) -> list[str]:
    """made_up_high.json cut in two files at request `at`, on its own clock."""
    doc = json.loads((MADE_UP / "made_up_high.json").read_text())
    per = [k for k in doc if isinstance(doc[k], list) and len(doc[k]) == len(doc["ttfts"])]
    paths = []
    for part, sl in (("a", slice(None, at)), ("b", slice(at, None))):
        d = dict(doc, **{k: doc[k][sl] for k in per})
        paths.append(tmp_path / f"high_{part}.json")
        paths[-1].write_text(json.dumps(d))
    return [str(p) for p in paths]


def test_a_run_given_twice_is_refused_as_one_run(tmp_path):
    low = load_results(MADE_UP / "made_up_low.json")
    copy = tmp_path / "copy.json"
    copy.write_text((MADE_UP / "made_up_low.json").read_text())
    profile = load_profile(H200)
    with pytest.raises(ValueError, match=r"are one run \(the same file, 80 requests\)"):
        calibrate([low, load_results(MADE_UP / "made_up_low.json")], profile, CFG_2048)
    with pytest.raises(ValueError, match="are one run .the same requests, arrivals and timings"):
        calibrate([low, load_results(copy)], profile, CFG_2048)


def test_a_run_split_in_two_files_is_refused(tmp_path):
    """The later file starts on the earlier one's clock while its requests are in
    flight: the count named is the earlier file's requests still running then."""
    a, b = (load_results(p) for p in _split(tmp_path, 40))
    start_b = b.clock_origin_s
    busy = int(np.sum(a.clock_origin_s + a.arrival_s + a.e2el_s > start_b))
    assert busy >= 1
    with pytest.raises(ValueError, match=rf"run1:high_b.json starts .* after run0:high_a.json "
                                         rf"on the same clock, while {busy} of"):
        calibrate([a, b], load_profile(H200), CFG_2048)
    # separate runs (made up on one clock, but one after the other) are not refused by it
    low, high = (load_results(MADE_UP / f"made_up_{n}.json") for n in ("low", "high"))
    from chunksim.validate.calibrate import check_runs

    check_runs([low, replace(high, clock_origin_s=low.clock_origin_s + 1e4)])


def test_refusal_names_the_run_that_sets_the_parameter_apart():
    """The refusal's per-run shares are the identifiability measure over each run alone:
    recomputed here run by run, the run named 'most' has the larger share."""
    import re

    from chunksim.validate.calibrate import (
        _calibration,
        identifiability,
        measured_stats,
        predicted_stats,
        residuals,
        split_cases,
    )

    runs = [load_results(MADE_UP / f"made_up_{n}.json") for n in ("low", "high")]
    profile = load_profile(H200)
    with pytest.raises(ValueError) as exc:
        calibrate(runs, profile, CFG_2048)
    msg = str(exc.value)
    assert "higher request rate" not in msg and "--fit compute,memory" in msg
    m = re.search(r"of the runs, (\S+) \((.*?)\) sets it apart most \((\d+)%\) and (\S+) "
                  r"\((.*?)\) least \((\d+)%\)", msg)
    assert m, msg
    fit, held = split_cases(runs)
    shares = {}
    for case in fit + held:
        meas = [measured_stats(case)]
        _, summ = predicted_stats(fit[0], profile, CFG_2048, Calibration())
        f_ref = max(float(summ.get("mean_step_ms") or 0.0) / 1e3, 1e-6)
        base = residuals([case], meas, profile, CFG_2048, _calibration(np.zeros(3), PARAMS3,
                                                                       f_ref))
        idf, _ = identifiability([case], meas, profile, CFG_2048, PARAMS3, f_ref, base)
        shares[case.name] = idf["framework"]["unique_share"]
    assert shares[m[1]] >= shares[m[4]]
    assert int(m[3]) == round(100 * shares[m[1]]) and int(m[6]) == round(100 * shares[m[4]])
    assert "req/s" in m[2] and "in flight on average" in m[5]


PARAMS3 = ("framework", "compute", "memory")


def fit_ref_step_ms(runs) -> float:
    """The uncalibrated replay's mean step of the first fitted case (the framework
    time's unit in the fit)."""
    from chunksim.validate.calibrate import predicted_stats, split_cases

    fit, _ = split_cases(runs)
    _, summ = predicted_stats(fit[0], load_profile(H200), CFG_2048, Calibration())
    return float(summ["mean_step_ms"])


def test_a_run_left_far_off_and_a_bound_are_flagged(tmp_path):
    """Held out, a run whose TTFTs are twice the engine's is still far off after the fit;
    runs faster than the profile prices push the framework time to its bound, 0."""
    from chunksim.validate.calibrate import FAR_OFF_PCT

    runs = [load_results(MADE_UP / "made_up_low.json"),
            load_results(MADE_UP / "made_up_high.json"),
            load_results(_doctored(tmp_path, "mid", ttft_factor=2.0))]
    fit = calibrate(runs, load_profile(H200), CFG_2048, fitted=("compute", "memory"))
    (held,) = fit.held_out_error_after_pct.values()
    assert held["mean_ttft_ms"] < -FAR_OFF_PCT
    far = (f"after the fit, run2:mid_x2_t1.json is still {held['mean_ttft_ms']:+.0f} % off "
           "on mean TTFT")
    assert any(w.startswith(far) for w in fit.warnings)
    assert all("p99_ttft_ms" in e for e in fit.held_out_error_after_pct.values())
    fast = [load_results(_doctored(tmp_path, n, time_factor=0.5)) for n in ("low", "high")]
    fit = calibrate(fast, load_profile(H200), CFG_2048, fitted=("framework",))
    ms = fit.calibration.framework_s * 1e3
    assert ms < 0.05 * fit_ref_step_ms(fast)
    assert any(f"framework time ended at its bound: {ms:.3f} ms per step, where 0 is" in w
               for w in fit.warnings)
    assert fit.provenance(fast)["warnings"] == fit.warnings


def test_calibrate_command_flags_and_reports_p99_and_sim_run_says_applied(tmp_path):
    out = tmp_path / "cal.csv"
    args = ["calibrate", "--against", str(MADE_UP / "made_up_low.json"), "--against",
            str(MADE_UP / "made_up_high.json"), "--against",
            _doctored(tmp_path, "mid", ttft_factor=2.0), "--fit", "compute,memory",
            "--profile", H200, "--policy", "budget", "--max-num-batched-tokens", "2048",
            "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "held out P99, after:  run2:mid_x2_t1.json: TTFT" in proc.stdout
    assert "warning: after the fit, run2:mid_x2_t1.json is still" in proc.stderr
    prov = json.loads(out.with_suffix(".json").read_text())
    assert prov["serving_calibration_fit"]["warnings"][0].startswith("after the fit, run2")
    run = subprocess.run([sys.executable, "-m", "chunksim.cli", "run", "-n", "20",
                          "--profile", str(out)], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    cal = Calibration.from_provenance(prov)
    assert run.returncode == 0 and run.stderr.startswith(
        f"note: {out}: calibration applied (sim calibrate): +0.000 ms framework time per "
        f"step, compute x{cal.compute_scale:.3f}, memory x{cal.memory_scale:.3f}; its fit "
        "carries 1 warning(s)")
    plain = subprocess.run([sys.executable, "-m", "chunksim.cli", "run", "-n", "20",
                            "--profile", H200], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
    assert "calibration applied" not in plain.stderr


def test_validate_against_warns_of_another_model_and_says_where_times_were_taken(tmp_path):
    from chunksim.validate.against import validate_against
    from chunksim.validate.match import mismatches, model_tokens

    assert model_tokens("meta-llama/Llama-3.1-8B-Instruct") == {"llama", "3.1", "8b"}
    prov = {"model": {"name": "meta-llama/Meta-Llama-3.1-8B"}, "device_name": "h200_sxm (x)"}
    assert not mismatches(prov, {"model_id": "meta-llama/Llama-3.1-8B-Instruct"}, "p", "r")
    assert mismatches(prov, {"model_id": "meta-llama/Llama-3.1-70B"}, "p", "r")
    (dev,) = mismatches(prov, {"model_id": "llama-3.1-8b", "device": "NVIDIA B200"}, "p", "r")
    assert "timed on H200, but r ran on NVIDIA B200" in dev
    run = load_results(MADE_UP / "made_up_low.json")
    v = validate_against(run, load_profile("tiny-cpu"), CFG_2048)
    (w,) = v.report["warnings"]
    assert "times tiny, but made_up_low.json measured made-up/llama-3.1-8b" in w
    assert v.report["measured_includes"].startswith("client-side time")
    g = tmp_path / "g.csv"
    g.write_text("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,100,4,50,80\n"
                 "1,200,4,60,90\n")
    v = validate_against(load_results(g), load_profile("tiny-cpu"), CFG)
    assert v.report["measured_includes"] is None and not v.report["warnings"]
    from chunksim.reports.against_report import timing

    assert "client" in timing(v.report) and "does not record" in timing(v.report)


def test_cdf_of_a_streamed_sample_draws_from_its_histogram():
    from chunksim.reports.against_report import CDF_POINTS, _quantiles
    from chunksim.sim.records.quantiles import LogHistogram, Samples

    rng = np.random.default_rng(0)
    x = rng.lognormal(-4, 0.5, 50_000)
    h = LogHistogram()
    h.add(x)
    q = _quantiles(Samples(hist=h))
    exact = _quantiles(x)
    assert len(q) == len(exact) == CDF_POINTS and (np.diff(q) >= 0).all()
    assert np.allclose(q[1:-1], exact[1:-1], rtol=2e-3)
    assert np.array_equal(_quantiles(x[:10]), np.sort(x[:10]))  # small: every value

"""`sim validate` on CPU in seconds: a small model run live against a synthetic table."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from factories import SMALL, make_profile, workload
from typer.testing import CliRunner

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

from chunksim.cli import app  # noqa: E402
from chunksim.live.settings import LiveSettings  # noqa: E402
from chunksim.reports.validation_plot import plot_validation  # noqa: E402
from chunksim.sim.run import RunConfig  # noqa: E402
from chunksim.validate.compare import (  # noqa: E402
    TARGET_KEYS,
    after_prefill,
    metric_keys,
    rel_error_pct,
    step_error,
    worst_abs_error,
)
from chunksim.validate.output import write_validation  # noqa: E402
from chunksim.validate.repeat import (  # noqa: E402
    live_repeatability,
    spread_of,
    summarize_spreads,
)
from chunksim.validate.run import validate  # noqa: E402

REPORT_KEYS = {"format", "metrics", "target_keys", "worst_abs_error_pct", "worst_metric",
               "step_error", "step_overhead_s", "step_overhead_source", "live_overhead",
               "live_launch", "counts", "profile", "profile_sha256", "profile_label",
               "profile_step_overhead_s", "live", "policy", "policy_params", "workload",
               "workload_params", "requests", "kv_blocks", "block_size", "max_model_len",
               "prefix_caching", "jitter", "notes", "definitions", "drift_corrected",
               "live_after_prefill", "live_repeatability"}
STEP_ERROR_KEYS = {"steps", "median_pct", "mean_pct", "median_abs_pct", "p90_abs_pct",
                   "p99_pct", "p1_signed_pct", "p99_signed_pct", "by_kind", "sum_pct"}


@pytest.fixture(scope="module")
def small_profile(tmp_path_factory):
    """The linear synthetic table, with provenance naming the small model on 1 CPU thread."""
    return make_profile(tmp_path_factory.mktemp("small"), name="small",
                        provenance={"model": SMALL.as_dict(), "threads": 1, "device": "cpu"})


REQS = [(0.0, 60, 6), (0.01, 130, 4), (0.02, 20, 9), (0.05, 300, 3), (0.06, 45, 5)]


@pytest.mark.slow  # live validation end to end
def test_validation_json_holds_every_key_and_the_files_exist(small_profile, tmp_path):
    cfg = RunConfig(policy="budget", chunk=64, kv_blocks=64)
    v = validate(workload(REQS), small_profile, cfg, replay_steps=30)
    files = write_validation(tmp_path, v, plot=plot_validation)
    assert all(p.is_file() and p.stat().st_size > 0 for p in files)
    assert (tmp_path / "validation.png").read_bytes()[:4] == b"\x89PNG"
    report = json.loads((tmp_path / "validation.json").read_text())
    assert REPORT_KEYS <= set(report)
    assert list(report["metrics"]) == metric_keys()
    for stat in ("mean", "median", "p90", "p99"):
        for m in ("ttft", "itl", "tpot", "e2el"):
            row = report["metrics"][f"{stat}_{m}_ms"]
            assert set(row) == {"predicted", "measured", "error_pct"}
            assert row["error_pct"] == pytest.approx(
                (row["predicted"] - row["measured"]) / row["measured"] * 100)
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert report["metrics"][key]["measured"] > 0
    assert STEP_ERROR_KEYS <= set(report["step_error"])
    d = report["step_error"]["decomposition"]
    assert 0 < d["table_vs_replay"]["steps"] <= 30 and d["profile_drift"]["points"] > 0
    assert (d["table_vs_replay_padded_decode"]["steps"]
            + d["table_vs_replay_unpadded_decode"]["steps"]
            == d["table_vs_replay_decode"]["steps"])
    assert "by_padding" in report["step_error"]
    longest = d["longest_steps"]  # always re-timed: they set the tails
    fwd = v.live.steps["forward_s"].to_numpy()
    assert [x["step"] for x in longest] == list(np.argsort(-fwd, kind="stable")[:5])
    assert all(x["replay_s"] > 0 and x["live_s"] == fwd[x["step"]] for x in longest)
    assert d["drift_factor"] > 0 and report["drift_corrected"]["factor"] == d["drift_factor"]
    assert set(report["drift_corrected"]["metrics"]) == set(metric_keys())
    assert report["step_error"]["steps"] == len(v.live.steps)
    assert report["profile_sha256"] == small_profile.sha256
    assert report["step_overhead_s"] == v.live.meta["step_overhead_s"] > 0
    assert report["live"]["threads"] == 1 and report["prefix_caching"] is False
    assert report["counts"]["completed"] == {"predicted": 5, "measured": 5}
    assert report["live_repeatability"] is None  # one live run
    # the per-request CSVs of both sides line up row for row
    live = pd.read_csv(tmp_path / "live_requests.csv")
    sim = pd.read_csv(tmp_path / "sim_requests.csv")
    assert list(live.columns) == list(sim.columns) and len(live) == len(sim) == len(REQS)
    tokens = pd.read_csv(tmp_path / "live_tokens.csv")
    assert len(tokens) == sum(o for _, _, o in REQS)
    steps = pd.read_csv(tmp_path / "live_steps.csv")
    assert {"forward_s", "overhead_s", "predicted_forward_s", "busy"} <= set(steps.columns)
    assert report["live"]["gpu_clock"] is None  # a CPU run samples no GPU clock
    # on CPU the host does the whole forward pass: issuing it is nearly all of it
    assert (steps["launch_s"] <= steps["forward_s"]).all()
    assert 0.5 < report["live_launch"]["median_share"] <= 1.0
    # a GPU run's steps carry their SM clock; the plot draws it on a second axis
    v.live.steps["sm_clock_mhz"] = np.linspace(345.0, 1980.0, len(v.live.steps))
    assert plot_validation(v, tmp_path / "clock.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # live validation end to end, three live runs
def test_cli_validate_writes_validation_json(small_profile, tmp_path):
    out = tmp_path / "val"
    res = CliRunner().invoke(app, [
        "validate", "--profile", small_profile.path, "--policy", "chunk", "--chunk", "64",
        "--rate", "40", "-n", "8", "--prompt-mean", "80", "--prompt-max", "300",
        "--output-mean", "6", "--output-max", "12", "--kv-blocks", "128", "--no-plot",
        "--replay-steps", "0", "--live-runs", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "validation.json").read_text())
    rep = report["live_repeatability"]  # the first run is the report's; two more served
    assert rep["runs"] == 3 and list(rep["metrics"]) == metric_keys()
    for key, row in rep["metrics"].items():
        first = report["metrics"][key]
        assert len(row["measured"]) == 3 and row["measured"][0] == first["measured"]
        assert row["error_pct_runs"][0] == first["error_pct"]
        lo, hi = min(row["measured"]), max(row["measured"])
        assert row["spread_pct"] == pytest.approx((hi / lo - 1) * 100)
        assert row["predicted_in_range"] == (lo <= first["predicted"] <= hi)
    assert set(rep["targets_in_range"]) == {
        k for k in TARGET_KEYS if rep["metrics"][k]["predicted_in_range"]}
    assert rep["worst_spread_pct"] == max(rep["metrics"][k]["spread_pct"] for k in TARGET_KEYS)
    assert "live run-to-run (3 runs" in res.output
    assert REPORT_KEYS <= set(report) and report["policy"] == "chunk"
    assert report["requests"] == 8 and not (out / "validation.png").exists()
    assert report["drift_corrected"] is None and "decomposition" not in report["step_error"]
    assert "p99_itl_ms" in res.output and "step-level" in res.output
    assert report["notes"] and all(f"note: {n}" in res.output for n in report["notes"])


def test_cli_threads_must_match_the_profile(small_profile, tmp_path):
    res = CliRunner().invoke(app, ["validate", "--profile", small_profile.path, "-n", "2",
                                   "--threads", "2", "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert "differs from the profile's 1 threads" in str(res.exception)


def test_cli_passes_only_when_profiling_on_the_fly(small_profile, tmp_path):
    res = CliRunner().invoke(app, ["validate", "--profile", small_profile.path, "-n", "2",
                                   "--passes", "3", "--out", str(tmp_path / "v")])
    text = " ".join(res.output.replace("│", " ").split())  # rich boxes and wraps it
    assert res.exit_code == 2 and "--passes 3 applies only when profiling on the fly" in text
    assert not (tmp_path / "v").exists()


@pytest.mark.slow  # a live validation run through the CLI
def test_cli_passes_reach_the_on_the_fly_profile(small_profile, tmp_path, monkeypatch):
    import chunksim.validate.profiling as profiling

    seen = {}

    def profile_now(out_csv, **kw):  # the real one takes ~15 s for the quick grid
        seen.update(kw, out_csv=out_csv)
        return small_profile

    monkeypatch.setattr(profiling, "profile_now", profile_now)
    out = tmp_path / "v"
    res = CliRunner().invoke(app, [
        "validate", "--passes", "3", "-n", "2", "--rate", "40", "--prompt-mean", "40",
        "--prompt-max", "80", "--output-mean", "4", "--output-max", "6", "--no-plot",
        "--replay-steps", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert seen["passes"] == 3
    assert seen["out_csv"] == out / "profile.csv" and (out / "validation.json").exists()


def test_settings_come_from_the_profile(small_profile):
    s = LiveSettings.from_profile(small_profile.provenance)
    assert s.model == SMALL and (s.device, s.dtype, s.threads) == ("cpu", "float32", 1)
    with pytest.raises(ValueError, match="lacks the model shape"):
        LiveSettings.from_profile({"model": {"name": "synthetic"}})


def test_relative_errors_and_worst_metric():
    assert rel_error_pct(110.0, 100.0) == pytest.approx(10.0)
    assert rel_error_pct(90.0, 100.0) == pytest.approx(-10.0)
    assert rel_error_pct(1.0, 0.0) is None and rel_error_pct(math.nan, 1.0) is None
    metrics = {k: {"error_pct": e} for k, e in zip(TARGET_KEYS, (1, -7, 3, None, 2, -1),
                                                    strict=True)}
    assert worst_abs_error(metrics) == (TARGET_KEYS[1], 7)


def test_spread_over_runs_by_hand():
    assert spread_of([100.0, 120.0]) == pytest.approx(
        {"spread_pct": 20.0, "pairwise_pct": (20 / 120 * 100 + 20.0) / 2})
    three = spread_of([10.0, 10.0, 15.0])  # pairs: 0, 0, 50, 50, 33.3, 33.3 -> median 33.3
    assert three == pytest.approx({"spread_pct": 50.0, "pairwise_pct": 100 / 3})
    for bad in ([5.0], [5.0, 0.0], [5.0, math.nan]):
        assert spread_of(bad) == {"spread_pct": None, "pairwise_pct": None}
    metrics = {k: {"spread_pct": s} for k, s in zip(TARGET_KEYS, (4, None, 30, 10, 2, 6),
                                                     strict=True)}
    assert summarize_spreads(metrics) == {"median_spread_pct": 6, "worst_spread_pct": 30,
                                          "worst_spread_metric": TARGET_KEYS[2]}
    live = [{k: 10.0 for k in metric_keys()}, {k: 12.0 for k in metric_keys()}]
    rep = live_repeatability(live, {k: 11.0 if "ttft" in k else 13.0 for k in metric_keys()})
    assert rep["targets_in_range"] == ["mean_ttft_ms", "p99_ttft_ms"]
    assert rep["metrics"]["mean_itl_ms"]["error_pct_runs"] == pytest.approx(
        [30.0, 100 / 12])


def test_step_error_is_signed_median_and_p99_of_absolute():
    steps = pd.DataFrame({"forward_s": [1.0, 1.0, 2.0, 4.0], "prefill_tokens": [0, 0, 10, 10],
                          "decodes": [1, 2, 0, 3]})
    pred = np.array([1.1, 0.8, 2.0, 5.0])
    se = step_error(steps, pred)
    assert se["median_pct"] == pytest.approx(5.0)  # median of +10, -20, 0, +25
    assert se["p99_pct"] == pytest.approx(np.percentile([10, 20, 0, 25], 99))
    assert se["by_kind"]["decode_only"]["steps"] == 2
    assert se["by_kind"]["prefill_only"]["median_pct"] == pytest.approx(0.0)
    assert se["by_kind"]["mixed"]["median_pct"] == pytest.approx(25.0)
    assert "by_padding" not in se  # a frame without the live column
    padded = step_error(steps.assign(decode_padding=[1.0, 1.5, 1.0, 3.0]), pred)["by_padding"]
    assert padded["up_to_1.25x"]["steps"] == 1  # the step without decodes is left out
    assert padded["1.25x_to_2x"]["median_pct"] == pytest.approx(-20.0)
    assert padded["over_2x"]["median_pct"] == pytest.approx(25.0)


def test_after_prefill_pairs_each_decode_after_a_prefill_with_the_decodes_after_it():
    # steps: D D D P D' D D D D P D' D D D, every decode step with 2 decodes; D = 1 ms,
    # D' (right after a prefill) = 1.2 then 1.1 ms; the second prefill followed an idle
    # wait, so it is not busy and its D' (1.1) is left out as a wake-up step
    fwd = [1, 1, 1, 5, 1.2, 1, 1, 1, 1, 5, 1.1, 1, 1, 1]
    pre = [0, 0, 0, 64, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0]
    busy = [True] * 14
    busy[9] = False
    steps = pd.DataFrame({"forward_s": np.array(fwd) * 1e-3, "prefill_tokens": pre,
                          "decodes": [2 if p == 0 else 0 for p in pre], "busy": busy,
                          "overhead_s": [3e-4 if i == 4 else 2e-4 for i in range(14)]})
    a = after_prefill(steps)
    assert a["pairs"] == 1 and a["median_ratio"] == pytest.approx(1.2)
    assert a["median_extra_forward_ms"] == pytest.approx(0.2)
    assert a["median_extra_overhead_ms"] == pytest.approx(0.1)
    # controls: decode steps after a decode step with 3 decode steps behind them (step 5 only)
    assert a["control_pairs"] == 1 and a["control_ratio"] == pytest.approx(1.0)
    busy[9] = True
    both = after_prefill(steps.assign(busy=busy))
    assert both["pairs"] == 2 and both["median_ratio"] == pytest.approx(1.15)
    # a decode count that changes within the next steps is no fair reference
    assert after_prefill(steps.assign(decodes=[2, 2, 2, 0, 2, 3, 2, 2, 2, 0, 2, 3, 2, 2],
                                      busy=busy))["pairs"] == 0


def test_step_error_splits_full_and_lower_gpu_clock():
    steps = pd.DataFrame({"forward_s": [1.0, 1.0, 3.0, 3.0], "prefill_tokens": [0] * 4,
                          "decodes": [1] * 4, "sm_clock_mhz": [1980.0, 1900.0, 600.0, np.nan]})
    se = step_error(steps, np.array([1.0, 1.1, 1.0, 1.0]))
    full, lower = se["by_clock"]["full_clock"], se["by_clock"]["lower_clock"]
    assert full["steps"] == 2 and full["median_pct"] == pytest.approx(5.0)
    assert lower["steps"] == 1 and lower["median_pct"] == pytest.approx(-200 / 3)
    assert "by_clock" not in step_error(steps.drop(columns="sm_clock_mhz"), np.ones(4))


@pytest.mark.slow  # the profiler end to end, twice
def test_profile_on_the_fly(tmp_path):
    from chunksim.validate.profiling import profile_now

    p = profile_now(tmp_path / "p.csv", model="tiny", device="cpu", grid="quick",
                    chunk_lens="0,16", decode_counts="0,1", kv_lens="1,32", prior_lens="")
    assert p.provenance["model"]["name"] == "tiny" and len(p.table) == 5
    assert LiveSettings.from_profile(p.provenance).model.name == "tiny"
    # more passes: fast points measured again, the table rewritten with a fresh hash
    p3 = profile_now(tmp_path / "p.csv", model="tiny", device="cpu", grid="quick",
                     chunk_lens="0,16", decode_counts="0,1", kv_lens="1,32", prior_lens="",
                     passes=3)
    assert p3.provenance["passes"] == 3 and p3.sha256 != p.sha256
    prefill = p3.table.chunk_len > 0  # later looks: cold (1 run) with a prefill, else warm
    assert (p3.table.repeats[~prefill] >= 3 * 3).all() and (p3.table.median_s > 0).all()
    assert (p3.table.repeats[prefill] >= 3 + 2).all()


def test_replay_steps_default_follows_the_profile_kind():
    from chunksim.reports.validate_flow import replay_steps_for

    assert replay_steps_for("whole-step", None) == 180
    assert replay_steps_for("components", None) == 0
    assert replay_steps_for("components", 12) == 12  # then refused by validate, by name
    assert replay_steps_for("whole-step", 0) == 0


def test_validate_refuses_replay_steps_with_a_component_profile(tmp_path):
    from chunksim.latency.profile import load_profile
    from chunksim.validate.run import validate as run_validation

    with pytest.raises(ValueError, match="--replay-steps 5"):
        run_validation(workload([(0.0, 10, 2)]), load_profile("tiny-cpu-components"),
                       RunConfig(policy="budget", chunk=64), replay_steps=5)

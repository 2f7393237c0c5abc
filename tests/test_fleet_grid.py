"""Fleet layouts as a grid dimension: `--fleet` entries, `sim compare --fleet`, and the
per-replica load plot's data."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.reports.replica_load import replica_load
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.compare import run_comparison
from chunksim.sweep.configs import make_configs, parse_policies
from chunksim.sweep.fleets import FleetSpec, gpu_splits, parse_fleet, parse_fleets
from chunksim.sweep.job import SimJob, run_config
from chunksim.sweep.runner import Runner
from chunksim.workloads import WorkloadOptions, build_workload

RUNNER = CliRunner()


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text, spec", [
    ("4", FleetSpec(replicas=4)),
    (" replicas=4 , router=least-tokens", FleetSpec(replicas=4, router="least-tokens")),
    ("pd=2:6", FleetSpec(pd=(2, 6))),
    ("pd=1:3,router=random,decode-router=least-requests,kv-link=ib-400g",
     FleetSpec(pd=(1, 3), router="random", decode_router="least-requests",
               kv_link="ib-400g")),
])
def test_fleet_entries_parse(text, spec):
    assert parse_fleet(text) == spec


@pytest.mark.parametrize("text, why", [
    ("", "empty item"),
    ("4,,router=random", "empty item"),
    ("0", "0 replicas: a fleet needs at least 1"),
    ("four", "'four' is not a replica count"),
    ("pd=0:2", "pd=0:2: give P:D, each >= 1"),
    ("pd=2", "pd=2: give P:D"),
    ("4,pd=1:1", "given twice"),
    ("4,router=fastest", "router 'fastest' is unknown"),
    ("pd=1:1,decode-router=nearest", "decode-router 'nearest' is unknown"),
    ("pd=1:1,kv-link=pigeon", "kv-link 'pigeon' is unknown"),
    ("4,kv-link=nvlink", "kv-link: only for pd=P:D"),
    ("4,colour=red", "unknown key 'colour'"),
    ("4,least-tokens", "'least-tokens' is not KEY=VALUE"),
    ("router=least-tokens", "no layout"),
])
def test_malformed_fleet_entries_are_refused_naming_flag_and_entry(text, why):
    with pytest.raises(ValueError) as err:
        parse_fleet(text)
    msg = str(err.value)
    assert msg.startswith(f"--fleet {text.strip()!r}: ") and why in msg, msg


def test_a_template_has_no_layout_and_fills_only_what_a_layout_leaves_unset():
    t = parse_fleet("router=least-tokens,kv-link=ib-400g", "--fleet", layout=False)
    with pytest.raises(ValueError, match="--gpus generates the layouts"):
        parse_fleet("4", "--fleet", layout=False)
    splits = gpu_splits(3, t)
    assert splits == [FleetSpec(replicas=3, router="least-tokens"),
                      FleetSpec(pd=(1, 2), router="least-tokens", kv_link="ib-400g"),
                      FleetSpec(pd=(2, 1), router="least-tokens", kv_link="ib-400g")]
    assert all(s.gpus == 3 for s in splits)
    assert gpu_splits(1) == [FleetSpec(replicas=1)]  # one GPU: no P/D split
    own = FleetSpec(pd=(1, 1), router="random")
    assert own.with_defaults(t).router == "random"


def test_entries_dedupe_and_configurations_cross_every_layout():
    fleets = parse_fleets(["pd=2:2", "4", "4", "4,router=least-tokens"])
    assert len(fleets) == 3
    configs = make_configs(parse_policies("whole,budget"), [512], fleets)
    labels = [c.label for c in configs]
    assert labels == ["4x · whole", "4x · budget 512", "4x least-tokens · whole",
                      "4x least-tokens · budget 512", "P/D 2:2 · whole", "P/D 2:2 · budget 512"]
    assert len(set(labels)) == len(labels)
    # a plain grid keeps its labels
    assert [c.label for c in make_configs(parse_policies("budget"), [512])] == ["budget 512"]


def test_a_job_runs_its_layout_on_the_run_flags():
    base = RunConfig(fleet=FleetConfig(prefix_load_cap=3))
    cfg = make_configs(parse_policies("budget"), [512],
                       [parse_fleet("pd=1:2,decode-router=random,kv-link=pcie-gen5")])[0]
    got = run_config(SimJob(WorkloadOptions(seed=4), base, cfg))
    assert (got.policy, got.chunk, got.engine.seed) == ("budget", 512, 4)
    assert got.fleet == FleetConfig(pd="1:2", decode_router="random", kv_link="pcie-gen5",
                                    prefix_load_cap=3)
    col = make_configs(parse_policies("budget"), [512], [FleetSpec(replicas=2)])[0]
    assert run_config(SimJob(WorkloadOptions(), base, col)).fleet == FleetConfig(
        replicas=2, prefix_load_cap=3)


@pytest.mark.parametrize("args, message", [
    (["--fleet", "4,router=fastest"], "--fleet '4,router=fastest': router 'fastest'"),
    (["--fleet", "pd=2"], "--fleet 'pd=2': pd=2: give P:D"),
    (["--replicas", "2", "--fleet", "4"], "--replicas and --fleet both size the fleet"),
    (["--pd", "1:1", "--fleet", "4"], "--pd and --fleet both size the fleet"),
])
def test_compare_refuses_bad_fleets_before_simulating(args, message, tmp_path):
    res = RUNNER.invoke(app, ["compare", "-n", "5", "--out", str(tmp_path / "c"), *args])
    assert isinstance(res.exception, ValueError), res.output
    assert message in str(res.exception)
    assert not (tmp_path / "c" / "comparison.csv").exists()


# ------------------------------------------------------------------ per-replica load
def _run(profile, fleet: FleetConfig, n=80, rate=40.0):
    w = build_workload(WorkloadOptions(num_requests=n, rate=rate, seed=2))
    return simulate(w, profile, RunConfig(policy="budget", chunk=256, kv_blocks=400,
                                          fleet=fleet))


@pytest.mark.parametrize("fleet", [FleetConfig(replicas=3, router="least-tokens"),
                                   FleetConfig(pd="1:2")])
def test_replica_load_is_the_summary_rows_from_the_records_alone(linear_profile, fleet):
    result, summary = _run(linear_profile, fleet)
    before = (result.requests.copy(), result.steps.copy())
    load = replica_load(result)
    pd.testing.assert_frame_equal(result.requests, before[0])  # inputs untouched
    pd.testing.assert_frame_equal(result.steps, before[1])
    pd.testing.assert_frame_equal(load, replica_load(result))  # a function of them
    rows = summary["replicas"]
    assert list(load["replica"]) == [r["replica"] for r in rows]
    assert list(load["requests"]) == [r["requests"] for r in rows]
    assert load["busy_fraction"].to_numpy() == pytest.approx(
        [r["busy_fraction"] for r in rows], rel=1e-12)
    assert load["busy_fraction"].mean() == pytest.approx(summary["busy_fraction"], rel=1e-12)
    if fleet.pd:
        assert list(load["pool"]) == ["prefill", "decode", "decode"]
        assert load["requests"].iloc[0] == 80  # one prefill instance takes every request
    else:
        assert set(load["pool"]) == {"replica"} and load["requests"].sum() == 80


def test_replica_load_of_a_lone_engine_is_one_row(linear_profile):
    result, summary = _run(linear_profile, FleetConfig())
    load = replica_load(result)
    assert len(load) == 1 and load["requests"].iloc[0] == 80
    assert load["busy_fraction"].iloc[0] == pytest.approx(summary["busy_fraction"], rel=1e-12)


def test_replica_load_counts_an_idle_replica(linear_profile):
    # two requests on four round-robin replicas: replicas 2 and 3 never step
    result, _ = _run(linear_profile, FleetConfig(replicas=4), n=2, rate=1.0)
    load = replica_load(result)
    assert list(load["requests"]) == [1, 1, 0, 0]
    assert list(load["busy_s"] > 0) == [True, True, False, False]


def test_fleet_comparison_tables_carry_the_layout(linear_profile):
    fleets = [FleetSpec(replicas=2, router="least-tokens"), FleetSpec(pd=(1, 1))]
    configs = make_configs(parse_policies("budget"), [256], fleets)
    w = WorkloadOptions(num_requests=40, rate=20.0)
    with Runner(linear_profile, 1) as runner:
        comp = run_comparison(configs, w, RunConfig(kv_blocks=400), runner, keep_records=True)
    header = comp.csv().splitlines()[0].split(",")
    assert header[:4] == ["config", "policy", "chunk", "fleet_layout"]
    assert "kv_transfer" in header  # P/D's own keys: the union of the rows' columns
    rows = comp.json_rows()
    assert [r["fleet_layout"] for r in rows] == ["2x least-tokens", "P/D 1:1"]
    assert rows[0]["fleet"] == {"replicas": 2, "router": "least-tokens",
                                "router_staleness_ms": 0.0}
    assert rows[1]["fleet"]["prefill_instances"] == 1
    # the same layout run alone gives the same answer
    _, alone = simulate(build_workload(dataclasses.replace(w, seed=w.seed)), linear_profile,
                        RunConfig(policy="budget", chunk=256, kv_blocks=400,
                                  fleet=FleetConfig(replicas=2, router="least-tokens")))
    assert comp.runs[0][0]["p99_ttft_ms"] == alone["p99_ttft_ms"]


@pytest.mark.slow  # the whole report
def test_compare_fleets_writes_the_replica_load_plot(tmp_path):
    out = tmp_path / "c"
    res = RUNNER.invoke(app, ["compare", "-n", "40", "--rate", "20", "--policies", "budget",
                              "--chunks", "512", "--seeds", "0", "--fleet", "2",
                              "--fleet", "pd=1:1", "--out", str(out), "--no-svg"])
    assert res.exit_code == 0, res.output
    assert (out / "replica_load.png").stat().st_size > 0
    assert "replica_load.png" in (out / "report.md").read_text()
    doc = json.loads((out / "comparison.json").read_text())
    assert [r["config"] for r in doc["rows"]] == ["2x · budget 512", "P/D 1:1 · budget 512"]

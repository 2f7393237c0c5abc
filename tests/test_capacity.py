"""`sim capacity`: SLO validation, the lock-step search on a real simulation, the CLI."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.capacity import capacity
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.capacity import (
    CapacityEntry,
    Probe,
    SearchParams,
    capacity_search,
    recommend,
)
from chunksim.sweep.configs import Config, PolicySpec, make_configs, parse_policies
from chunksim.sweep.runner import Runner
from chunksim.sweep.slos import SCHED_DELAY_KEY, meets, parse_capacity_slos, slo_keys
from chunksim.workloads import WorkloadOptions

app = typer.Typer()
app.command("capacity")(capacity)
app.command("other")(lambda: None)
cli = CliRunner()
SMALL = WorkloadOptions(duration_s=10.0, prompt_mean=512, output_mean=64)


def test_slo_parsing_adds_sarathi_sched_delay_bound():
    assert parse_capacity_slos(["p99_itl_ms=100"]) == {"p99_itl_ms": 100.0,
                                                      SCHED_DELAY_KEY: 2000.0}
    assert parse_capacity_slos(["p99_itl_ms:50,median_sched_delay_ms=500"]) == {
        "p99_itl_ms": 50.0, SCHED_DELAY_KEY: 500.0}
    assert parse_capacity_slos(["p99_ttft_ms=9", f"{SCHED_DELAY_KEY}=off"]) == {
        "p99_ttft_ms": 9.0}


@pytest.mark.parametrize("item,msg", [("p99_foo_ms=3", "p99_itl_ms"), ("p99_itl_ms", "KEY=MS"),
                                      ("p99_itl_ms=x", "not a number"),
                                      ("p99_itl_ms=-1", "> 0"), ("completed=3", "--slo")])
def test_bad_slos_list_valid_keys(item, msg):
    with pytest.raises(ValueError, match="--slo") as exc:
        parse_capacity_slos([item])
    assert msg in str(exc.value)


def test_slo_keys_are_summary_keys(linear_profile):
    from factories import workload

    _, summary = simulate(workload([(0.0, 64, 4), (0.01, 32, 3)]), linear_profile,
                          RunConfig(kv_blocks=256))
    ms_keys = {k for k, v in summary.items() if k.endswith("_ms") and isinstance(v, float)}
    assert set(slo_keys()) == ms_keys
    assert meets(summary, {"p99_itl_ms": 1e6}) and not meets(summary, {"p99_itl_ms": 1e-6})


def _entry(label_chunk: int, rate: float, ttft: float) -> CapacityEntry:
    summary = {"p99_ttft_ms": ttft, "completed": 1}
    cfg = Config(PolicySpec("budget"), label_chunk)
    return CapacityEntry(cfg, rate, False, [Probe(rate, rate > 0, summary)])


def test_recommend_highest_capacity_then_lowest_p99_ttft():
    a, b, c = _entry(256, 8.0, 900.0), _entry(512, 8.0, 400.0), _entry(1024, 4.0, 10.0)
    assert recommend([a, b, c]) is b
    assert recommend([c, a]) is a
    assert recommend([_entry(256, 0.0, 1.0)]) is None


def test_budget_sustains_more_than_whole_under_a_strict_itl_slo(linear_profile):
    configs = make_configs(parse_policies("whole,budget"), [256])
    slos = {"p99_itl_ms": 8.0, SCHED_DELAY_KEY: 2000.0}
    with Runner(linear_profile, workers=1) as runner:
        entries = capacity_search(configs, SMALL, RunConfig(), slos, runner,
                                  SearchParams(start=4.0, tol=0.1, max_rate=256.0))
    whole, budget = entries
    assert budget.max_rate > whole.max_rate > 0
    for e in entries:  # the reported rate met the SLOs; the next probe up did not
        assert meets(e.at_max, slos)
        above = [p for p in e.probes if p.rate > e.max_rate]
        assert above and not any(p.met for p in above)
        assert min(p.rate for p in above) / e.max_rate <= 1.1
    assert recommend(entries) is budget


@pytest.mark.slow  # the CLI's capacity search and its report figures
def test_cli_writes_capacity_json_and_plots(linear_profile, tmp_path):
    out = tmp_path / "cap"
    res = cli.invoke(app, ["capacity", "--profile", linear_profile.path, "--duration", "10",
                           "--prompt-mean", "512", "--output-mean", "64", "--rate", "4",
                           "--policies", "whole,budget", "--chunks", "256,2048",
                           "--slo", "p99_itl_ms=8", "--tol", "0.1", "--max-rate", "256",
                           "--workers", "1", "--no-svg", "--out", str(out)],
                     env={"COLUMNS": "150"})
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "capacity.json").read_text())
    assert doc["slos_ms"] == {"p99_itl_ms": 8.0, SCHED_DELAY_KEY: 2000.0}
    labels = [c["config"] for c in doc["configurations"]]
    assert labels == ["whole", "budget 256", "budget 2048"]
    for c in doc["configurations"]:
        assert c["max_rate"] > 0 and c["summary_at_max_rate"]["p99_itl_ms"] <= 8.0
    best = max(doc["configurations"], key=lambda c: c["max_rate"])
    assert doc["recommendation"]["max_rate"] == best["max_rate"]
    assert "recommended:" in res.output
    for name in ("capacity_knee.png", "capacity_bars.png", "capacity_probes.csv"):
        assert (out / name).stat().st_size > 0
    probes = (out / "capacity_probes.csv").read_text().splitlines()
    assert probes[0].startswith("config,policy,chunk,rate,met")
    assert len(probes) > 3 * 3  # every configuration probed at several rates

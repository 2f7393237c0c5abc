"""`sim capacity`: SLO validation, the lock-step search on a real simulation, the CLI."""

from __future__ import annotations

import json
import math

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.capacity import capacity
from chunksim.sim.engine.settle import REJECTED_KEY
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.capacity import (
    CapacityEntry,
    Probe,
    SearchParams,
    capacity_search,
    judge,
    probe_workload,
    recommend,
    search_params,
)
from chunksim.sweep.configs import Config, PolicySpec, make_configs, parse_policies
from chunksim.sweep.runner import Runner
from chunksim.sweep.slos import SCHED_DELAY_KEY, meets, parse_capacity_slos, slo_keys
from chunksim.workloads import WorkloadKind, WorkloadOptions
from chunksim.workloads.lengths import LengthKind

app = typer.Typer()
app.command("capacity")(capacity)
app.command("other")(lambda: None)
cli = CliRunner()
SMALL = WorkloadOptions(duration_s=10.0, prompt_mean=512, output_mean=64)


def test_no_slo_means_the_documented_defaults():
    assert parse_capacity_slos(None) == {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0,
                                         SCHED_DELAY_KEY: 2000.0}


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


def test_a_rate_passes_on_the_median_seed():
    runs = [{"completed": 5, "p99_ttft_ms": t} for t in (100.0, 900.0, 300.0)]
    assert judge(runs, {"p99_ttft_ms": 300.0}) and not judge(runs, {"p99_ttft_ms": 299.0})
    # a seed that completed nothing counts as missing every bound
    dead = [{"completed": 0, "p99_ttft_ms": 1.0}] * 2 + [{"completed": 3, "p99_ttft_ms": 1.0}]
    assert not judge(dead, {"p99_ttft_ms": 10.0})


def test_auto_window_holds_enough_requests_for_a_p99():
    params = search_params(WorkloadOptions())
    assert params.auto_window and params.start == 1.0
    assert probe_workload(WorkloadOptions(), 4.0, 7, params).duration_s == 250.0  # 1000 / 4
    assert probe_workload(WorkloadOptions(), 40.0, 7, params).duration_s == 60.0
    assert probe_workload(WorkloadOptions(), 4.0, 7, params).seed == 7
    assert not search_params(WorkloadOptions(duration_s=10.0)).auto_window
    assert not search_params(WorkloadOptions(workload=WorkloadKind.TRACE)).auto_window


@pytest.mark.slow
def test_md1_capacity_matches_pollaczek_khinchine(const_profile):
    """One seat, constant 10 ms steps, one step per request, Poisson arrivals: an M/D/1
    queue. Its mean wait is rho S / (2 (1 - rho)), so the bound W <= 20 ms holds up to
    rho = 2W / (S + 2W) = 0.8, i.e. 80 req/s: the search must land there."""
    service, bound = 0.010, 0.020
    true_rate = 2 * bound / (service + 2 * bound) / service
    w = WorkloadOptions(prompt_dist=LengthKind.CONSTANT, prompt_mean=64,
                        output_dist=LengthKind.CONSTANT, output_mean=1)
    params = SearchParams(start=16.0, tol=0.03, max_rate=1000.0, auto_window=True,
                          min_duration_s=0.0, min_requests=2000)
    with Runner(const_profile, workers=1) as runner:
        (e,) = capacity_search([Config(PolicySpec("whole"))], w,
                               RunConfig(knobs=dict(max_num_seqs=1)),
                               {"mean_sched_delay_ms": bound * 1000}, runner, params,
                               seeds=[0, 1, 2])
    assert e.max_rate == pytest.approx(true_rate, rel=0.08)
    lo, hi = e.capacity_range
    assert lo <= e.max_rate <= hi and len(e.seed_capacities()) == 3
    for p in e.probes:  # every probe kept every seed, each window >= 2000 requests
        assert len(p.runs) == 3 and len(p.seeds_met) == 3
        assert all(s["completed"] >= 1900 for s in p.runs)


@pytest.mark.slow
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


@pytest.mark.slow
def test_cli_writes_capacity_json_plots_and_page(linear_profile, tmp_path):
    out = tmp_path / "cap"
    res = cli.invoke(app, ["capacity", "--profile", linear_profile.path, "--duration", "10",
                           "--prompt-mean", "512", "--output-mean", "64", "--rate", "4",
                           "--policies", "whole,budget", "--chunks", "256,2048",
                           "--slo", "p99_itl_ms=8", "--tol", "0.1", "--max-rate", "256",
                           "--seeds", "0,1", "--workers", "1", "--no-svg", "--out", str(out)],
                     env={"COLUMNS": "150"})
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "capacity.json").read_text())
    assert doc["slos_ms"] == {"p99_itl_ms": 8.0, SCHED_DELAY_KEY: 2000.0}
    assert doc["seeds"] == [0, 1]
    labels = [c["config"] for c in doc["configurations"]]
    assert labels == ["whole", "budget 256", "budget 2048"]
    for c in doc["configurations"]:
        assert c["max_rate"] > 0 and c["summary_at_max_rate"]["p99_itl_ms"] <= 8.0
        lo, hi = c["max_rate_range"]
        assert lo <= hi and set(c["max_rate_by_seed"]) == {"0", "1"}
        assert len(c["probes"]) >= 3  # every probe recorded, with every seed
        for p in c["probes"]:
            assert [s["seed"] for s in p["by_seed"]] == [0, 1]
            assert p["met"] == (p["rate"] <= c["max_rate"]) or c["non_monotone_rates"]
    best = max(doc["configurations"], key=lambda c: c["max_rate"])
    assert doc["recommendation"]["max_rate"] == best["max_rate"]
    assert doc["verdict"]["recommended"]["config"] == doc["recommendation"]["config"]
    assert "recommended:" in res.output and "Recommended:" in res.output
    for name in ("capacity_knee.png", "capacity_bars.png", "capacity_probes.csv",
                 "report.md", "report.html"):
        assert (out / name).stat().st_size > 0
    probes = (out / "capacity_probes.csv").read_text().splitlines()
    assert probes[0].startswith("config,policy,chunk,rate,met,seed_met")
    assert len(probes) - 1 == 2 * sum(len(c["probes"]) for c in doc["configurations"])
    page = (out / "report.html").read_text()
    assert "id='verdict'" in page and "name='viewport'" in page
    assert page.count("data:image/png;base64,") == 2
    md = (out / "report.md").read_text()
    assert "## Capacity under the SLOs" in md and "## Every probe" in md
    assert "sim capacity" in md.split("## Reproduce")[1]


@pytest.mark.slow
def test_capacity_is_not_understated_by_a_noisy_probe():
    """`sim capacity --policies whole --slo p99_ttft_ms=1500 --slo
    median_sched_delay_ms=off` on the default workload: plain `sim run`s meet the SLO at
    every rate from 5 to 7.34 req/s, while short single-seed probes fail at 3.67 and 4.0
    by noise alone. Median-of-3 probes over >= 1000 requests, checked above the bracket,
    must clear 5; benchmarks/capacity_accuracy.py compares it with a fine 5-seed sweep."""
    from chunksim.latency.profile import load_profile

    slos = parse_capacity_slos(["p99_ttft_ms=1500", "median_sched_delay_ms=off"])
    params = search_params(WorkloadOptions())
    # seed 2 draws one prompt longer than whole's step cap, rejected at every rate (0.1 %
    # of its requests): this test is about the search, so that one rejection is allowed
    with Runner(load_profile(None), workers=1) as runner:
        (e,) = capacity_search([Config(PolicySpec("whole"))], WorkloadOptions(), RunConfig(),
                               slos, runner, params, seeds=[0, 1, 2], max_reject_pct=0.5)
    assert e.max_rate > 5.0
    above = [p for p in e.probes if p.rate > e.max_rate]
    assert above and not any(p.met for p in above)


def test_cli_capacity_page_when_no_probe_completes_a_request(linear_profile, tmp_path):
    """One KV block (--kv-blocks 2, one of them vLLM's null block): every request is
    rejected at every rate. The search finds no capacity and the page and figures are
    still written, saying so (no log-scale crash)."""
    out = tmp_path / "none"
    res = cli.invoke(app, ["capacity", "--profile", linear_profile.path, "--kv-blocks", "2",
                           "-n", "5", "--policies", "budget", "--chunks", "512", "--seeds", "0",
                           "--workers", "1", "--no-svg", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "capacity.json").read_text())
    assert [c["max_rate"] for c in doc["configurations"]] == [0.0]
    assert (out / "capacity_knee.png").stat().st_size > 0 and (out / "report.html").exists()


LONG_TAIL = WorkloadOptions(prompt_mean=512, prompt_std=600, output_mean=32)
"""Prompts whose tail passes a 1,500-token whole-prefill cap in every window of 200."""


@pytest.mark.slow
def test_a_search_ends_where_every_rate_left_rejects_on_arrival(linear_profile):
    """whole's token cap rejects some prompt of a seed at every rate: after its first miss
    the search stops halving, and every rate it skipped misses when it is probed, so the
    capacity is the full search's."""
    run = RunConfig(knobs=dict(max_num_batched_tokens=1500))
    params = SearchParams(start=8.0, tol=0.1, min_rate=0.25, max_rate=64.0,
                          auto_window=True, min_duration_s=0.0, min_requests=200)
    cfg = [Config(PolicySpec("whole"))]
    slos = {"p99_ttft_ms": 2000.0}
    with Runner(linear_profile, workers=1) as runner:
        (fast,) = capacity_search(cfg, LONG_TAIL, run, slos, runner, params, seeds=[0, 1, 2])
        (full,) = capacity_search(cfg, LONG_TAIL, run, slos, runner, params, seeds=[0, 1, 2],
                                  skip_rejected_rates=False)
    assert fast.max_rate == full.max_rate == 0.0
    assert [p.rate for p in fast.probes] == [8.0] and fast.rejected_below == 8.0
    skipped = [p for p in full.probes if p.rate < 8.0]
    # down to min_rate, the first octave's midpoint first (`RateSearch._below`)
    assert [p.rate for p in skipped] == [0.25, 0.5, 1.0, 2.0, 4.0, math.sqrt(8.0 * 4.0)]
    assert not any(p.met for p in skipped)
    assert all(any(s.get("rejected") or s.get("stopped_key") == REJECTED_KEY
                   for s in p.runs) for p in skipped)  # each missed on rejections
    assert full.rejected_below is None


@pytest.mark.slow
def test_a_search_without_rejections_probes_the_same_rates(linear_profile):
    """The shortcut takes nothing from a search whose misses are latencies: the same
    probes, the same capacity, with or without it."""
    params = SearchParams(start=64.0, tol=0.1, min_rate=0.5, max_rate=256.0)
    cfg = [Config(PolicySpec("whole")), Config(PolicySpec("budget"), 256)]
    slos = {"p99_itl_ms": 8.0}
    with Runner(linear_profile, workers=1) as runner:
        a = capacity_search(cfg, SMALL, RunConfig(), slos, runner, params, seeds=[0, 1])
        b = capacity_search(cfg, SMALL, RunConfig(), slos, runner, params, seeds=[0, 1],
                            skip_rejected_rates=False)
    for x, y in zip(a, b, strict=True):
        assert [(p.rate, p.met) for p in x.probes] == [(p.rate, p.met) for p in y.probes]
        assert x.max_rate == y.max_rate and x.rejected_below is None

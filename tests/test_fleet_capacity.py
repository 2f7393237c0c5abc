"""Capacity for fleets: the best split of G GPUs (`sim capacity --gpus`) and the fewest GPUs
for a target rate (`--target-rate`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from factories import make_profile
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.capacity import CapacityEntry, Probe, SearchParams, capacity_search, judge
from chunksim.sweep.configs import Config, PolicySpec, make_configs, parse_policies
from chunksim.sweep.fleets import FleetSpec, gpu_splits
from chunksim.sweep.gpus import fewest_gpus, pinned, split_ranking
from chunksim.sweep.job import SimJob, run_config
from chunksim.sweep.runner import Runner
from chunksim.workloads import WorkloadOptions, build_workload

RUNNER = CliRunner()
WORKLOAD = WorkloadOptions(num_requests=120, seed=0)
RUN = RunConfig(kv_blocks=2000)

# The linear profile (tests/factories.py): a step costs 2 ms + 10 us per token, so a step
# carrying a 512-token prefill chunk takes >= 7 ms while a decode-only step of a few
# requests takes ~2-3 ms.
ITL_SLO = {"p99_itl_ms": 5.0}
"""Colocated replicas mix prefill chunks into decode steps, so their gaps reach 7 ms as
soon as requests overlap; a P/D decode instance only decodes (and the KV hop over NVLink
of a ~2 KB/token profile costs microseconds): P/D clearly wins."""
STALL_SLO = {"max_decode_stall_ms": 100.0, "p99_ttft_ms": 1000.0}
"""With 2e8 KV bytes per token (0.44 ms per prompt token over NVLink), every P/D
handoff holds its request's first token back for hundreds of ms (the decode instance
makes it), past the TTFT bound at any rate, while a colocated replica's TTFT is its
prefill and its longest gap one step: P/D clearly loses."""


@pytest.fixture(scope="module")
def heavy_kv_profile(tmp_path_factory):
    return make_profile(tmp_path_factory.mktemp("heavy"), provenance={
        "kv_bytes_per_token": 2e8})


def _splits(profile, slos, gpus=2):
    configs = make_configs(parse_policies("budget"), [512], gpu_splits(gpus))
    with Runner(profile, 1) as runner:
        return split_ranking(capacity_search(configs, WORKLOAD, RUN, slos, runner,
                                             SearchParams(start=4.0, tol=0.1, max_rate=512)))


@pytest.mark.slow
def test_pd_wins_when_interference_breaks_the_itl_bound(linear_profile):
    ranked = _splits(linear_profile, ITL_SLO)
    assert [e.config.fleet for e in ranked] == [FleetSpec(pd=(1, 1)), FleetSpec(replicas=2)]
    pd_, col = ranked
    assert pd_.max_rate > 10 * col.max_rate > 0  # clearly, not by a whisker


@pytest.mark.slow
def test_pd_loses_when_the_kv_hop_delays_every_first_token(heavy_kv_profile):
    ranked = _splits(heavy_kv_profile, STALL_SLO)
    assert [e.config.fleet for e in ranked] == [FleetSpec(replicas=2), FleetSpec(pd=(1, 1))]
    col, pd_ = ranked
    assert col.max_rate > 0 and pd_.max_rate == 0
    # why: the transfer lands before the first token, so P/D's runs miss the TTFT bound;
    # their gaps, all made on the decode instance, stay short
    full = [p.summary for p in pd_.probes if not p.summary.get("stopped")]
    assert full and all(s["p99_ttft_ms"] > STALL_SLO["p99_ttft_ms"] for s in full)
    assert all(s["max_decode_stall_ms"] < STALL_SLO["max_decode_stall_ms"] for s in full)


def test_split_ranking_orders_by_capacity_then_ttft_then_configuration():
    def entry(fleet, rate, ttft):
        cfg = Config(PolicySpec("budget"), 512, fleet)
        probes = [Probe(rate, True, {"p99_ttft_ms": ttft})] if rate else []
        return CapacityEntry(cfg, rate, False, probes)

    a = entry(FleetSpec(replicas=4), 10.0, 50.0)
    b = entry(FleetSpec(pd=(2, 2)), 10.0, 40.0)
    c = entry(FleetSpec(pd=(1, 3)), 12.0, 90.0)
    d = entry(FleetSpec(pd=(3, 1)), 0.0, 0.0)
    e = entry(FleetSpec(pd=(1, 3), router="random"), 10.0, 40.0)
    # b and e tie on capacity and TTFT: configuration order, P/D 1:3 before 2:2
    assert split_ranking([d, a, e, b, c]) == [c, e, b, a, d]


# ------------------------------------------------------------------ fewest GPUs
def _fake_judge(met_from: int, calls: list[int], hole: int | None = None):
    def judge_at(g):
        calls.append(g)
        ok = g >= met_from and g != hole
        cfg = Config(PolicySpec("budget"), 512, FleetSpec(replicas=g))
        return [CapacityEntry(cfg, 8.0 if ok else 0.0, ok,
                              [Probe(8.0, ok, {"p99_ttft_ms": 1.0})])]
    return judge_at


@pytest.mark.parametrize("met_from, max_gpus", [(1, 64), (2, 64), (5, 64), (13, 64),
                                                (64, 64), (7, 10), (10, 10)])
def test_fewest_gpus_finds_the_first_count_and_judged_the_one_below(met_from, max_gpus):
    calls: list[int] = []
    s = fewest_gpus(8.0, max_gpus, _fake_judge(met_from, calls))
    assert s.answer == met_from
    assert s.trials[met_from].met
    if met_from > 1:
        assert not s.trials[met_from - 1].met  # G - 1 was judged, and missed
    assert len(calls) == len(set(calls))  # no count judged twice
    assert len(calls) <= 2 * int(np.ceil(np.log2(max_gpus))) + 2  # doubling + bisection
    assert all(t.met == (g >= met_from) for g, t in s.trials.items())


def test_fewest_gpus_says_none_when_even_the_most_misses():
    calls: list[int] = []
    s = fewest_gpus(8.0, 12, _fake_judge(99, calls))
    assert s.answer is None and calls == [1, 2, 4, 8, 12]


def test_fewest_gpus_keeps_what_it_judged_consistent_around_a_hole():
    # met from 3 except at 4 (a noisy tail): doubling judges 1, 2, 4 (all miss) then 8,
    # bisection 6 and 5; 3 is never judged, so the answer is 5 and 4 below it missed
    calls: list[int] = []
    s = fewest_gpus(8.0, 64, _fake_judge(3, calls, hole=4))
    assert calls == [1, 2, 4, 8, 6, 5] and s.answer == 5 and not s.trials[4].met


def test_pinned_search_is_one_probe_at_the_target():
    p = pinned(SearchParams(), 40.0)
    assert (p.start, p.min_rate, p.max_rate, p.verify) == (40.0, 40.0, 40.0, ())
    with pytest.raises(ValueError, match="--target-rate 0"):
        pinned(SearchParams(), 0.0)


@pytest.mark.slow  # about ten searches
def test_fewest_gpus_meets_the_target_and_one_fewer_does_not(heavy_kv_profile):
    target = 300.0
    params = pinned(SearchParams(), target)

    def at(g, runner):
        return capacity_search(make_configs(parse_policies("budget"), [512], gpu_splits(g)),
                               WORKLOAD, RUN, STALL_SLO, runner, params)

    with Runner(heavy_kv_profile, 1) as runner:
        s = fewest_gpus(target, 16, lambda g: at(g, runner))
        lower = fewest_gpus(target / 4, 16, lambda g: at(g, runner))
    g = s.answer
    assert g is not None and g > 1
    assert all(t.met == (n >= g) for n, t in s.trials.items())  # monotone where judged
    assert lower.answer is not None and lower.answer <= g  # a lower target needs no more
    # judged again from scratch, one run per configuration: G meets, G - 1 does not
    w = build_workload(WorkloadOptions(num_requests=120, seed=0, rate=target))

    def meets(cfg):
        job = SimJob(WorkloadOptions(num_requests=120, seed=0, rate=target), RUN, cfg)
        return judge([simulate(w, heavy_kv_profile, run_config(job))[1]], STALL_SLO)

    best = s.trials[g].meeting[0].config
    assert best.fleet.gpus == g and meets(best)
    below = make_configs(parse_policies("budget"), [512], gpu_splits(g - 1))
    assert not any(meets(c) for c in below)


# ------------------------------------------------------------------ CLI
@pytest.mark.parametrize("args, message", [
    (["--gpus", "2", "--target-rate", "5"], "give one"),
    (["--max-gpus", "4"], "--max-gpus bounds the --target-rate search"),
    (["--gpus", "2", "--replicas", "2"], "--replicas and --gpus both size the fleet"),
    (["--target-rate", "5", "--pd", "1:1"], "--pd and --target-rate both size the fleet"),
    (["--target-rate", "5", "--rate", "3"], "drop --rate"),
    (["--target-rate", "5", "--tol", "0.1"], "--tol shapes the rate search"),
    (["--gpus", "2", "--fleet", "4"], "--gpus generates the layouts"),
    (["--gpus", "2", "--fleet", "router=x"], "--fleet 'router=x': router 'x' is unknown"),
    (["--gpus", "2", "--fleet", "router=random", "--fleet", "router=least-tokens"],
     "at most one --fleet entry"),
    (["--fleet", "pd=1"], "--fleet 'pd=1': pd=1: give P:D"),
])
def test_capacity_refuses_bad_fleet_flags(args, message, tmp_path):
    res = RUNNER.invoke(app, ["capacity", "-n", "5", "--out", str(tmp_path / "c"), *args])
    assert isinstance(res.exception, ValueError), res.output
    assert message in str(res.exception)


@pytest.mark.slow
def test_capacity_gpus_cli_ranks_and_writes_the_splits(tmp_path):
    out = tmp_path / "c"
    res = RUNNER.invoke(app, ["capacity", "-n", "40", "--gpus", "2", "--policies", "budget",
                              "--chunks", "512", "--seeds", "0", "--tol", "0.3",
                              "--workers", "1", "--fleet", "router=least-tokens",
                              "--no-svg", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = (out / "splits.csv").read_text().splitlines()
    assert rows[0].startswith("rank,config,policy,chunk,fleet_layout,gpus,max_rate")
    # the template's router routes the replicas and the P/D prefill pool
    assert sorted(r.split(",")[4] for r in rows[1:]) == ["2x least-tokens",
                                                         "P/D 1:1 least-tokens"]
    rates = [float(r.split(",")[6]) for r in rows[1:]]
    assert rates == sorted(rates, reverse=True)
    report = (out / "report.md").read_text()
    best = rows[1].split(",")[1]
    assert "Splits of 2 GPUs, ranked" in report
    assert report.index(f"| {best} |") < report.index("Capacity under the SLOs")
    doc = json.loads((out / "capacity.json").read_text())
    assert {c["fleet_layout"] for c in doc["configurations"]} == {"2x least-tokens",
                                                                  "P/D 1:1 least-tokens"}


def test_capacity_target_rate_cli_writes_the_gpu_search(tmp_path):
    out = tmp_path / "g"
    res = RUNNER.invoke(app, ["capacity", "-n", "40", "--target-rate", "30", "--max-gpus",
                              "3", "--policies", "budget", "--chunks", "512", "--seeds", "0",
                              "--workers", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "gpus.json").read_text())
    assert doc["target_rate"] == 30.0 and doc["max_gpus"] == 3
    judged = {t["gpus"]: t["met"] for t in doc["trials"]}
    if doc["fewest_gpus"] is None:
        assert not any(judged.values()) and 3 in judged
    else:
        g = doc["fewest_gpus"]
        assert judged[g] and (g == 1 or judged[g - 1] is False)
        assert doc["best_at_fewest"]["gpus"] == g
    for t in doc["trials"]:  # every probe was at the target
        assert all(p["rate"] == 30.0 for c in t["configurations"] for p in c["probes"])
    assert (out / "gpu_probes.csv").read_text().startswith("config,policy,chunk,fleet_layout")

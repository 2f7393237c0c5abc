"""Mixed fleets (`--replica-groups PROFILE:COUNT,...`): each replica on its group's profile,
and routers that weigh work by each replica's speed."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from factories import linear_time, make_profile, workload
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.fleet.routers import ROUTERS, LeastTokens
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads import WorkloadOptions, build_workload

RUNNER = CliRunner()
CFG = RunConfig(policy="budget", chunk=512, kv_blocks=600)
SLOWDOWN = 4.0


@pytest.fixture(scope="module")
def slow_profile(tmp_path_factory):
    """The linear profile, every step SLOWDOWN times longer (an older GPU)."""
    return make_profile(tmp_path_factory.mktemp("slow"),
                        lambda c, p, d, k: SLOWDOWN * linear_time(c, p, d, k), name="slow")


def _traffic(n=90, rate=30.0):
    return build_workload(WorkloadOptions(num_requests=n, rate=rate, seed=5))


@pytest.mark.parametrize("router", [r for r in ROUTERS if r != "conversation"])
def test_a_mixed_fleet_of_one_profile_is_the_homogeneous_fleet(linear_profile, router):
    w = _traffic()
    path = linear_profile.path
    same, s_same = simulate(w, linear_profile, replace(CFG, fleet=FleetConfig(
        router=router, replica_groups=f"{path}:1,{path}:2")))
    homo, s_homo = simulate(w, linear_profile, replace(CFG, fleet=FleetConfig(
        replicas=3, router=router)))
    pd.testing.assert_frame_equal(same.requests, homo.requests)
    pd.testing.assert_frame_equal(same.steps, homo.steps)
    groups = s_same["fleet"].pop("groups")
    assert [g["replicas"] for g in groups] == [1, 2]
    assert {g["sha256"] for g in groups} == {linear_profile.sha256}
    for row in s_same["replicas"]:
        assert row.pop("profile") == linear_profile.label
        assert row.pop("relative_token_time") == 1.0
    assert s_same == s_homo


def test_each_replica_runs_on_its_own_profile(linear_profile, slow_profile):
    # two lone requests far apart, round-robin: one per replica, each alone on its engine
    w = workload([(0.0, 700, 5), (50.0, 700, 5)])
    res, s = simulate(w, linear_profile, replace(CFG, fleet=FleetConfig(
        replica_groups=f"{linear_profile.path}:1,{slow_profile.path}:1")))
    r = res.requests
    assert list(r["replica"]) == [0, 1]
    ttft = (r["first_token_s"] - r["arrival_s"]).to_numpy()
    e2e = (r["finish_s"] - r["arrival_s"]).to_numpy()
    assert ttft[1] == pytest.approx(SLOWDOWN * ttft[0], rel=1e-9)
    assert e2e[1] == pytest.approx(SLOWDOWN * e2e[0], rel=1e-9)
    rows = s["replicas"]
    assert [row["profile"] for row in rows] == [linear_profile.label, slow_profile.label]
    assert rows[0]["relative_token_time"] == 1.0
    assert rows[1]["relative_token_time"] == pytest.approx(SLOWDOWN, rel=1e-12)


class _View:
    def __init__(self, tokens: int, time: float) -> None:
        self.tokens, self.time = tokens, time

    def outstanding_tokens(self) -> int:
        return self.tokens

    def relative_token_time(self) -> float:
        return self.time


def test_least_tokens_weighs_work_by_the_replicas_speed():
    r = LeastTokens(2)
    # 100 tokens on the fast replica beat 60 on one twice as slow (120 token-times)
    assert r.pick(None, [_View(100, 1.0), _View(60, 2.0)]) == 0
    # the same backlog on equal replicas: the plain token count decides
    assert r.pick(None, [_View(100, 1.0), _View(60, 1.0)]) == 1


def test_least_tokens_sends_the_faster_replica_more(linear_profile, slow_profile):
    w = _traffic(n=160, rate=60.0)
    res, s = simulate(w, linear_profile, replace(CFG, fleet=FleetConfig(
        router="least-tokens",
        replica_groups=f"{linear_profile.path}:1,{slow_profile.path}:1")))
    fast, slow = s["replicas"]
    assert fast["requests"] > 2 * slow["requests"] > 0
    tokens = res.requests.groupby("replica")["prompt_tokens"].sum()
    assert tokens[0] > 2 * tokens[1]
    # blind to speed (round-robin), the slow replica gets half and its tail shows it
    _, rr = simulate(w, linear_profile, replace(CFG, fleet=FleetConfig(
        replica_groups=f"{linear_profile.path}:1,{slow_profile.path}:1")))
    assert [row["requests"] for row in rr["replicas"]] == [80, 80]
    assert s["p99_ttft_ms"] < rr["p99_ttft_ms"]


@pytest.mark.parametrize("args, message", [
    (["--replica-groups", "tiny-cpu"], "'tiny-cpu' is not PROFILE:COUNT"),
    (["--replica-groups", "tiny-cpu:0"], "'tiny-cpu:0' is not PROFILE:COUNT"),
    (["--replica-groups", "tiny-cpu:2,:1"], "':1' is not PROFILE:COUNT"),
    (["--replica-groups", "tiny-cpu:2", "--replicas", "3"], "holds 2; drop --replicas"),
    (["--replica-groups", "tiny-cpu:2", "--pd", "1:1"], "mixed fleets are colocated"),
    (["--replica-groups", "tiny-cpu:2", "--profile", "tiny-cpu"], "both choose the profile"),
    (["--replica-groups", "no-such-profile:2"], "no-such-profile"),
])
def test_bad_replica_groups_get_a_clear_error(args, message):
    res = RUNNER.invoke(app, ["run", "-n", "5", *args])
    assert isinstance(res.exception, ValueError), res.output
    assert message in str(res.exception)


def test_replica_groups_from_the_cli(tmp_path):
    out = tmp_path / "r"
    res = RUNNER.invoke(app, ["run", "-n", "30", "--rate", "20", "--replica-groups",
                              "tiny-cpu:1,tiny-cpu-components:1", "--router", "least-tokens",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    req = pd.read_parquet(out / "requests.parquet")
    assert set(req["replica"]) == {0, 1}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["warnings"] == []  # both profiles are of the `tiny` model
    assert [g["replicas"] for g in summary["fleet"]["groups"]] == [1, 1]


def test_a_fleet_of_two_models_is_warned_about(linear_profile, tmp_path):
    other = make_profile(tmp_path, provenance={"model": {"name": "another"}}, name="other")
    _, s = simulate(_traffic(n=10), linear_profile, replace(CFG, fleet=FleetConfig(
        replica_groups=f"{linear_profile.path}:1,{other.path}:1")))
    assert any("different models (another, synthetic)" in w for w in s["warnings"])

"""Rejections are part of every answer: a capacity probe or compared configuration that
rejects more than --max-reject-pct of its requests fails, the verdict and report say so,
and a plain run prints the count and reasons."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.sim.records.rejections import all_within, reject_pct, rejection_text
from chunksim.sweep.capacity import judge
from chunksim.sweep.configs import Config, PolicySpec
from chunksim.sweep.verdict import decide

cli = CliRunner()
SLOS = {"p99_itl_ms": 100.0}
REJECTING = ["--policies", "budget", "--chunks", "512", "-n", "200", "--max-model-len", "700",
             "--seeds", "0"]
"""148 of the 200 requests are longer than --max-model-len."""


def _summary(completed: int, rejected: int, itl_ms: float = 10.0) -> dict:
    return {"completed": completed, "rejected": rejected, "p99_itl_ms": itl_ms,
            "rejected_reasons": {"max_model_len": rejected} if rejected else {},
            "max_decode_stall_ms": itl_ms, "p99_ttft_ms": itl_ms}


def test_reject_pct_is_the_share_of_arrivals():
    assert reject_pct(_summary(52, 148)) == 74.0
    assert reject_pct(_summary(0, 0)) == 0.0
    assert rejection_text(_summary(10, 0)) is None
    text = rejection_text(_summary(52, 148), {"max_model_len": "too long"})
    assert text.startswith("148 of 200 requests rejected (74 %)")
    assert "148 by max_model_len (e.g. too long)" in text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=5),
       st.floats(0, 100))
def test_a_probe_that_rejects_more_than_allowed_never_passes(counts, max_pct):
    runs = [_summary(c, r) for c, r in counts]
    ok = judge(runs, SLOS, max_pct)
    if any(reject_pct(s) > max_pct for s in runs):
        assert not ok
    assert ok == (all_within(runs, max_pct) and judge(runs, SLOS, 100.0))


def test_compare_verdict_fails_a_configuration_that_rejects():
    cfgs = [Config(PolicySpec("budget"), 512), Config(PolicySpec("budget"), 2048)]
    runs = [[_summary(52, 148, 5.0)], [_summary(200, 0, 20.0)]]
    v = decide(cfgs, runs, SLOS, True, [0])
    assert [c.meets for c in v.candidates] == [False, True]
    assert v.recommended.label == cfgs[1].label
    loose = decide(cfgs, runs, SLOS, True, [0], max_reject_pct=80.0)
    assert loose.candidates[0].meets


@pytest.mark.slow
def test_capacity_with_rejections_is_never_reported_as_meeting(tmp_path):
    res = cli.invoke(app, ["capacity", *REJECTING, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "No configuration meets the SLOs" in res.output
    assert "148 of 200 requests rejected" in res.output
    doc = json.loads((tmp_path / "capacity.json").read_text())
    assert doc["verdict"]["max_reject_pct"] == 0
    entry = doc["configurations"][0]
    assert entry["max_rate"] == 0
    low, *rest = entry["probes"]  # the lowest rate, what the page reports, ran in full
    assert not low["met"] and low["by_seed"][0]["rejected"] == 148
    assert "rejected 74 % > 0 %" in low["by_seed"][0]["violations"]
    # every lower rate rejects the same 148 requests on arrival: decided, not probed
    assert rest == [] and entry["rejected_below_rate"] == low["rate"]
    report = (tmp_path / "report.md").read_text()
    assert "148 of 200 requests rejected" in report and "rejected %" in report
    assert f"not probed below {low['rate']:g} req/s" in report


@pytest.mark.slow
def test_probes_that_reject_stop_once_past_the_cap():
    """Probed anyway, the rates the search skips stop as soon as their rejections pass the
    cap, and fail as they would in full."""
    from chunksim.latency.profile import load_profile
    from chunksim.sim.engine.engine import EngineConfig
    from chunksim.sim.run import RunConfig
    from chunksim.sweep.capacity import SearchParams, capacity_search
    from chunksim.sweep.capacity_io import entry_document
    from chunksim.sweep.runner import Runner
    from chunksim.workloads import WorkloadOptions

    run = RunConfig(engine=EngineConfig(max_model_len=700))
    params = SearchParams(start=8.0, min_rate=1.0)
    with Runner(load_profile(None), workers=1) as runner:
        (e,) = capacity_search([Config(PolicySpec("budget"), 512)],
                               WorkloadOptions(num_requests=200), run, SLOS, runner, params,
                               seeds=[0], max_reject_pct=0.0, skip_rejected_rates=False)
    low, *rest = entry_document(e, SLOS, [0], 0.0)["probes"]
    assert e.max_rate == 0 and low["by_seed"][0]["rejected"] == 148
    # every rate down to min_rate, the first octave's midpoint too (`RateSearch._below`)
    assert [p["rate"] for p in rest] == [2.0, 4.0, math.sqrt(8.0 * 4.0), 8.0]
    assert not any(p["met"] for p in rest)
    assert all(p["by_seed"][0]["violations"] == ["rejected > 0 % (settled early)"]
               for p in rest)


def test_max_reject_pct_admits_a_known_share():
    res = cli.invoke(app, ["capacity", *REJECTING, "--max-reject-pct", "80"])
    assert res.exit_code == 0, res.output
    assert "Recommended: budget 512" in res.output


def test_a_run_that_rejects_names_count_and_reason():
    res = cli.invoke(app, ["run", "-n", "200", "--max-model-len", "700"])
    assert res.exit_code == 0, res.output
    assert ("warning: 148 of 200 requests rejected (74 %): 148 by max_model_len (e.g. "
            in res.output)

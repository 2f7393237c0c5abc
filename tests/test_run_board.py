"""The run board: its series are pure functions of the records and agree with the
summary; its observables fire on the situations they name and stay quiet otherwise; each
panel marks what it should; `sim run --out D --report` writes it with the run's files."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.spec import RequestSpec, Workload
from chunksim.reports.board import (
    budget_use,
    build_board,
    busy_until,
    engine_windows,
    latency_windows,
    observables,
    token_gaps,
    window_size_s,
)
from chunksim.sim.records.records import STEP_COLUMNS
from chunksim.sim.run import BOARD_FILES, RunConfig, simulate

RUNNER = CliRunner()


def _steps(rows: list[dict]) -> pd.DataFrame:
    base = {k: t() for k, t in STEP_COLUMNS.items()}
    return pd.DataFrame([{**base, **r} for r in rows])


def _requests(rows: list[dict]) -> pd.DataFrame:
    base = {"request_class": "default", "first_scheduled_s": np.nan, "first_token_s": np.nan,
            "finish_s": np.nan, "generated_tokens": 0, "rejected": False, "prompt_tokens": 10,
            "output_tokens": 2}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_busy_fraction_splits_steps_across_windows():
    # steps [0.5, 1.5) and [1.5, 1.75): window 0 busy 0.5 s, window 1 busy 0.75 s
    steps = _steps([{"start_s": 0.5, "duration_s": 1.0, "waiting": 4, "running": 1},
                    {"start_s": 1.5, "duration_s": 0.25, "waiting": 2, "running": 3,
                     "prefill_tokens": 100, "decodes": 3}])
    w = engine_windows(steps, 1.0, end_s=2.0)
    assert w["busy_fraction"].tolist() == pytest.approx([0.5, 0.75])
    assert w["waiting_mean"].tolist() == [4.0, 2.0] and w["running_max"].tolist() == [1, 3]
    assert w["prefill_tokens_per_step"].tolist() == [0.0, 100.0]
    assert w["decode_tokens_per_step"].tolist() == [0.0, 3.0]
    t = np.array([0.0, 0.5, 1.0, 1.5, 1.6, 5.0])
    assert busy_until(np.array([0.5, 1.5]), np.array([1.0, 0.25]), t).tolist() == \
        pytest.approx([0.0, 0.0, 0.5, 1.0, 1.1, 1.25])


def test_two_engines_share_the_window():
    steps = _steps([{"start_s": 0.0, "duration_s": 1.0, "replica": 0, "waiting": 1},
                    {"start_s": 0.0, "duration_s": 0.5, "replica": 1, "waiting": 2}])
    w = engine_windows(steps, 1.0, end_s=1.0)
    assert w["busy_fraction"].tolist() == pytest.approx([0.75])  # 1.5 s of 2 engine-s
    assert w["waiting_mean"].tolist() == [3.0]  # summed over engines


def test_budget_use_is_tokens_over_steps_times_the_budget():
    """Closed form: steps back to back each holding 500 prefill tokens and 12 decodes
    under a 2048-token budget read 512 / 2048 = 25 % budget use, while a step is in
    flight the whole time (100 % busy); a window with one full step reads 100 %."""
    rows = [{"start_s": i * 0.1, "duration_s": 0.1, "prefill_tokens": 500, "decodes": 12}
            for i in range(10)]
    rows.append({"start_s": 1.0, "duration_s": 0.1, "prefill_tokens": 2040, "decodes": 8})
    w = engine_windows(_steps(rows), 1.0, end_s=2.0, budget=2048)
    assert w["busy_fraction"].tolist() == pytest.approx([1.0, 0.1])
    assert w["budget_use"].tolist() == pytest.approx([0.25, 1.0])
    assert engine_windows(_steps(rows), 1.0, end_s=2.0)["budget_use"].isna().all()
    assert budget_use([512 * 3], [3], 2048).tolist() == [0.25]
    assert np.isnan(budget_use([0], [0], 2048)).all()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 256), st.integers(0, 1)),
                min_size=1, max_size=30), st.integers(1, 8192))
def test_budget_use_weighs_every_step_of_the_window(rows, budget):
    """Per window, budget use x steps x budget = the tokens its steps scheduled, on one
    engine or two (the budget is per step of each engine)."""
    steps = _steps([{"start_s": i * 0.25, "duration_s": 0.2, "prefill_tokens": p,
                     "decodes": d, "replica": r} for i, (p, d, r) in enumerate(rows)])
    w = engine_windows(steps, 1.0, end_s=len(rows) * 0.25 + 1, budget=budget)
    for _, win in w.iterrows():
        inside = steps[(steps["start_s"] // 1.0) == win["t_s"]]
        tokens = float((inside["prefill_tokens"] + inside["decodes"]).sum())
        if len(inside):
            assert win["budget_use"] * len(inside) * budget == pytest.approx(tokens)
        else:
            assert np.isnan(win["budget_use"])


def test_rejections_are_on_the_board_and_in_its_verdict():
    """A run that rejects half its requests says so first, with the reason and the flag
    that admits them; the board never claims every observable is within its bound."""
    from chunksim.reports.run_board import board_document

    req = _requests([{"arrival_s": i * 0.1, "first_scheduled_s": i * 0.1 + 0.01,
                      "first_token_s": i * 0.1 + 0.02, "finish_s": i * 0.1 + 0.05,
                      "generated_tokens": 2, "rejected": i % 2 == 1} for i in range(10)])
    req.loc[req["rejected"], ["first_scheduled_s", "first_token_s", "finish_s"]] = np.nan
    steps = _steps([{"start_s": i * 0.1, "duration_s": 0.05, "decodes": 1}
                    for i in range(10)])
    summary = {**_summary(), "completed": 5, "rejected": 5,
               "rejected_reasons": {"max_model_len": 5}}
    board = build_board(req, steps, summary, {}, window_s=0.5)
    assert board["windows"]["rejected"].tolist() == [2, 3] and board["rejected"] == 5
    obs = board["observables"]
    assert obs[0].key == "rejected" and obs[0].fired and obs[0].windows == (0.0, 0.5)
    assert "5 of 10 requests rejected (50 %): 5 by max_model_len" in obs[0].text
    assert "--max-model-len" in obs[0].advice
    doc = board_document(board, summary, {p: f"{p}.png" for p in
                                          ("queue", "kv", "busy", "tokens", "ttft", "itl")})
    box = next(b for b in doc.blocks if b[0] == "verdict")
    assert "rejected" in box[2][0] and not any("within its bound" in x for x in box[2])
    assert any("5 rejected at arrival" in x for x in box[2])
    quiet = build_board(req.assign(rejected=False), steps, {**summary, "rejected": 0}, {},
                        window_s=0.5)
    assert not quiet["observables"][0].fired and quiet["rejected"] == 0


def test_a_fleets_long_prompt_is_judged_by_its_own_engines_steps():
    """Replica 0 idles under its budget while its long prompt waits; replica 1's steps
    meanwhile are full. Only replica 0's steps say why the prompt waited: the engine
    idled (a larger budget), not a budget already full."""
    req = _requests([{"arrival_s": 0.0, "first_scheduled_s": 1.0, "prompt_tokens": 5000,
                      "replica": 0}]
                    + [{"arrival_s": 0.0, "first_scheduled_s": 0.0, "prompt_tokens": 10,
                        "replica": 1}] * 9)
    idle = [{"start_s": i * 0.1, "duration_s": 0.1, "decodes": 5, "running": 5,
             "kv_blocks_used": 10, "replica": 0} for i in range(10)]
    full = [{"start_s": i * 0.02, "duration_s": 0.02, "prefill_tokens": 995, "decodes": 5,
             "running": 5, "kv_blocks_used": 10, "replica": 1} for i in range(50)]
    steps = _steps(full + idle)
    w = engine_windows(steps, 0.5, end_s=1.0)
    empty = pd.DataFrame(columns=["request_class", "t_s", "p99_ms"])
    obs = observables(steps, req, w, empty, empty, _summary(), {})
    assert "long_idle" in _fired(obs) and "long_rationed" not in _fired(obs)
    idle_obs = next(o for o in obs if o.key == "long_idle")
    assert "waited through 10 steps of their engine" in idle_obs.text
    # P/D: the prefill instance it queued on
    pd_req = req.drop(columns="replica").assign(prefill_replica=req["replica"])
    obs = observables(steps, pd_req, w, empty, empty, _summary(), {})
    assert "long_idle" in _fired(obs) and "long_rationed" not in _fired(obs)


@pytest.mark.parametrize("s, w", [(30.0, 0.5), (1000.0, 20.0), (7.0, 0.2), (0.0, 1.0)])
def test_window_size_is_round(s, w):
    assert window_size_s(s) == pytest.approx(w)


def _run(linear_profile, policy: str, **knobs):
    rng = np.random.default_rng(3)
    specs, t = [], 0.0
    for i in range(120):
        t += rng.exponential(0.05)
        specs.append(RequestSpec(i, t, int(rng.integers(20, 2000)), int(rng.integers(2, 60)),
                                 request_class="long" if i % 7 == 0 else "chat"))
    w = Workload("board", tuple(specs))
    return simulate(w, linear_profile, RunConfig(policy=policy, knobs=knobs, kv_blocks=4000))


def test_token_gaps_are_the_runs_own_gaps(linear_profile):
    """Under a budget policy every request decodes every step: the gaps read off the step
    ends are exactly the engine's pooled ITL samples, class by class."""
    res, summary = _run(linear_profile, "budget", max_num_batched_tokens=512)
    gaps, every = token_gaps(res.requests, res.steps)
    assert every == 1 and gaps["exact"].all()
    assert np.allclose(np.sort(gaps["gap_s"]), np.sort(res.itl_s), rtol=0, atol=1e-12)
    for cls, vals in res.itl_by_class_s.items():
        mine = gaps.loc[gaps["request_class"] == cls, "gap_s"]
        assert np.allclose(np.sort(mine), np.sort(vals), atol=1e-12)


def test_paused_requests_get_their_mean_gap(linear_profile):
    """Prefill-first stalls decodes for whole prompts: those requests fall back to their
    mean gap, and the gaps still add up to each request's decode time."""
    res, _ = _run(linear_profile, "whole")
    gaps, _ = token_gaps(res.requests, res.steps)
    req = res.requests[res.requests["generated_tokens"] >= 2]
    assert len(gaps) == int((req["generated_tokens"] - 1).sum())
    assert not gaps["exact"].all()
    total = float((req["finish_s"] - req["first_token_s"]).sum())
    assert gaps["gap_s"].sum() == pytest.approx(total, rel=1e-9)


def test_latency_windows_by_class():
    req = _requests([
        {"arrival_s": 0.1, "first_token_s": 0.2, "request_class": "a"},
        {"arrival_s": 0.5, "first_token_s": 1.5, "request_class": "b"},
        {"arrival_s": 1.2, "first_token_s": 1.3, "request_class": "a"},
    ])
    gaps = pd.DataFrame({"time_s": [0.3, 1.4], "gap_s": [0.01, 0.03],
                         "request_class": ["a", "b"], "exact": [True, True]})
    ttft, itl = latency_windows(req, gaps, 1.0, 2.0)
    a = ttft[ttft["request_class"] == "a"].set_index("t_s")
    assert a.loc[0.0, "p99_ms"] == pytest.approx(100.0) and a.loc[1.0, "count"] == 1
    allc = ttft[ttft["request_class"] == "all"].set_index("t_s")
    assert allc.loc[0.0, "count"] == 2 and allc.loc[0.0, "p50_ms"] == pytest.approx(550.0)
    assert itl[itl["request_class"] == "b"]["p99_ms"].tolist() == pytest.approx([30.0])


def _summary(budget=1000, kv=100, seats=8):
    return {"policy_params": {"max_num_batched_tokens": budget, "max_num_seqs": seats},
            "kv_blocks": kv}


def _fired(obs) -> set[str]:
    return {o.key for o in obs if o.fired}


def _one_long_waiting(step_rows):
    """A long prompt (index 0 of 10) waits from 0 to 1 s while `step_rows` run."""
    req = _requests([{"arrival_s": 0.0, "first_scheduled_s": 1.0, "prompt_tokens": 5000}]
                    + [{"arrival_s": 0.0, "first_scheduled_s": 0.0, "prompt_tokens": 10}] * 9)
    steps = _steps(step_rows)
    w = engine_windows(steps, 0.5, end_s=1.0)
    return observables(steps, req, w, pd.DataFrame(columns=["request_class", "t_s",
                                                            "p99_ms"]),
                       pd.DataFrame(columns=["request_class", "t_s", "p99_ms"]), _summary(),
                       {})


def test_long_prompt_waiting_while_the_engine_idles_points_at_a_larger_budget():
    obs = _one_long_waiting([{"start_s": i * 0.1, "duration_s": 0.1, "decodes": 5,
                              "running": 5, "kv_blocks_used": 10} for i in range(10)])
    assert _fired(obs) >= {"long_idle"} and "long_rationed" not in _fired(obs)
    idle = next(o for o in obs if o.key == "long_idle")
    assert "larger budget" in idle.advice and idle.windows == (0.0, 0.5)  # its windows


def test_long_prompt_waiting_behind_full_steps_is_rationed():
    obs = _one_long_waiting([{"start_s": i * 0.1, "duration_s": 0.1, "prefill_tokens": 995,
                              "decodes": 5, "running": 5, "kv_blocks_used": 10}
                             for i in range(10)])
    assert "long_rationed" in _fired(obs) and "long_idle" not in _fired(obs)


def test_long_prompt_held_by_kv_points_at_kv_not_budget():
    obs = _one_long_waiting([{"start_s": i * 0.1, "duration_s": 0.1, "decodes": 5,
                              "running": 5, "kv_blocks_used": 100} for i in range(10)])
    assert _fired(obs) & {"long_blocked"} and not _fired(obs) & {"long_idle",
                                                                   "long_rationed"}
    assert "KV blocks" in next(o for o in obs if o.key == "long_blocked").advice


def test_itl_over_the_slo_marks_its_windows_and_points_at_a_smaller_chunk():
    steps = _steps([{"start_s": 0.0, "duration_s": 1.0, "prefill_tokens": 900}])
    req = _requests([{"arrival_s": 0.0, "first_scheduled_s": 0.0, "first_token_s": 1.0}])
    itl = pd.DataFrame({"request_class": ["all", "all"], "t_s": [0.0, 1.0],
                        "p50_ms": [10.0, 10.0], "p99_ms": [50.0, 150.0], "count": [5, 5]})
    ttft = itl.iloc[:0]
    w = engine_windows(steps, 1.0, end_s=2.0)
    obs = observables(steps, req, w, ttft, itl, _summary(), {"itl": 0.1})
    o = next(o for o in obs if o.key == "itl")
    assert o.fired and o.windows == (1.0,) and "smaller chunk" in o.advice
    assert "900 prefill tokens" in o.text
    quiet = observables(steps, req, w, ttft, itl, _summary(), {"itl": 0.2})
    assert not next(o for o in quiet if o.key == "itl").fired


def test_an_idle_engine_says_so():
    steps = _steps([{"start_s": 0.0, "duration_s": 0.1}])
    w = engine_windows(steps, 1.0, end_s=10.0)
    obs = observables(steps, _requests([{"arrival_s": 0.0}]), w, w.iloc[:0], w.iloc[:0],
                      _summary(), {})
    busy = next(o for o in obs if o.key == "busy")
    assert busy.fired and len(busy.windows) == 9


def test_panels_mark_budget_capacity_slo_and_measured(linear_profile):
    from chunksim.reports.run_board import board_document, board_figures

    res, summary = _run(linear_profile, "budget", max_num_batched_tokens=256)
    board = build_board(res.requests, res.steps, summary, {"itl": 1e-4, "ttft": 10.0})
    measured = {"itl": board["itl"].assign(p99_ms=board["itl"]["p99_ms"] * 1.1)}
    figs = board_figures(board, measured)

    def labels(panel):
        return {ln.get_label() for ln in figs[panel].axes[0].get_lines()}

    assert "budget 256" in labels("tokens")
    assert f"capacity {summary['kv_blocks']}" in labels("kv")
    assert "SLO 0.1 ms" in labels("itl") and "SLO 10000 ms" in labels("ttft")
    assert "measured P99" in labels("itl") and "measured P99" not in labels("ttft")
    assert {"all P99", "chat P99", "long P99"} <= labels("ttft")
    assert "itl" in figs["itl"].marked and "itl" in figs["tokens"].marked  # over SLO: shaded
    assert "ttft" not in figs["ttft"].marked  # within it: not
    doc = board_document(board, summary, {p: f"{p}.png" for p in figs})
    box = next(b for b in doc.blocks if b[0] == "verdict")
    assert any("P99 ITL over the 0.1 ms SLO" in line for line in box[2])
    from chunksim.reports.style import pyplot

    pyplot().close("all")


@pytest.mark.slow
def test_sim_run_report_writes_the_board_with_the_run(tmp_path):
    out, plain = tmp_path / "b", tmp_path / "p"
    args = ["run", "-w", "long-prompt", "--duration", "6", "--long-arrival", "2",
            "--long-prompt-tokens", "2048", "--policy", "budget", "--chunk", "256"]
    res = RUNNER.invoke(app, [*args, "--out", str(out), "--report"])
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} >= set(BOARD_FILES)
    html = (out / "report.html").read_text()
    assert "What the run says" in html and html.count("data:image/png;base64,") == 6
    # the board adds files, never changes the run's own
    res = RUNNER.invoke(app, [*args, "--out", str(plain)])
    assert res.exit_code == 0, res.output
    assert (out / "summary.json").read_bytes() == (plain / "summary.json").read_bytes()
    assert (out / "requests.parquet").read_bytes() == (plain / "requests.parquet").read_bytes()
    # rerunning into the board's directory replaces it (its files are the run's)
    res = RUNNER.invoke(app, [*args, "--out", str(out), "--report", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert (out / "steps.csv").exists() and (out / "report.html").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert math.isfinite(summary["p99_itl_ms"])


@pytest.mark.parametrize("extra, message", [
    ([], "--report writes report.html into the --out directory"),
    (["--out", "OUT", "--steps", "sample:10"], "--report reads every step; drop --steps "
                                               "sample:10"),
])
def test_report_refuses_what_it_cannot_draw(extra, message, tmp_path):
    extra = [str(tmp_path / "o") if a == "OUT" else a for a in extra]
    res = RUNNER.invoke(app, ["run", "-n", "5", "--report", *extra])
    assert res.exit_code != 0
    assert message in str(res.exception) + res.output


def test_measured_windows_read_a_bench_results_requests_as_the_board_does():
    """A bench result's per-request arrival, TTFT and gap lists give the same windows as
    the records would: token times are arrival + TTFT + the gaps so far."""
    from chunksim.reports.board import measured_windows

    ttft, itl = measured_windows([0.0, 1.0], [0.5, 0.2], [[0.1, 0.6], [0.05]],
                                 ["a", "b"], 1.0, 3.0)
    allc = itl[itl["request_class"] == "all"].set_index("t_s")
    # request 0 tokens at 0.6 (1st), 0.7, 1.3; request 1 at 1.2 (1st), 1.25
    assert allc.loc[0.0, "count"] == 1 and allc.loc[0.0, "p50_ms"] == pytest.approx(100.0)
    assert allc.loc[1.0, "count"] == 2
    assert sorted(itl[itl["t_s"] == 1.0]["request_class"]) == ["a", "all", "b"]
    assert ttft[ttft["request_class"] == "all"]["count"].tolist() == [1, 1]


def test_a_long_run_reads_every_kth_request(linear_profile):
    res, _ = _run(linear_profile, "budget", max_num_batched_tokens=512)
    full, every = token_gaps(res.requests, res.steps)
    cap = len(full) // 3
    few, k = token_gaps(res.requests, res.steps, max_gaps=cap)
    assert every == 1 and k == math.ceil(len(full) / cap) >= 3
    assert 0 < len(few) < len(full) / 2


@pytest.mark.parametrize("fleet", [["--replicas", "2", "--router", "least-tokens"],
                                   ["--pd", "1:1"]])
@pytest.mark.slow
def test_the_board_reads_a_fleet(fleet, tmp_path):
    res = RUNNER.invoke(app, ["run", "-n", "60", "--rate", "8", *fleet, "--out",
                              str(tmp_path / "f"), "--report"])
    assert res.exit_code == 0, res.output
    from chunksim.sim.records.outputs import read_table

    steps = read_table(tmp_path / "f" / "steps.parquet")
    req = read_table(tmp_path / "f" / "requests.parquet")
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    gaps, _ = token_gaps(req, steps, prefill_instances=summary["fleet"].get(
        "prefill_instances") or 0)
    done = req[req["generated_tokens"] >= 2]
    assert len(gaps) == int((done["generated_tokens"] - 1).sum())
    assert gaps["exact"].mean() > 0.5  # each request's tokens found on its own engine
    w = engine_windows(steps, 1.0)
    assert (w["busy_fraction"] <= 1.0 + 1e-9).all()


@pytest.mark.parametrize("fleet", [{"replicas": 2, "router": "least-tokens"}, {"pd": "1:2"}])
def test_fleet_gaps_are_the_fleets_own_gaps(linear_profile, fleet):
    """Each request's tokens are found on the engine that made them: the gaps equal the
    fleet's pooled ITL samples (a P/D request's first gap spans its KV transfer)."""
    from chunksim.sim.fleet.config import FleetConfig

    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(0.05, 80))
    specs = tuple(RequestSpec(i, float(t), int(rng.integers(20, 1500)),
                              int(rng.integers(2, 40))) for i, t in enumerate(arrivals))
    res, summary = simulate(Workload("fleet", specs), linear_profile,
                            RunConfig(kv_blocks=4000, fleet=FleetConfig(**fleet)))
    pool = (summary.get("fleet") or {}).get("prefill_instances") or 0
    gaps, _ = token_gaps(res.requests, res.steps, prefill_instances=pool)
    assert gaps["exact"].all()
    assert np.allclose(np.sort(gaps["gap_s"]), np.sort(res.itl_s), rtol=0, atol=1e-9)


def test_a_run_too_long_for_the_board_keeps_its_files_and_says_so(tmp_path, monkeypatch):
    import chunksim.reports.board as board

    monkeypatch.setattr(board, "MAX_STEPS", 10)
    out = tmp_path / "long"
    res = RUNNER.invoke(app, ["run", "-n", "20", "--out", str(out), "--report"])
    assert res.exit_code != 0
    assert "--report reads every step into memory" in str(res.exception) + res.output
    assert (out / "summary.json").exists() and not (out / "report.html").exists()

"""Runs at scale: bounded records (fixed step buffers, thinned or streamed steps, pooled
gaps folded into a streaming quantile past a cap), finished requests released, columnar
workloads, Parquet/CSV outputs, the memory estimate."""

from __future__ import annotations

import gc
import json
import tracemalloc

import numpy as np
import pandas as pd
import pytest
from factories import workload
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import chunksim.sim.records.records as records
from chunksim.cli import app
from chunksim.cli.memory import check_memory, estimate_bytes
from chunksim.core.spec import RequestSpec, SpecTable, Workload
from chunksim.progress import DelayedProgress, clock_text
from chunksim.sim.records.outputs import OutputFormat, StepFileWriter, read_table, table_names
from chunksim.sim.records.quantiles import REL_ERROR, LogHistogram
from chunksim.sim.records.records import StepLog, parse_steps_keep
from chunksim.sim.run import RunConfig, simulate, write_outputs
from chunksim.workloads.build import workload_from_arrays
from chunksim.workloads.synthetic import SyntheticConfig, generate


def _chat(n: int, seed: int = 3) -> Workload:
    from chunksim.workloads.arrivals import ArrivalProcess
    from chunksim.workloads.lengths import LogNormal

    return generate(SyntheticConfig(arrivals=ArrivalProcess(rate_per_s=20.0),
                                    prompt=LogNormal(300, 200, 1, 2000),
                                    output=LogNormal(60, 40, 1, 300),
                                    num_requests=n, seed=seed))


# ------------------------------------------------------------------ streaming quantile
@given(st.lists(st.tuples(st.floats(1e-6, 50.0), st.integers(1, 5)), min_size=1,
                max_size=300),
       st.lists(st.floats(0.0, 100.0), min_size=1, max_size=6))
def test_log_histogram_percentiles_are_within_the_bound(pairs, ps):
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    h = LogHistogram()
    for v, w in pairs:  # weighted samples, as runs of equal gaps arrive
        h.add([v], w)
    exact = np.repeat(values, weights)
    want = np.percentile(exact, ps)
    got = h.percentile(ps)
    assert np.all(np.abs(got - want) <= REL_ERROR * want + 1e-15)
    assert len(h) == len(exact) and h.max == exact.max() and h.min == exact.min()
    assert h.mean == pytest.approx(exact.mean(), rel=1e-9)
    assert h.std == pytest.approx(exact.std(), rel=1e-6, abs=1e-12)


def test_log_histogram_merges_as_one():
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(-3, 1, 5000), rng.lognormal(-2, 0.5, 3000)
    one, left, right = LogHistogram(), LogHistogram(), LogHistogram()
    one.add(np.concatenate([a, b]))
    left.add(a)
    right.add(b)
    left.merge(right)
    np.testing.assert_array_equal(left.counts, one.counts)
    assert left.percentile([99])[0] == one.percentile([99])[0]


def test_gaps_past_the_cap_stream_within_the_bound(monkeypatch, linear_profile):
    w = _chat(300)
    _, exact = simulate(w, linear_profile, RunConfig(chunk=512))
    monkeypatch.setattr(records, "EXACT_GAP_SAMPLES", 2000)
    res, streamed = simulate(w, linear_profile, RunConfig(chunk=512))
    assert not res.itl_s.exact and len(res.itl_s) > 2000
    for k in ("median_itl_ms", "p90_itl_ms", "p99_itl_ms"):
        assert abs(streamed[k] - exact[k]) <= REL_ERROR * exact[k]
    assert streamed["mean_itl_ms"] == pytest.approx(exact["mean_itl_ms"], rel=1e-9)
    assert streamed["max_decode_stall_ms"] == exact["max_decode_stall_ms"]
    rest = {k for k in exact if "itl" not in k and k != "max_decode_stall_ms"}
    assert {k: streamed[k] for k in rest} == {k: exact[k] for k in rest}


# ------------------------------------------------------------------ steps
def _frames(linear_profile, **kw):
    w = _chat(120)
    return simulate(w, linear_profile, RunConfig(chunk=256), **kw)


def test_small_step_buffers_thinning_and_sinks_give_the_same_rows(monkeypatch,
                                                                   linear_profile):
    full, s_full = _frames(linear_profile)
    monkeypatch.setattr(records, "STEP_CHUNK_ROWS", 7)  # many flushes, runs split across
    monkeypatch.setattr(records.StepLog.__init__, "__defaults__",
                        (7, 1, None, None))
    small, s_small = _frames(linear_profile)
    pd.testing.assert_frame_equal(small.steps, full.steps)
    assert s_small == s_full
    third, s_third = _frames(linear_profile, steps_keep=3)
    pd.testing.assert_frame_equal(third.steps,
                                  full.steps.iloc[::3].reset_index(drop=True))
    none, s_none = _frames(linear_profile, steps_keep=0)
    assert len(none.steps) == 0 and s_none == s_full  # the summary counts every step
    got: list[pd.DataFrame] = []
    sunk, s_sunk = _frames(linear_profile, steps_sink=lambda c: got.append(pd.DataFrame(c)))
    assert len(sunk.steps) == 0 and s_sunk == s_full
    pd.testing.assert_frame_equal(pd.concat(got, ignore_index=True), full.steps)


@pytest.mark.parametrize("fleet", ["replicas", "pd"])
def test_a_fleet_keeps_none_some_or_all_of_its_merged_steps(linear_profile, fleet):
    """A fleet's --steps none keeps no rows without merging them, with the merged steps'
    columns and types; every choice leaves the summary as it is."""
    from dataclasses import replace

    from chunksim.sim.fleet.config import FleetConfig

    fc = FleetConfig(replicas=3) if fleet == "replicas" else FleetConfig(pd="1:2")
    cfg = replace(RunConfig(chunk=256), fleet=fc)
    w = _chat(90)
    full, s_full = simulate(w, linear_profile, cfg)
    whole = full.steps
    assert len(whole) == s_full["steps"] > 0
    none, s_none = simulate(w, linear_profile, cfg, steps_keep=0)
    assert s_none == s_full and len(none.steps) == 0
    assert list(none.steps.columns) == list(whole.columns)
    assert list(none.steps.dtypes) == list(whole.dtypes)
    third, s_third = simulate(w, linear_profile, cfg, steps_keep=3)
    assert s_third == s_full
    pd.testing.assert_frame_equal(third.steps, whole.iloc[::3].reset_index(drop=True))


def test_step_totals_match_the_frame(linear_profile):
    res, s = _frames(linear_profile)
    log = StepLog(capacity=5)
    for row in res.steps.itertuples(index=False):
        log.append(tuple(row))
    t = log.close()
    assert (t.n, t.extrapolated, t.peak_kv_blocks) == (
        s["steps"], s["extrapolated_steps"], s["peak_kv_blocks_used"])
    assert t.busy_s == pytest.approx(res.steps.duration_s.sum(), rel=1e-12)


@pytest.mark.parametrize("text,keep", [("all", 1), ("none", 0), ("sample:10", 10),
                                       ("sample=3", 3), ("Sample 2", 2), (5, 5)])
def test_steps_values_parse(text, keep):
    assert parse_steps_keep(text) == keep


@pytest.mark.parametrize("text", ["some", "sample:0", "sample:x", "sample", "-1", -1])
def test_bad_steps_values_are_refused(text):
    with pytest.raises(ValueError, match="--steps"):
        parse_steps_keep(text)


# ------------------------------------------------------------------ requests released
def _live_requests() -> int:
    from chunksim.core.request import Request

    gc.collect()
    return sum(type(o) is Request for o in gc.get_objects())


@pytest.mark.slow
def test_finished_requests_are_released(linear_profile):
    from chunksim.sim.build import engine_parts
    from chunksim.sim.engine.core import EngineCore

    w = _chat(80)
    cfg = RunConfig(chunk=512)
    kv = engine_parts(w, linear_profile, cfg).kv
    before = _live_requests()
    core = EngineCore(w, cfg.make_policy(), kv)
    now, steps, seen = 0.0, 0, []
    while not core.done:  # a bare stepping loop: 10 ms steps
        core.pull_arrivals(now)
        if core.idle:
            now = core.next_arrival_s
            continue
        plan = core.plan(now)
        if plan is None:
            continue
        shape = core.begin_step(plan, now)
        core.end_step(plan, shape, now, now + 0.01)
        now += 0.01
        steps += 1
        plan = shape = None  # the step's plan names requests that just finished
        if steps % 401 == 0:
            alive = _live_requests() - before
            assert alive <= len(core.running) + len(core.waiting)
            seen.append(alive)
    assert core.finished == 80 and max(seen) > 1
    assert _live_requests() == before  # the core keeps records, not requests


@pytest.mark.slow
def test_memory_does_not_grow_with_finished_requests(linear_profile):
    def peak(n: int) -> int:
        w = _chat(n, seed=5)
        gc.collect()
        tracemalloc.start()
        simulate(w, linear_profile, RunConfig(chunk=512), steps_keep=0)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(1000), peak(4000)
    # records are ~100 B a request (columns and the requests table); steps and gaps are
    # bounded; the rest does not grow (it once grew by ~25 KB a request)
    assert (large - small) / 3000 < 2000


# ------------------------------------------------------------------ columnar workloads
def test_workload_columns_read_as_specs():
    w = workload_from_arrays("t", [2.0, 0.5, 1.0], [10, 20, 30], [1, 2, 3],
                             prefix_hashes=[(1, 2), (), (3,)],
                             request_class=["b", "a", "b"], priority=[0, 2, 1],
                             conversation_id=[None, "c1", "c2"], prefix_block_tokens=16)
    assert isinstance(w.requests, SpecTable)
    want = (RequestSpec(0, 0.5, 20, 2, (), "a", 2, "c1"),
            RequestSpec(1, 1.0, 30, 3, (3,), "b", 1, "c2"),
            RequestSpec(2, 2.0, 10, 1, (1, 2), "b", 0, None))
    assert tuple(w.requests) == want and w.requests[-1] == want[-1]
    assert w == Workload("t", want, 16)
    assert w.requests[0:2] == list(want[:2])


@given(reads=st.lists(st.integers(-300, 299), min_size=1, max_size=600))
def test_spec_table_reads_agree_whatever_it_kept(reads):
    """Any order of reads (repeats, negative indices, more distinct ones than it keeps)
    gives each row's spec as a fresh table builds it, and the table keeps a bounded
    window of them."""
    from chunksim.core import spec as spec_mod

    w = _chat(300)
    specs = w.requests
    fresh = SpecTable(specs.arrival_s, specs.prompt_tokens, specs.output_tokens,
                      specs.class_codes, specs.class_names)
    for i in reads:
        got = specs[i]
        fresh._recent.clear()
        fresh._last = (None, None)
        assert got == fresh[i] and got.request_id == i % len(specs)
        assert len(specs._recent) <= spec_mod.RECENT_SPECS


def test_columnar_and_object_workloads_simulate_alike(linear_profile):
    w = _chat(150)
    as_tuple = Workload(w.name, tuple(w.requests), w.prefix_block_tokens, w.notes, w.params)
    a, sa = simulate(w, linear_profile, RunConfig(chunk=512))
    b, sb = simulate(as_tuple, linear_profile, RunConfig(chunk=512))
    assert sa == sb
    pd.testing.assert_frame_equal(a.requests, b.requests)


# ------------------------------------------------------------------ outputs
@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_tables_round_trip(fmt, tmp_path, linear_profile):
    res, s = simulate(_chat(60), linear_profile, RunConfig(chunk=512), schedule_log=True)
    write_outputs(tmp_path, res, s, fmt)
    req, steps, sched = (read_table(tmp_path / n) for n in table_names(fmt))
    if fmt is OutputFormat.CSV:  # CSV reads "" as missing
        req["reject_reason"] = req["reject_reason"].astype(object).fillna("")
    pd.testing.assert_frame_equal(req, res.requests, check_dtype=False)
    pd.testing.assert_frame_equal(steps, res.steps)
    sched["kind"] = sched["kind"].astype(str)
    pd.testing.assert_frame_equal(sched, res.schedule.assign(kind=res.schedule.kind.astype(str)))
    stream = StepFileWriter(tmp_path / f"streamed.{fmt.value}", fmt)
    for lo in range(0, len(res.steps), 40):
        part = res.steps.iloc[lo : lo + 40]
        stream({k: part[k].to_numpy() for k in part.columns})
    pd.testing.assert_frame_equal(read_table(stream.close()), res.steps)
    if fmt is OutputFormat.CSV:  # streamed CSV is the whole frame's, byte for byte
        assert (tmp_path / "streamed.csv").read_bytes() == (tmp_path / "steps.csv").read_bytes()


def _run(tmp_path, *extra):
    return CliRunner().invoke(app, ["run", "-n", "40", "--rate", "20", *extra])


def test_cli_steps_and_format(tmp_path):
    outs = {}
    for name, extra in (("all", []), ("csv", ["--format", "csv"]),
                        ("none", ["--steps", "none"]), ("every5", ["--steps", "sample:5"])):
        d = tmp_path / name
        res = _run(tmp_path, "--out", str(d), *extra)
        assert res.exit_code == 0, res.output
        outs[name] = d
    summary = (outs["all"] / "summary.json").read_bytes()
    assert all((d / "summary.json").read_bytes() == summary for d in outs.values())
    n = json.loads(summary)["steps"]
    full = pd.read_parquet(outs["all"] / "steps.parquet")
    assert len(full) == n
    pd.testing.assert_frame_equal(pd.read_csv(outs["csv"] / "steps.csv"), full)
    assert sorted(p.name for p in outs["none"].iterdir()) == ["requests.parquet",
                                                              "summary.json"]
    every5 = pd.read_parquet(outs["every5"] / "steps.parquet")
    pd.testing.assert_frame_equal(every5, full.iloc[::5].reset_index(drop=True))
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # staging gone


@pytest.mark.slow
def test_cli_refuses_bad_output_flags(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "chunksim.cli", "run", "-n", "3", "--out",
                           str(tmp_path / "o"), "--steps", "most"], capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: --steps 'most': use all, none or sample:N")
    res = _run(tmp_path, "--out", str(tmp_path / "o"), "--format", "xml")
    assert res.exit_code == 2 and "--format" in res.output
    for flags in (["--steps", "none"], ["--format", "csv"], ["--steps", "all"]):
        res = _run(tmp_path, *flags)  # no --out: the flag would be silently ignored
        assert isinstance(res.exception, ValueError), flags
        assert f"{flags[0]} only shapes what --out writes" in str(res.exception)
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ memory, progress
def test_memory_estimate_refuses_what_does_not_fit():
    assert estimate_bytes(10**6, 1) > estimate_bytes(10**6, 10) > estimate_bytes(10**6, 0)
    with pytest.raises(ValueError, match="--steps none.*--num-requests"):
        check_memory(10**7, 1, available=2**30)
    with pytest.raises(ValueError, match=r"10,000,000 requests needs about [\d.]+ GiB"):
        check_memory(10**7, 0, available=2**30)
    assert check_memory(1000, 0, available=2**34) == estimate_bytes(1000, 0)


def test_progress_shows_simulated_time(const_profile):
    labels: list[str] = []

    class Bar:
        def __init__(self, label, total=0, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def advance(self, n=1):
            pass

        def describe(self, text):
            labels.append(text)

    w = workload([(i * 0.02, 20, 20) for i in range(3000)])
    with DelayedProgress("simulating", after_s=0.0, bar=Bar) as p:
        simulate(w, const_profile, RunConfig(), progress=p)
    assert labels and labels[-1].startswith("simulating (") and "simulated" in labels[-1]
    assert (clock_text(42), clock_text(725), clock_text(3 * 3600 + 7 * 60),
            clock_text(2 * 86400 + 4 * 3600)) == ("42 s", "12 min 5 s", "3 h 07 min",
                                                  "2 d 04 h")

"""`sim sweep`: resumable, atomic, deterministic tables; the runner's backends."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.sweep import sweep
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import make_configs, parse_floats, parse_ints, parse_policies
from chunksim.sweep.grid import KEY_COLUMNS, grid_points, options_hash, parse_workloads
from chunksim.sweep.job import SimJob
from chunksim.sweep.runner import Runner
from chunksim.sweep.table import ResultTable, cell
from chunksim.workloads import WorkloadKind, WorkloadOptions

app = typer.Typer()
app.command("sweep")(sweep)
app.command("other")(lambda: None)
cli = CliRunner()
SMALL = ["--num-requests", "30", "--prompt-mean", "256", "--output-mean", "32"]


def _sweep(profile, out, *args):
    res = cli.invoke(app, ["sweep", "--profile", profile.path, *SMALL, "--out", str(out),
                           "--workers", "1", *args])
    assert res.exit_code == 0, res.output
    return res.output


def test_resume_skips_done_points_and_matches_a_fresh_run(linear_profile, tmp_path):
    part, fresh = tmp_path / "part.csv", tmp_path / "fresh.csv"
    grid = ["--policies", "whole,budget", "--chunks", "256,1024", "--rates", "2,8"]
    out = _sweep(linear_profile, part, *grid, "--seeds", "0")
    assert "6 simulated" in out
    out = _sweep(linear_profile, part, *grid, "--seeds", "0,1")
    assert "6 simulated, 6 already" in out
    out = _sweep(linear_profile, part, *grid, "--seeds", "0,1")
    assert "0 simulated, 12 already" in out
    _sweep(linear_profile, fresh, *grid, "--seeds", "1,0")
    # rows ordered by configuration, cells formatted once: byte-identical
    assert part.read_bytes() == fresh.read_bytes()
    lines = part.read_text().splitlines()
    assert lines[0].startswith(",".join(KEY_COLUMNS))
    assert len(lines) == 13
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp files


def test_workloads_axis_and_options_hash(linear_profile, tmp_path):
    out = tmp_path / "w.csv"
    _sweep(linear_profile, out, "--policies", "budget", "--chunks", "512",
           "--workloads", "poisson,burst")
    _sweep(linear_profile, out, "--policies", "budget", "--chunks", "512",
           "--workloads", "poisson", "--kv-blocks", "4096")  # other setting: a new row
    rows = out.read_text().splitlines()[1:]
    assert len(rows) == 3
    assert {r.split(",")[0] for r in rows} == {"poisson", "burst"}
    assert len({r.split(",")[5] for r in rows}) == 2


def test_options_hash_ignores_axes_only():
    w, r = WorkloadOptions(), RunConfig()
    h = options_hash(w, r, "abc")
    assert h == options_hash(dataclasses.replace(w, rate=9.0, seed=3), r, "abc")
    assert h != options_hash(w, dataclasses.replace(r, kv_blocks=100), "abc")
    assert h != options_hash(w, r, "abd")


def test_grid_points_cover_the_product():
    configs = make_configs(parse_policies("whole,chunk"), [256, 512])
    pts = grid_points(WorkloadOptions(), RunConfig(), "x", [WorkloadKind.POISSON],
                      configs, [1.0, 2.0], [0, 1, 2])
    assert len(pts) == 3 * 2 * 3
    assert len({tuple(p.key.values()) for p in pts}) == len(pts)


def test_table_refuses_a_foreign_csv(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a sweep table"):
        ResultTable(path, KEY_COLUMNS, sort_key=lambda r: ())


@pytest.mark.parametrize("fn,text,flag", [
    (lambda t: parse_ints(t, "--chunks"), "0", "--chunks"),
    (lambda t: parse_floats(t, "--rates"), "1,x", "--rates"),
    (lambda t: parse_floats(t, "--rates"), "-2", "--rates"),
    (lambda t: parse_workloads(t, WorkloadOptions()), "poison", "--workloads"),
    (parse_policies, "", "--policies"),
])
def test_bad_lists_name_the_flag(fn, text, flag):
    with pytest.raises(ValueError, match=flag):
        fn(text)


def test_cells_are_deterministic_text():
    assert cell(None) == "" and cell(True) == "true" and cell(0.1) == "0.1"
    assert cell({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert cell(WorkloadKind.POISSON) == "poisson"


def test_runner_rejects_zero_workers(linear_profile):
    with pytest.raises(ValueError, match="--workers"):
        Runner(linear_profile, workers=0)


def test_ray_local_mode(linear_profile):
    ray = pytest.importorskip("ray")
    configs = make_configs(parse_policies("whole,budget"), [512])
    w = WorkloadOptions(num_requests=20, prompt_mean=128, output_mean=16)
    jobs = [SimJob(w, RunConfig(), c) for c in configs]
    ray.init(local_mode=True, ignore_reinit_error=True, include_dashboard=False)
    try:
        with Runner(linear_profile, ray_address="local") as runner:
            got = runner.map(jobs)
    finally:
        ray.shutdown()
    with Runner(linear_profile, workers=1) as runner:
        want = runner.map(jobs)
    assert [g.summary for g in got] == [x.summary for x in want]


def test_features_left_off_keep_the_digest_older_sweep_tables_carry():
    """A sweep table written before speculative decoding, the CPU KV tier and MoE routing
    skew existed resumes: with them off, the digest of the default settings is the one
    that version wrote (3847764aaad5, since the defaults follow vLLM 0.32.0: a table run
    under the older defaults, 16-token blocks on CPU and 0.9 memory utilization, does not
    resume into this one); each one switched on changes it."""
    from chunksim.core.speculative import SpecConfig
    from chunksim.sim.engine.engine import EngineConfig
    from chunksim.sim.engine.offload_config import OffloadConfig

    w, r = WorkloadOptions(), RunConfig()
    assert options_hash(w, r, "abc") == "3847764aaad5"
    on = [dataclasses.replace(r, expert_skew=1.0),
          dataclasses.replace(r, offload=OffloadConfig(kv_offload_gib=4.0)),
          dataclasses.replace(r, engine=EngineConfig(speculative=SpecConfig(
              speculative_method="ngram", num_speculative_tokens=2,
              spec_acceptance_rate=0.5)))]
    assert len({options_hash(w, x, "abc") for x in on} | {"3847764aaad5"}) == 4

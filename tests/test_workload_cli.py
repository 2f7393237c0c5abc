"""`sim workload describe` through Typer's CliRunner."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.workload import describe
from chunksim.workloads import sample_path

app = typer.Typer()
app.command("describe")(describe)
app.command("other")(lambda: None)  # two commands, so `describe` is a real subcommand
runner = CliRunner()


def _json(args):
    res = runner.invoke(app, ["describe", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_describe_sample_trace_json():
    s = _json([str(sample_path("mooncake-synthetic"))])
    assert s["num_requests"] == 300 and s["prefix_block_tokens"] == 512
    assert 0 < s["prefix_reuse_fraction"] < 1


def test_describe_trace_flags_apply():
    s = _json(["--trace", str(sample_path("azure-conv")), "--rate", "10", "-n", "100"])
    assert s["num_requests"] == 100 and s["mean_rate_per_s"] == pytest.approx(10.0)


def test_describe_synthetic_table():
    res = runner.invoke(
        app, ["describe", "-w", "long-prompt", "--rate", "2"], env={"COLUMNS": "120"}
    )
    assert res.exit_code == 0, res.output
    assert "num_requests" in res.output and "long request" in res.output


def test_describe_plot_writes_png(tmp_path):
    png = tmp_path / "w.png"
    s = _json(["-w", "gamma", "--burstiness", "0.5", "-n", "200", "--plot", str(png)])
    assert s["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_describe_bad_input_raises_value_error_for_main_to_print(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    res = runner.invoke(app, ["describe", str(bad)])
    assert isinstance(res.exception, ValueError) and "x.csv" in str(res.exception)


def test_registered_on_sim_cli():
    cli = pytest.importorskip("chunksim.cli")
    res = runner.invoke(
        cli.app, ["workload", "describe", str(sample_path("burstgpt-v1")), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["classes"] == {"conversation": 276, "api": 108}

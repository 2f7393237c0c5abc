"""`sim compare`: table shape, determinism, and every report file produced."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.compare import compare
from chunksim.sim.run import RunConfig
from chunksim.sweep.compare import KEY_COLUMNS, run_comparison
from chunksim.sweep.configs import make_configs, parse_policies
from chunksim.sweep.runner import Runner
from chunksim.workloads import WorkloadKind, WorkloadOptions

# A small long-prompt scenario: a 4096-token prompt into 8 s of 4 req/s chat.
SMALL_LONG = WorkloadOptions(workload=WorkloadKind.LONG_PROMPT, duration_s=8.0,
                             long_arrival_s=3.0, long_prompt_tokens=4096,
                             long_output_tokens=32)
SMALL_ARGS = ["-w", "long-prompt", "--duration", "8", "--long-arrival", "3",
              "--long-prompt-tokens", "4096", "--long-output-tokens", "32"]

app = typer.Typer()
app.command("compare")(compare)
app.command("other")(lambda: None)  # two commands, so `compare` is a real subcommand
cli = CliRunner()


def _compare(profile, workers=1, policies="whole,chunk,budget", chunks=(256, 1024)):
    configs = make_configs(parse_policies(policies), list(chunks))
    with Runner(profile, workers) as runner:
        return run_comparison(configs, SMALL_LONG, RunConfig(), runner, keep_records=False)


def test_table_has_one_row_per_configuration_and_every_metric(linear_profile):
    comp = _compare(linear_profile)
    csv = comp.csv().splitlines()
    header = csv[0].split(",")
    assert header[:3] == list(KEY_COLUMNS)
    # whole ignores the chunk size: it appears once
    assert [r.split(",")[0] for r in csv[1:]] == [
        "whole", "chunk 256", "chunk 1024", "budget 256", "budget 1024"]
    for key in comp.summaries[0]:
        assert key in header, key
    frame = comp.frame()
    assert len(frame) == 5 and frame["p99_itl_ms"].notna().all()
    rows = comp.json_rows()
    assert rows[0]["chunk"] is None and rows[1]["chunk"] == 256
    assert rows[3]["policy"] == "budget"
    assert rows[3]["policy_params"]["max_num_batched_tokens"] == 256


def test_same_seed_gives_identical_tables(linear_profile):
    a = _compare(linear_profile).csv()
    b = _compare(linear_profile).csv()
    assert a == b


def test_worker_processes_give_the_table_of_an_inline_run(linear_profile):
    assert _compare(linear_profile, workers=2).csv() == _compare(linear_profile).csv()


@pytest.mark.slow  # the CLI's whole report: every figure as PNG and SVG, HTML, Markdown
def test_cli_writes_every_report_file(linear_profile, tmp_path):
    out = tmp_path / "report"
    res = cli.invoke(app, ["compare", "--profile", linear_profile.path, *SMALL_ARGS,
                           "--policies", "whole,chunk,budget", "--chunks", "512,2048",
                           "--workers", "1", "--goodput", "itl=50", "--svg",
                           "--out", str(out)],
                     env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    # 4 req/s is far below saturation: the throughput bars are dropped, with a sentence
    stems = ("latency_cdf", "tradeoff", "step_timeline", "latency_table")
    expected = (["comparison.csv", "comparison.json", "report.md", "report.html"]
                + [f"{s}.{ext}" for s in stems for ext in ("png", "svg")])
    for name in expected:
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert not (out / "throughput.png").exists()
    for s in stems:  # a real PNG, not an empty canvas
        assert (out / f"{s}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{s}.png").stat().st_size > 10_000, s
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(stems)
    assert "src='http" not in html and 'src="http' not in html  # self-contained
    assert "name='viewport'" in html and "id='verdict'" in html
    assert html.index("id='verdict'") < html.index("<h2>Results")  # the answer comes first
    for s in stems:  # each figure links to its full-size file
        assert f"href='{s}.svg'" in html
    md = (out / "report.md").read_text()
    for s in stems:
        assert f"({s}.png)" in md
    assert "Metric definitions" in md and linear_profile.sha256 in md
    assert "No throughput chart" in md and "**Recommended:" in md and "**Runner-up:" in md
    assert "3 seeds (0, 1, 2)" in md and "defaults; set yours with --slo" in md
    assert "class long (1 request per run)" in md  # the long prompt has its own rows
    doc = json.loads((out / "comparison.json").read_text())
    assert len(doc["rows"]) == 5 and doc["profile"]["sha256"] == linear_profile.sha256
    assert doc["rows"][0]["request_goodput"] is not None and doc["seeds"] == [0, 1, 2]
    assert doc["verdict"]["recommended"]["config"] in [r["config"] for r in doc["rows"]]
    rows = (out / "comparison.csv").read_text().splitlines()
    assert len(rows) == 1 + 5 * 3  # a row per configuration and seed
    assert "budget 512" in res.output and "Recommended:" in res.output


@pytest.mark.slow
def test_reproduce_line_resolves_every_default(linear_profile, tmp_path):
    out = tmp_path / "r"
    res = cli.invoke(app, ["compare", "--profile", linear_profile.path, *SMALL_ARGS,
                           "--policies", "budget", "--chunks", "512", "--workers", "1",
                           "--seeds", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not list(out.glob("*.svg"))  # SVGs only when asked (--svg)
    assert "href='step_timeline.png'" in (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    line = md.split("## Reproduce")[1]
    # flags never typed appear with their defaults, so a changed default cannot drift it
    for flag in ("--seed 0", "--seeds 4", "--block-size 16", "--max-rate 1024.0", "--no-svg",
                 "--workload long-prompt", "--long-prompt-tokens 4096"):
        assert flag in line, flag
    assert "One seed" in md or "one seed" in md


def test_cli_tables_only_and_bad_flags(linear_profile, tmp_path):
    out = tmp_path / "t"
    res = cli.invoke(app, ["compare", "--profile", linear_profile.path, *SMALL_ARGS,
                           "--policies", "budget", "--chunks", "512", "--workers", "1",
                           "--no-report", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["comparison.csv", "comparison.json"]
    for args, flag in ((["--chunks", "512,abc"], "--chunks"),
                       (["--policies", "whole,fast"], "--policies"),
                       (["--policies", "whole:v1"], "--policies"),
                       (["--timeline-chunk", "64"], "--timeline-chunk")):
        res = cli.invoke(app, ["compare", "--profile", linear_profile.path, *SMALL_ARGS,
                               "--workers", "1", "--out", str(out), *args])
        assert isinstance(res.exception, ValueError) and flag in str(res.exception), args


@pytest.mark.parametrize("policies,n", [("whole", 1), ("whole,whole:mixed,budget", 4),
                                        ("chunk:two-pass,chunk", 4)])
def test_grid_deduplicates_and_orders(policies, n):
    configs = make_configs(parse_policies(policies), [512, 256])
    assert len(configs) == n
    assert configs == sorted(configs, key=lambda c: c.sort_key)

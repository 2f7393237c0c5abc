"""Workload options -> Workload: defaults, validation, and the flags derived from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from chunksim.cli.options import with_workload_options
from chunksim.workloads import (
    LengthKind,
    WorkloadKind,
    WorkloadOptions,
    build_workload,
    describe_workload,
    longest_request_id,
)


def test_default_is_poisson_chat_at_4rps():
    w = build_workload(WorkloadOptions())
    assert w.name == "poisson-4rps" and len(w) == 200
    assert w.params["prompt"]["mean_tokens"] == 1155 and w.params["output"]["mean_tokens"] == 211


def test_long_prompt_from_options_uses_short_chat_defaults():
    w = build_workload(WorkloadOptions(workload=WorkloadKind.LONG_PROMPT, long_prompt_tokens=6000))
    assert w.requests[longest_request_id(w)].prompt_tokens == 6000
    assert w.params["prompt"]["mean_tokens"] == 256 and w.params["duration_s"] == 30.0


def test_prompt_mean_alone_keeps_the_default_shape():
    w = build_workload(WorkloadOptions(prompt_mean=2310, num_requests=10))
    assert w.params["prompt"]["std_tokens"] == pytest.approx(1109 * 2, rel=1e-6)


@pytest.mark.parametrize(
    "opts, match",
    [
        (WorkloadOptions(burstiness=0.5), "gamma"),
        (WorkloadOptions(prompt_dist=LengthKind.UNIFORM, prompt_min=5), "--prompt-max"),
        (WorkloadOptions(output_dist=LengthKind.EMPIRICAL), "--lengths-csv"),
        (WorkloadOptions(workload=WorkloadKind.LONG_PROMPT, num_requests=5), "--duration"),
        (WorkloadOptions(workload=WorkloadKind.TRACE), "--trace PATH"),
        (WorkloadOptions(workload=WorkloadKind.BURST, duration_s=5.0), "--num-requests"),
    ],
)
def test_bad_combinations_say_the_fix(opts, match):
    with pytest.raises(ValueError, match=match):
        build_workload(opts)


def _lengths_csv(tmp_path: Path) -> Path:
    path = tmp_path / "lengths.csv"
    rows = ["num_prefill_tokens,num_decode_tokens,extra"]
    rows += [f"{p},{p // 10},x" for p in range(100, 1100, 10)]
    rows.append("0,5,x")  # invalid prompt -> skipped, not sampled
    path.write_text("\n".join(rows) + "\n")
    return path


def test_empirical_pairs_keep_the_row_correlation(tmp_path):
    path = _lengths_csv(tmp_path)
    opts = WorkloadOptions(
        prompt_dist=LengthKind.EMPIRICAL,
        output_dist=LengthKind.EMPIRICAL,
        lengths_csv=path,
        num_requests=300,
    )
    w = build_workload(opts)
    assert all(r.output_tokens == r.prompt_tokens // 10 for r in w.requests)
    assert w.params["prompt"]["count"] == 100


def test_empirical_missing_column_names_file_and_columns(tmp_path):
    path = _lengths_csv(tmp_path)
    opts = WorkloadOptions(prompt_dist=LengthKind.EMPIRICAL, lengths_csv=path, prompt_column="nope")
    with pytest.raises(ValueError, match=r"lengths.csv.*'nope'.*num_prefill_tokens"):
        build_workload(opts)


def test_capacity_search_can_replace_the_rate():
    base = WorkloadOptions(num_requests=2000)
    rates = [
        describe_workload(build_workload(replace(base, rate=r)))["mean_rate_per_s"]
        for r in (1.0, 10.0)
    ]
    assert rates[0] == pytest.approx(1.0, rel=0.1) and rates[1] == pytest.approx(10.0, rel=0.1)


def test_decorator_adds_every_flag():
    app = typer.Typer()
    seen = {}

    @app.command()
    @with_workload_options
    def run(policy: str, workload_opts: WorkloadOptions, chunk: int = 512) -> None:
        seen.update(policy=policy, chunk=chunk, opts=workload_opts)

    res = CliRunner().invoke(
        app,
        [
            "sarathi",
            "--chunk",
            "256",
            "-w",
            "long-prompt",
            "--long-prompt-tokens",
            "4096",
            "--rate",
            "3",
            "--window",
            "20",
            "--prompt-dist",
            "uniform",
            "--prompt-min",
            "10",
            "--prompt-max",
            "20",
            "--seed",
            "5",
        ],
    )
    assert res.exit_code == 0, res.output
    opts = seen["opts"]
    assert seen["policy"] == "sarathi" and seen["chunk"] == 256
    assert opts.workload is WorkloadKind.LONG_PROMPT and opts.long_prompt_tokens == 4096
    assert opts.duration_s == 20.0 and opts.seed == 5
    w = build_workload(opts)
    chat = [r.prompt_tokens for r in w.requests if r.request_class == "chat"]
    assert min(chat) >= 10 and max(chat) <= 20 and w.duration_s < 20
    help_text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert "--trace-format" in help_text and "--burstiness" in help_text


def test_seeded_options_are_deterministic():
    a = build_workload(WorkloadOptions(workload=WorkloadKind.GAMMA, burstiness=0.3, seed=9))
    b = build_workload(WorkloadOptions(workload=WorkloadKind.GAMMA, burstiness=0.3, seed=9))
    assert a == b
    assert np.isclose(a.params["burstiness"], 0.3)


def test_flags_of_the_other_kind_are_refused_not_ignored(tmp_path):
    from chunksim.workloads import sample_path

    with pytest.raises(ValueError, match="--prompt-mean do.*trace replay"):
        build_workload(WorkloadOptions(trace=sample_path("azure-conv"), prompt_mean=100))
    with pytest.raises(ValueError, match="--speedup, --start do.*--workload poisson"):
        build_workload(WorkloadOptions(speedup=2.0, start_s=5.0))

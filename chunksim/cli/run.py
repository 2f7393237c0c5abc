"""`sim run`: simulate one workload under one policy and write its records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.options import (
    ProfileOpt,
    with_output_options,
    with_run_options,
    with_workload_options,
)
from chunksim.sim.records.outputs import OutputConfig
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions, build_workload


@with_run_options
@with_workload_options
@with_output_options
def run(
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    output_cfg: OutputConfig,
    out: Annotated[Path | None, typer.Option("--out", help=(
        "Directory for summary.json and the requests and steps tables (Parquet, or CSV "
        "with --format csv), written as one set.")
    )] = None,
    as_json: Annotated[bool, typer.Option("--json", help=(
        "Print the summary as one JSON line, last on stdout."))] = False,
    schedule_log: Annotated[bool, typer.Option("--schedule-log", help=(
        "Also write the schedule table to --out: one row per (step, request) with the "
        "tokens scheduled, the kind (new, resumed, prefill, decode), the place in the batch "
        "and the prefix-cache hit at admission, and one row per preemption (blocks freed). "
        "Large for long runs."))] = False,
    report: Annotated[bool, typer.Option("--report", help=(
        "Also write the run board to --out: report.html with, over the run's time, waiting "
        "and running requests and the requests rejected, KV blocks in use, the share of "
        "time a step was in flight and the step budget used, prefill and decode tokens "
        "per step, TTFT and ITL percentiles per window by request class, and what they "
        "point at (SLOs: --goodput, else P99 TTFT 2 s and P99 ITL 100 ms)."))] = False,
    profile: ProfileOpt = None,
) -> None:
    """Simulate a workload under one scheduling policy and print TTFT/ITL/TPOT/E2EL.

    Examples: `sim run --policy budget --chunk 512`;
    `sim run --policy whole --workload long-prompt --out runs/whole`.
    """
    from chunksim.cli.memory import check_memory
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.cli.say import warn
    from chunksim.reports import run_flow
    from chunksim.reports.console import print_summary

    run_flow.check_run_flags(out, output_cfg, schedule_log, report)
    check_out_dir(out, replace=True)
    run_flow.refuse_foreign_run(out)
    profile = load_run_profile(profile, run_cfg)
    workload = build_workload(workload_opts)
    check_memory(len(workload), 0, engines=run_cfg.fleet.engine_count)
    result, summary, written = run_flow.simulate_to(
        out, workload, profile, run_cfg.variant(seed=workload_opts.seed), output_cfg,
        schedule_log, report)
    for warning in run_flow.run_warnings(result, summary, out, output_cfg, report):
        warn(warning)
    if not as_json:
        print_summary(summary)
        if out is not None:
            typer.echo(f"wrote {out}/{', '.join(written)}")
    else:
        typer.echo(json.dumps(summary, default=str))

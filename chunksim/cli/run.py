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
from chunksim.progress import DelayedProgress
from chunksim.sim.outputs import OutputConfig
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
    from chunksim import atomic
    from chunksim.cli.memory import check_memory
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.reports.console import print_summary
    from chunksim.sim.outputs import StepFileWriter, table_names
    from chunksim.sim.rejections import rejection_text
    from chunksim.sim.run import OUTPUT_FILES, nothing_completed, simulate, write_outputs

    if schedule_log and out is None:
        raise ValueError("--schedule-log writes the schedule table into the --out directory; "
                         "give --out DIR")
    if out is None and output_cfg.given():
        given = output_cfg.given()
        raise ValueError(f"{' and '.join(given)} only {'shape' if len(given) > 1 else 'shapes'}"
                         " what --out writes; "
                         "give --out DIR (a run without --out writes no tables)")
    if report and out is None:
        raise ValueError("--report writes report.html into the --out directory; give --out "
                         "DIR")
    if report and output_cfg.keep != 1:
        from chunksim.sim.records import steps_keep_label

        raise ValueError(f"--report reads every step; drop --steps "
                         f"{steps_keep_label(output_cfg.keep)}")
    check_out_dir(out, replace=True)
    foreign = atomic.foreign_entries(out, OUTPUT_FILES) if out is not None else []
    if foreign:
        raise ValueError(f"--out {out} holds {', '.join(foreign[:5])}, which a run's output "
                         "(summary.json, requests, steps, schedule tables) would replace; "
                         "give a new or empty directory")
    profile = load_run_profile(profile, run_cfg)
    workload = build_workload(workload_opts)
    # steps stream to --out as they are recorded; without --out nothing reads them
    keep = output_cfg.keep if out is not None else 0
    check_memory(len(workload), 0, engines=run_cfg.fleet.engine_count)
    staged = (atomic.staging_file(out, "steps") if out is not None and keep else None)
    try:
        writer = StepFileWriter(staged, output_cfg.table_format) if staged is not None else None
        with DelayedProgress("simulating") as progress:
            result, summary = simulate(workload, profile,
                                       run_cfg.variant(seed=workload_opts.seed),
                                       schedule_log, progress=progress, steps_keep=keep,
                                       steps_sink=writer)
        if writer is not None:
            writer.close()
        board = (_board(result, summary, run_cfg, staged, output_cfg)
                 if report and summary["completed"] and not _too_long(summary) else None)
        if out is not None:
            written = write_outputs(out, result, summary, output_cfg.table_format,
                                    steps=bool(keep), steps_file=staged, extra=board)
    finally:
        if staged is not None:
            staged.unlink(missing_ok=True)
    if report and _too_long(summary):
        raise ValueError(_too_long(summary) + (f"; the run's files are in {out}"))
    failed = nothing_completed(result, summary)
    if failed:
        where = (f" (records in {out}/{table_names(output_cfg.table_format)[0]})"
                 if out is not None else "")
        raise ValueError(failed + where)
    rejected = rejection_text(summary, result.rejected_examples)
    if rejected:  # the latencies below cover only the requests that completed
        typer.secho(f"warning: {rejected}", err=True, fg=typer.colors.YELLOW)
    for warning in summary["warnings"]:
        typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    if not as_json:
        print_summary(summary)
        if out is not None:
            typer.echo(f"wrote {out}/{', '.join(written)}")
    else:
        typer.echo(json.dumps(summary, default=str))


def _board(result, summary: dict, run_cfg: RunConfig, staged, output_cfg) -> dict[str, bytes]:
    """report.html and its figures: the run board (`reports.board`, `reports.run_board`)."""
    from chunksim.reports.board import STEP_FIELDS, build_board
    from chunksim.reports.run_board import render_board
    from chunksim.sim.outputs import OutputFormat
    from chunksim.sweep.slos import DEFAULT_SLOS

    steps = result.steps
    if staged is not None:  # streamed to the staged file while the run went
        import pandas as pd

        if output_cfg.table_format is OutputFormat.CSV:
            steps = pd.read_csv(staged, usecols=lambda c: c in STEP_FIELDS)
        else:
            import pyarrow.parquet as pq

            names = pq.read_schema(staged).names
            steps = pd.read_parquet(staged, columns=[c for c in STEP_FIELDS if c in names])
    slos = dict(run_cfg.slos_s) or {"ttft": DEFAULT_SLOS["p99_ttft_ms"] / 1000.0,
                                    "itl": DEFAULT_SLOS["p99_itl_ms"] / 1000.0}
    return render_board(build_board(result.requests, steps, summary, slos), summary)


def _too_long(summary: dict) -> str | None:
    """Why the board cannot be drawn for this run (None: it can)."""
    from chunksim.reports.board import MAX_STEPS

    n = int(summary.get("steps") or 0)
    if n <= MAX_STEPS:
        return None
    return (f"--report reads every step into memory and this run has {n:,} (most "
            f"{MAX_STEPS:,}); shorten it (--duration, --num-requests) for the board")

"""`sim run`: simulate one workload under one policy and write its records."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.options import ProfileOpt, with_run_options, with_workload_options
from chunksim.progress import DelayedProgress
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions, build_workload


@with_run_options
@with_workload_options
def run(
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    out: Annotated[Path | None, typer.Option("--out", help=(
        "Directory for summary.json, requests.csv, steps.csv (written atomically).")
    )] = None,
    as_json: Annotated[bool, typer.Option("--json", help=(
        "Print the summary as one JSON line, last on stdout."))] = False,
    schedule_log: Annotated[bool, typer.Option("--schedule-log", help=(
        "Also write schedule.csv to --out: one row per (step, request) with the tokens "
        "scheduled, the kind (new, resumed, prefill, decode), the place in the batch and "
        "the prefix-cache hit at admission, and one row per preemption (blocks freed). "
        "Large for long runs."))] = False,
    profile: ProfileOpt = None,
) -> None:
    """Simulate a workload under one scheduling policy and print TTFT/ITL/TPOT/E2EL.

    Examples: `sim run --policy budget --chunk 512`;
    `sim run --policy whole --workload long-prompt --out runs/whole`.
    """
    from chunksim import atomic
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.reports.console import print_summary
    from chunksim.sim.run import OUTPUT_FILES, nothing_completed, simulate, write_outputs

    if schedule_log and out is None:
        raise ValueError("--schedule-log writes schedule.csv into the --out directory; "
                         "give --out DIR")
    check_out_dir(out, replace=True)
    foreign = atomic.foreign_entries(out, OUTPUT_FILES) if out is not None else []
    if foreign:
        raise ValueError(f"--out {out} holds {', '.join(foreign[:5])}, which a run's output "
                         "(summary.json, requests.csv, steps.csv, schedule.csv) would "
                         "replace; give a new or empty directory")
    profile = load_run_profile(profile, run_cfg)
    workload = build_workload(workload_opts)
    with DelayedProgress("simulating", enabled=_stderr_is_terminal()) as progress:
        result, summary = simulate(workload, profile, run_cfg.variant(seed=workload_opts.seed),
                                   schedule_log, progress=progress)
    if out is not None:
        write_outputs(out, result, summary)
    failed = nothing_completed(result, summary)
    if failed:
        where = f" (records in {out}/requests.csv)" if out is not None else ""
        raise ValueError(failed + where)
    for warning in summary["warnings"]:
        typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    if not as_json:
        print_summary(summary)
        if out is not None:
            extra = ", schedule.csv" if schedule_log else ""
            typer.echo(f"wrote {out}/summary.json, requests.csv, steps.csv{extra}")
    else:
        typer.echo(json.dumps(summary, default=str))


def _stderr_is_terminal() -> bool:
    """A progress bar is for a person watching: only when stderr is a terminal."""
    return sys.stderr.isatty()

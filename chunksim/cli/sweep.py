"""`sim sweep`: a grid of simulations into one resumable CSV table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.grid_flags import (
    DEFAULT_CHUNKS,
    DEFAULT_POLICIES,
    ChunksOpt,
    PoliciesOpt,
    RayOpt,
    SpecTokensOpt,
    WorkersOpt,
)
from chunksim.cli.options import ProfileOpt, with_grid_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions


@with_grid_run_options
@with_workload_options
def sweep(
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    out: Annotated[Path, typer.Option("--out", help=(
        "CSV table to create or extend (rows already there are skipped)."))],
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    rates: Annotated[str | None, typer.Option("--rates", help=(
        "Comma list of request rates, req/s (default: --rate, or the workload's "
        "default)."))] = None,
    seeds: Annotated[str | None, typer.Option("--seeds", help=(
        "Comma list of seeds (default: --seed)."))] = None,
    workloads: Annotated[str | None, typer.Option("--workloads", help=(
        "Comma list of workload kinds, e.g. poisson,long-prompt (default: --workload); the other "
        "workload flags apply to each."))] = None,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    spec_tokens: SpecTokensOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Run a grid (policies x chunks x rates x seeds x workloads) into one resumable table.

    Rows are keyed by configuration; rerunning the same command resumes where it stopped.

    Example: `sim sweep --policies whole,budget --chunks 512,2048 --rates 2,4,8 --seeds
    0,1,2 --workloads poisson,long-prompt --out runs/sweep.csv`.
    """
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_file
    from chunksim.progress import ProgressBar
    from chunksim.sweep.grid import KEY_COLUMNS, row_sort_key, run_sweep
    from chunksim.sweep.grid_plan import sweep_points
    from chunksim.sweep.runner import Runner
    from chunksim.sweep.table import ResultTable

    check_out_file(out)
    profile, points = sweep_points(policies, chunks, spec_tokens, rates, seeds, workloads,
                                   run_cfg, workload_opts,
                                   lambda cfg: load_run_profile(profile, cfg))
    table = ResultTable(out, KEY_COLUMNS, row_sort_key)
    if table.dropped:
        typer.secho(f"note: {out} line(s) {', '.join(map(str, table.dropped))} are incomplete "
                    "(cut short); those grid points run again", err=True)
    before = len(table)
    try:
        with Runner(profile, workers, ray) as runner, ProgressBar("sweep") as bar:
            ran = run_sweep(points, table, runner, bar)
    except KeyboardInterrupt:
        from chunksim.cli.interrupts import command_as_typed, interrupted

        interrupted(f"{len(table)} of {len(points)} grid points are saved in {out} "
                    f"({len(table) - before} from this run); rerunning the command skips them",
                    command_as_typed())
    typer.echo(f"{len(points)} grid points: {ran} simulated, {len(points) - ran} already in "
               f"{out} ({before} rows before, {len(table)} now)")

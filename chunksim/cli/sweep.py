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
    from chunksim.sweep.configs import (
        make_configs,
        parse_floats,
        parse_ints,
        parse_policies,
        parse_spec_tokens,
        refuse_unused_knobs,
        with_spec_tokens,
    )
    from chunksim.sweep.grid import (
        KEY_COLUMNS,
        grid_points,
        parse_workloads,
        row_sort_key,
        run_sweep,
    )
    from chunksim.sweep.runner import Runner
    from chunksim.sweep.table import ResultTable
    from chunksim.workloads.options import build_workload

    check_out_file(out)
    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    ks = parse_spec_tokens(spec_tokens, run_cfg)
    if ks is not None:  # a setting here, not an axis (the table's keys have no column)
        if len(ks) > 1:
            raise ValueError(f"--num-speculative-tokens {spec_tokens}: sim sweep takes one "
                             "value (sim compare and sim capacity take a list)")
        run_cfg = with_spec_tokens(run_cfg, ks[0])
    configs = make_configs(specs, parse_ints(chunks, "--chunks"))
    rate_list = parse_floats(rates, "--rates") if rates is not None else [workload_opts.rate]
    seed_list = (parse_ints(seeds, "--seeds", minimum=0, example="0,1,2") if seeds is not None
                 else [workload_opts.seed])
    kinds = parse_workloads(workloads, workload_opts)
    profile = load_run_profile(profile, run_cfg)
    points = grid_points(workload_opts, run_cfg, profile.sha256, kinds, configs, rate_list,
                         seed_list)
    for kind in kinds:  # bad workload flags fail here, once, not in every worker
        build_workload(next(p.job.workload for p in points
                            if p.key["workload_kind"] == kind.value))
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

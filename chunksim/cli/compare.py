"""`sim compare`: one workload under several policies and chunk sizes -> table + report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.answer_tail import with_cost_options
from chunksim.cli.grid_flags import (
    DEFAULT_CHUNKS,
    DEFAULT_POLICIES,
    ChunksOpt,
    FleetOpt,
    MaxRejectOpt,
    PoliciesOpt,
    RayOpt,
    SeedsOpt,
    SloOpt,
    SpecTokensOpt,
    WorkersOpt,
    resolved_command,
)
from chunksim.cli.options import ProfileOpt, with_grid_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.sweep.cost import CostConfig
from chunksim.workloads.options import WorkloadOptions


@with_grid_run_options
@with_workload_options
@with_cost_options
def compare(
    ctx: typer.Context,
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    cost_cfg: CostConfig,
    out: Annotated[Path, typer.Option("--out", help=(
        "Directory for comparison.csv/.json, the plots, report.md and report.html."))],
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    fleet: FleetOpt = None,
    seeds: SeedsOpt = None,
    spec_tokens: SpecTokensOpt = None,
    slo: SloOpt = None,
    max_reject_pct: MaxRejectOpt = 0.0,
    capacity: Annotated[bool | None, typer.Option(
        "--capacity/--no-capacity", help=(
            "Also search each configuration's capacity under the SLOs (the verdict then "
            "ranks by capacity). Default: on when --slo is given."))] = None,
    max_rate: Annotated[float, typer.Option("--max-rate", min=0.0, help=(
        "With the capacity search: stop doubling the rate here, req/s."))] = 1024.0,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    timeline_chunk: Annotated[int | None, typer.Option(
        "--timeline-chunk", min=1, help=(
            "Chunk size of the chunked policies in the step timeline (default: the median of "
            "--chunks)."))] = None,
    svg: Annotated[bool, typer.Option("--svg/--no-svg", help=(
        "Also write every plot as SVG, for papers (drawing them takes about as long again "
        "as the PNGs; the report links each figure to its SVG when there is one)."))] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "Draw the plots and write report.md/.html (off: tables only)."))] = True,
    profile: ProfileOpt = None,
) -> None:
    """Replay one workload under several policies and chunk sizes: verdict, table, plots,
    report.

    Every configuration runs under 3 seeds by default (--seeds); tables show the median
    [min–max] and the verdict (recommendation, runner-up, trade-offs) uses what holds across
    seeds, against --slo or the default SLOs. With --slo the capacity search runs too.

    With --fleet (repeat it), every configuration runs on every fleet layout given, side
    by side, and the report adds a per-replica load plot.

    Example: `sim compare -w long-prompt --policies whole,chunk,budget --chunks
    256,512,1024,2048 --out reports/long-prompt`; fleets: `sim compare -w long-prompt
    --rate 32 --profile llama-3.1-8b-h200 --policies budget --chunks 2048,8192 --fleet
    4,router=least-tokens --fleet pd=1:3 --fleet pd=2:2 --out reports/fleets`.
    """
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.cli.say import warn
    from chunksim.core.vllm_version import Device
    from chunksim.reports.answer_files import refuse_foreign
    from chunksim.reports.compare_flow import CompareFlags, compare_plan, run_compare

    check_out_dir(out, replace=True)
    refuse_foreign(out)
    flags = CompareFlags(policies, chunks, fleet, seeds, spec_tokens, slo, max_reject_pct,
                         capacity, max_rate, timeline_chunk, svg, report)
    plan = compare_plan(flags, run_cfg, workload_opts)
    profile = load_run_profile(profile, run_cfg)
    block = {"--block-size": run_cfg.block_size_on(Device.of(profile.provenance))}
    written = run_compare(plan, run_cfg, workload_opts, cost_cfg, profile, workers, ray, out,
                          resolved_command(ctx, block), warn)
    typer.echo(f"wrote {out}/: {', '.join(written)}")

"""`sim capacity`: the maximum sustainable request rate of each policy and chunk size
under SLOs, and the configuration to run."""

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
def capacity(
    ctx: typer.Context,
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    cost_cfg: CostConfig,
    slo: SloOpt = None,
    max_reject_pct: MaxRejectOpt = 0.0,
    out: Annotated[Path | None, typer.Option("--out", help=(
        "Directory for capacity.json, capacity_probes.csv, the knee plots, report.md and "
        "report.html."))] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    seeds: SeedsOpt = None,
    spec_tokens: SpecTokensOpt = None,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    max_rate: Annotated[float, typer.Option("--max-rate", min=0.0, help=(
        "Stop doubling the rate here, req/s."))] = 1024.0,
    tol: Annotated[float, typer.Option("--tol", min=0.0, help=(
        "Stop bisecting when the bracket is within this relative width (0.03 = 3 %)."))] = 0.03,
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, rich_help_panel="Fleet", help=(
        "Which split of this many GPUs sustains the highest rate: G colocated replicas "
        "and every P/D split P + D = G, each under every --policies x --chunks "
        "configuration; prints them ranked (--out adds splits.csv)."))] = None,
    target_rate: Annotated[float | None, typer.Option(
        "--target-rate", min=0.0, rich_help_panel="Fleet", help=(
            "The fewest GPUs that meet the SLOs at this rate, req/s: for G = 1, 2, 4, ... "
            "then bisecting, every split of G is judged at this rate (one probe under "
            "every seed); --out writes gpus.json and gpu_probes.csv."))] = None,
    max_gpus: Annotated[int | None, typer.Option(
        "--max-gpus", min=1, rich_help_panel="Fleet", help=(
            "With --target-rate: the most GPUs tried (default 64)."))] = None,
    fleet: FleetOpt = None,
    svg: Annotated[bool, typer.Option("--svg/--no-svg", help=(
        "Also write every plot as SVG, for papers (drawing them takes about as long again "
        "as the PNGs)."))] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "Write report.md/.html with the verdict (off: data and plots only)."))] = True,
    profile: ProfileOpt = None,
) -> None:
    """Max sustainable request rate per policy and chunk size under SLOs; recommends one.

    Bisection over the request rate finds, for each configuration, the highest rate that
    meets every --slo on the median seed; the verdict recommends the highest capacity, and
    when capacities overlap over seeds, the smallest trade-off cost (worst stall, TTFT of
    the longest requests).

    The search starts at --rate, or without it at the service rate the profile implies
    for the workload's mean request (rounded down to a power of two), doubles/halves to a
    bracket, bisects, then probes above the bracket before accepting it; configurations
    that differ only in policy and chunk size start from the first one's capacity. Each
    probe replays the workload at that rate under every seed (default 3, --seeds);
    synthetic workloads without --duration or --num-requests span max(60 s, 1000
    requests / rate). Example: `sim capacity --slo
    p99_itl_ms=100 --slo p99_ttft_ms=2000 --out runs/cap`.

    Fleets: `--gpus 4` ranks 4 colocated replicas against P/D 1:3, 2:2 and 3:1;
    `--target-rate 40` finds the fewest GPUs (and their split) that meet the SLOs at 40
    req/s. With either, one --fleet entry without a layout sets the routers and KV link of
    every split (e.g. --fleet router=least-tokens,kv-link=ib-400g); without them, --fleet
    layouts (repeat it) are searched side by side.
    """
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.core.vllm_version import Device
    from chunksim.reports import capacity_flow as flow
    from chunksim.reports.answer_files import refuse_foreign

    check_out_dir(out, replace=True)
    if out is not None:
        refuse_foreign(out)
    flags = flow.CapacityFlags(slo, max_reject_pct, policies, chunks, seeds, spec_tokens,
                               max_rate, tol, gpus, target_rate, max_gpus, fleet, svg, report)
    plan = flow.capacity_plan(flags, run_cfg, workload_opts,
                              lambda cfg: load_run_profile(profile, cfg))
    if target_rate is not None:
        names = flow.fewest_gpus(plan, cost_cfg, workers, ray, out)
    else:
        store = _probe_store(out, plan.profile)
        try:
            ans = flow.search_capacity(plan, workers, ray, store, figures=out is not None)
        except KeyboardInterrupt:
            _probes_interrupted(store)
        finally:
            if store is not None:
                store.close()
        block = {"--block-size": run_cfg.block_size_on(Device.of(plan.profile.provenance))}
        names = flow.show_capacity(plan, ans, cost_cfg, out, resolved_command(ctx, block))
    if out is not None:
        typer.echo(f"wrote {out}/: {', '.join(names)}")


def _probe_store(out: Path | None, profile):
    """Where the search keeps each finished run for a resumed one (None without --out);
    says so when an interrupted search's runs are there."""
    if out is None:
        return None
    from chunksim.sweep.probe_store import open_store

    store = open_store(out, profile.sha256)
    if store.found:
        typer.echo(f"resuming: {store.found} finished probe runs of an interrupted search "
                   f"are in {store.path}; those this search needs are not run again",
                   err=True)
    return store


def _probes_interrupted(store) -> None:
    """Ctrl-C during the search: what was kept, and the command that resumes it."""
    from chunksim.cli.interrupts import command_as_typed, interrupted, interrupted_plainly

    if store is None:
        interrupted_plainly("nothing was written; give --out DIR to keep the finished "
                            "probe runs for a resumed search")
    if not store.runs:
        interrupted_plainly("no probe run had finished; nothing was written")
    new = len(store.runs) - store.found
    interrupted(f"{len(store.runs)} finished probe runs are kept in {store.path}"
                + (f" ({new} from this search)" if store.found else "")
                + "; the answer's files were not written. The same command reuses them",
                command_as_typed())

"""`sim capacity`: the maximum sustainable request rate of each policy and chunk size
under SLOs, and the configuration to run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.grid_flags import (
    DEFAULT_CHUNKS,
    DEFAULT_POLICIES,
    ChunksOpt,
    PoliciesOpt,
    RayOpt,
    WorkersOpt,
)
from chunksim.cli.options import ProfileOpt, with_grid_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadKind, WorkloadOptions

PROBE_DURATION_S = 60.0
"""Default probe length for synthetic workloads: arrivals over a fixed span (not a fixed
count), so an overloaded rate builds a queue the scheduling-delay bound can see."""


@with_grid_run_options
@with_workload_options
def capacity(
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    slo: Annotated[list[str] | None, typer.Option("--slo", help=(
        "Bound on a summary key in ms, KEY=MS (repeat), e.g. --slo p99_itl_ms=100 --slo "
        "p99_ttft_ms=2000. median_sched_delay_ms=2000 (Sarathi-Serve) is added unless given "
        "(=off drops it)."))] = None,
    out: Annotated[Path | None, typer.Option("--out", help=(
        "Directory for capacity.json, capacity_probes.csv and the knee plots."))] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    max_rate: Annotated[float, typer.Option("--max-rate", min=0.0, help=(
        "Stop doubling the rate here, req/s."))] = 1024.0,
    tol: Annotated[float, typer.Option("--tol", min=0.0, help=(
        "Stop bisecting when the bracket is within this relative width (0.03 = 3 %)."))] = 0.03,
    svg: Annotated[bool, typer.Option("--svg/--no-svg", help="Also write SVG plots.")] = True,
    profile: ProfileOpt = None,
) -> None:
    """Max sustainable request rate per policy and chunk size under SLOs; recommends one.

    Bisection over the request rate finds, for each configuration, the highest rate that
    meets every --slo; the recommendation is the highest capacity (ties -> lower P99 TTFT).

    The search starts at --rate (default 1 req/s) and doubles/halves to a bracket. Each probe
    replays the workload at that rate with the same seed; synthetic workloads span
    --duration seconds (default 60). Example: `sim capacity --slo p99_itl_ms=100 --slo
    p99_ttft_ms=2000 --out runs/cap`.
    """
    from chunksim import atomic
    from chunksim.cli.paths import check_out_dir
    from chunksim.latency.profile import load_profile
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_capacity
    from chunksim.sweep.capacity import SearchParams, capacity_search, recommend
    from chunksim.sweep.capacity_io import capacity_document, probes_csv
    from chunksim.sweep.configs import make_configs, parse_ints, parse_policies, refuse_unused_knobs
    from chunksim.sweep.runner import Runner
    from chunksim.sweep.slos import parse_capacity_slos

    check_out_dir(out)
    slos = parse_capacity_slos(slo)
    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    configs = make_configs(specs, parse_ints(chunks, "--chunks"))
    start = workload_opts.rate or 1.0
    params = SearchParams(start=start, tol=tol, min_rate=min(start, 1e-3),
                          max_rate=max(max_rate, start))
    probe = workload_opts
    synthetic = workload_opts.trace is None and workload_opts.workload is not WorkloadKind.TRACE
    if synthetic and probe.num_requests is None and probe.duration_s is None:
        probe = dataclasses.replace(probe, duration_s=PROBE_DURATION_S)
    profile = load_profile(profile)
    with Runner(profile, workers, ray) as runner, ProgressBar("capacity probes") as bar:
        entries = capacity_search(configs, probe, run_cfg, slos, runner, params, bar)
    best = recommend(entries)
    print_capacity(entries, best, slos)
    if out is not None:
        doc = capacity_document(entries, best, slos, params, profile, probe)
        atomic.write_json(out / "capacity.json", doc)
        atomic.write_text(out / "capacity_probes.csv", probes_csv(entries))
        from chunksim.reports.capacity_report import write_capacity_plots

        paths = write_capacity_plots(out, entries, best, slos, profile,
                                     ("png", "svg") if svg else ("png",))
        names = ["capacity.json", "capacity_probes.csv"] + [p.name for p in paths]
        typer.echo(f"wrote {out}/: {', '.join(names)}")

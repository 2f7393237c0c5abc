"""`sim capacity`: the maximum sustainable request rate of each policy and chunk size
under SLOs, and the configuration to run."""

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
    SeedsOpt,
    SloOpt,
    WorkersOpt,
    resolved_command,
)
from chunksim.cli.options import ProfileOpt, with_grid_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadKind, WorkloadOptions


@with_grid_run_options
@with_workload_options
def capacity(
    ctx: typer.Context,
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    slo: SloOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help=(
        "Directory for capacity.json, capacity_probes.csv, the knee plots, report.md and "
        "report.html."))] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    seeds: SeedsOpt = None,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    max_rate: Annotated[float, typer.Option("--max-rate", min=0.0, help=(
        "Stop doubling the rate here, req/s."))] = 1024.0,
    tol: Annotated[float, typer.Option("--tol", min=0.0, help=(
        "Stop bisecting when the bracket is within this relative width (0.03 = 3 %)."))] = 0.03,
    svg: Annotated[bool, typer.Option("--svg/--no-svg", help="Also write SVG plots.")] = True,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "Write report.md/.html with the verdict (off: data and plots only)."))] = True,
    profile: ProfileOpt = None,
) -> None:
    """Max sustainable request rate per policy and chunk size under SLOs; recommends one.

    Bisection over the request rate finds, for each configuration, the highest rate that
    meets every --slo on the median seed; the verdict recommends the highest capacity, and
    when capacities overlap over seeds, the smallest trade-off cost (worst stall, TTFT of
    the longest requests).

    The search starts at --rate (default 1 req/s), doubles/halves to a bracket, bisects,
    then probes above the bracket before accepting it. Each probe replays the workload at
    that rate under every seed (default 3, --seeds); synthetic workloads without --duration
    or --num-requests span max(60 s, 1000 requests / rate). Example: `sim capacity --slo
    p99_itl_ms=100 --slo p99_ttft_ms=2000 --out runs/cap`.
    """
    from chunksim import atomic
    from chunksim.cli.paths import check_out_dir
    from chunksim.latency.profile import load_profile
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_capacity, print_verdict
    from chunksim.sweep.capacity import (
        capacity_search,
        probe_workload,
        recommend,
        search_params,
        window_note,
    )
    from chunksim.sweep.capacity_io import capacity_document, probes_csv
    from chunksim.sweep.configs import make_configs, parse_ints, parse_policies, refuse_unused_knobs
    from chunksim.sweep.runner import Runner
    from chunksim.sweep.seeds import seed_list
    from chunksim.sweep.slos import parse_capacity_slos
    from chunksim.sweep.verdict import decide

    seed_values = seed_list(seeds, workload_opts.seed)
    check_out_dir(out)
    slos = parse_capacity_slos(slo)
    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    configs = make_configs(specs, parse_ints(chunks, "--chunks"))
    if not 0 < tol < 1:
        raise ValueError(f"--tol {tol}: must be in (0, 1), e.g. 0.03 for 3 %")
    params = search_params(workload_opts, max_rate, tol)
    trace = workload_opts.trace is not None or workload_opts.workload is WorkloadKind.TRACE
    profile = load_profile(profile)
    with Runner(profile, workers, ray) as runner, ProgressBar("capacity probes") as bar:
        entries = capacity_search(configs, workload_opts, run_cfg, slos, runner, params, bar,
                                  seeds=seed_values)
    best_cap = recommend(entries)
    window = window_note(params, workload_opts,
                         best_cap.at_max["completed"] if best_cap and best_cap.at_max else None)
    # trade-offs are read at each configuration's capacity (its lowest probe if none)
    runs = [(e.probe_at_max or e.probes[0]).runs for e in entries]
    verdict = decide(configs, runs, slos, bool(slo), seed_values,
                     [(e.max_rate, e.capacity_range) for e in entries])
    by_label = {e.config.label: e for e in entries}
    best = by_label.get(verdict.recommended.label) if verdict.recommended else None
    print_capacity(entries, best, slos)
    print_verdict(verdict, capacity_searched=True, trace=trace)
    if out is not None:
        doc = capacity_document(entries, best, slos, params, profile,
                                probe_workload(workload_opts, params.start, workload_opts.seed,
                                               params), seed_values, verdict, window)
        atomic.write_json(out / "capacity.json", doc)
        atomic.write_text(out / "capacity_probes.csv", probes_csv(entries))
        formats = ("png", "svg") if svg else ("png",)
        names = ["capacity.json", "capacity_probes.csv"]
        if report:
            from chunksim.reports.capacity_report import write_capacity_report

            workload = next((p.summary.get("workload") for e in entries for p in e.probes), "?")
            name = str(workload).split("-")[0] + " (rate varied)"
            paths = write_capacity_report(out, entries, verdict, profile, window, name,
                                          resolved_command(ctx), formats, trace)
        else:
            from chunksim.reports.capacity_report import write_capacity_plots

            paths = write_capacity_plots(out, entries, best, slos, profile, formats)
        names += [p.name for p in paths]
        typer.echo(f"wrote {out}/: {', '.join(names)}")

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
    check_max_rate,
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
    from chunksim import atomic
    from chunksim.cli.answer_files import answer_files, refuse_foreign
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_comparison, print_verdict
    from chunksim.sim.rejections import rejection_text
    from chunksim.sweep.compare_answer import compare_answer
    from chunksim.sweep.configs import (
        make_configs,
        parse_ints,
        parse_policies,
        parse_spec_tokens,
        refuse_unused_knobs,
    )
    from chunksim.sweep.fleets import parse_fleets, refuse_fleet_flags
    from chunksim.sweep.runner import Runner
    from chunksim.sweep.seeds import seed_list
    from chunksim.sweep.slos import parse_capacity_slos
    from chunksim.workloads.options import WorkloadKind

    seed_values = seed_list(seeds, workload_opts.seed)
    check_out_dir(out, replace=True)
    refuse_foreign(out)
    slos = parse_capacity_slos(slo)
    search = bool(slo) if capacity is None else capacity
    if search:
        check_max_rate(max_rate, workload_opts.rate)
    elif max_rate != 1024.0:
        raise ValueError("--max-rate caps the capacity search, which is off: add --slo or "
                         "--capacity, or drop --max-rate")
    trace = workload_opts.trace is not None or workload_opts.workload is WorkloadKind.TRACE
    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    fleets = parse_fleets(fleet)
    if fleets:
        refuse_fleet_flags(run_cfg.fleet, "--fleet")
    configs = make_configs(specs, parse_ints(chunks, "--chunks"), fleets or None,
                           parse_spec_tokens(spec_tokens, run_cfg))
    if report:  # fail on a bad --timeline-chunk before simulating, not after
        from chunksim.reports.compare_report import timeline_configs

        timeline_configs(configs, timeline_chunk)
    profile = load_run_profile(profile, run_cfg)
    if report:  # matplotlib (and pandas, for the report's tables) load while the runs run
        from chunksim.reports.style import load_in_background

        load_in_background(also=("pandas",))
    with Runner(profile, workers, ray) as runner, \
            ProgressBar("compare", total=len(configs) * len(seed_values)) as bar:
        ans = compare_answer(configs, workload_opts, run_cfg, slos, bool(slo), search,
                             max_rate, max_reject_pct, seed_values, runner,
                             keep_records=report, progress=bar)
    for msg in ans.failed:
        typer.secho(f"warning: {msg}", err=True, fg=typer.colors.YELLOW)
    tail = _tail(ans.verdict, ans.comp, ans.entries, run_cfg, workload_opts, profile, cost_cfg)
    doc = ans.document(profile, slos, max_reject_pct)
    doc.update(tail.document())
    # the whole set goes into a staging directory, swapped in at the end (as sim run)
    final, out = out, atomic.staging_dir(out)
    atomic.write_text(out / "comparison.csv", ans.full.csv())
    atomic.write_json(out / "comparison.json", doc)
    print_comparison(ans.full.configs, ans.full.summaries, stats=ans.full.stats)
    print_verdict(ans.verdict, capacity_searched=ans.entries is not None, trace=trace)
    tail.print()
    written = ["comparison.csv", "comparison.json"]
    summaries = ans.full.summaries
    for warning in dict.fromkeys(w for s in summaries for w in s.get("warnings", [])):
        typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    for cfg, s in zip(ans.full.configs, summaries, strict=True):
        rejected = rejection_text(s)  # the median seed's: the latencies cover the rest
        if rejected and s.get("completed"):
            typer.secho(f"warning: {cfg.label}: {rejected}", err=True, fg=typer.colors.YELLOW)
    if report:
        from chunksim.reports.compare_report import write_compare_report

        paths = write_compare_report(out, ans.comp, profile, ans.verdict, ans.entries,
                                     command=resolved_command(ctx), timeline_chunk=timeline_chunk,
                                     formats=("png", "svg") if svg else ("png",),
                                     window=ans.window, trace=trace, tail=tail.section)
        written += [p.name for p in paths]
    atomic.swap_in(out, final, answer_files())
    typer.echo(f"wrote {final}/: {', '.join(written)}")


def _tail(verdict, comp, entries, run_cfg, workload_opts, profile, cost_cfg):
    """The deployment of the recommendation and each configuration's cost: at its
    capacity when searched, else at the compared load."""
    from chunksim.cli.answer_tail import answer_tail

    rec = verdict.recommended
    if entries is not None:
        by_label = {e.config.label: e for e in entries}
        points = [(e.config, e.at_max, e.max_rate) for e in entries]
        rate = by_label[rec.label].max_rate if rec is not None else None
        at = "its capacity under the SLOs"
    else:
        rate = workload_opts.rate
        points = [(c, s, float(s.get("request_throughput") or 0.0))
                  for c, s in zip(comp.configs, comp.summaries, strict=True)]
        at = "the compared load"
    return answer_tail((rec.config, rate) if rec is not None else None, points, run_cfg,
                       workload_opts, profile, cost_cfg, at)

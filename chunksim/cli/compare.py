"""`sim compare`: one workload under several policies and chunk sizes -> table + report."""

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
    WorkersOpt,
    command_line,
)
from chunksim.cli.options import ProfileOpt, with_grid_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions


@with_grid_run_options
@with_workload_options
def compare(
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    out: Annotated[Path, typer.Option("--out", help=(
        "Directory for comparison.csv/.json, the plots, report.md and report.html."))],
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    timeline_chunk: Annotated[int | None, typer.Option(
        "--timeline-chunk", min=1, help=(
            "Chunk size of the chunked policies in the step timeline (default: the median of "
            "--chunks)."))] = None,
    svg: Annotated[bool, typer.Option("--svg/--no-svg", help=(
        "Also write every plot as SVG (for papers)."))] = True,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "Draw the plots and write report.md/.html (off: tables only)."))] = True,
    profile: ProfileOpt = None,
) -> None:
    """Replay one workload under several policies and chunk sizes: table, plots, report.

    Example: `sim compare -w long-prompt --policies whole,chunk,budget --chunks
    256,512,1024,2048 --out reports/long-prompt`.
    """
    from chunksim import atomic
    from chunksim.cli.paths import check_out_dir
    from chunksim.latency.profile import load_profile
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_comparison
    from chunksim.sweep.compare import run_comparison
    from chunksim.sweep.configs import make_configs, parse_ints, parse_policies, refuse_unused_knobs
    from chunksim.sweep.runner import Runner

    check_out_dir(out)
    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    configs = make_configs(specs, parse_ints(chunks, "--chunks"))
    if report:  # fail on a bad --timeline-chunk before simulating, not after
        from chunksim.reports.compare_report import timeline_configs

        timeline_configs(configs, timeline_chunk)
    profile = load_profile(profile)
    with Runner(profile, workers, ray) as runner, \
            ProgressBar("compare", total=len(configs)) as bar:
        comp = run_comparison(configs, workload_opts, run_cfg, runner, keep_records=report,
                              progress=bar)
    atomic.write_text(out / "comparison.csv", comp.csv())
    atomic.write_json(out / "comparison.json", {
        "workload": comp.summaries[0].get("workload"),
        "profile": {"label": profile.label, "sha256": profile.sha256,
                    "provenance": profile.provenance},
        "rows": comp.json_rows(),
    })
    print_comparison(comp.configs, comp.summaries)
    written = ["comparison.csv", "comparison.json"]
    done = _completing(comp)
    for warning in dict.fromkeys(w for s in comp.summaries for w in s.get("warnings", [])):
        typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    if report:
        from chunksim.reports.compare_report import timeline_configs, write_compare_report

        configs_done = [comp.configs[i] for i in done]
        chunk = timeline_chunk
        if chunk is not None and chunk not in {c.chunk for c in configs_done}:
            chunk = None  # its configurations completed nothing: the median of the rest
        timeline_configs(configs_done, chunk)
        paths = write_compare_report(out, configs_done, [comp.summaries[i] for i in done],
                                     [comp.records[i] for i in done], profile,
                                     command=command_line(), timeline_chunk=chunk,
                                     formats=("png", "svg") if svg else ("png",))
        written += [p.name for p in paths]
    typer.echo(f"wrote {out}/: {', '.join(written)}")


def _completing(comp) -> list[int]:
    """Indices of the configurations that completed a request; each other one is named
    on stderr with why (it is in the tables, but has no latency to plot). ValueError when
    none completed."""
    done = [i for i, s in enumerate(comp.summaries) if s["completed"]]
    for i, s in enumerate(comp.summaries):
        if not s["completed"]:
            why = ", ".join(f"{n} by {k}" for k, n in s.get("rejected_reasons", {}).items())
            msg = (f"{comp.configs[i].label} completed no request (all {s['rejected']} "
                   f"rejected: {why})")
            if not done:
                raise ValueError(f"{msg}, and no configuration did; see "
                                 "requests' reject_reason in `sim run --out`")
            typer.secho(f"warning: {msg}; it is left out of the plots and report", err=True,
                        fg=typer.colors.YELLOW)
    return done

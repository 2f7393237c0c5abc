"""`sim workload describe`: statistics of a trace or synthetic workload, as a table or JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli import lazy
from chunksim.cli.options import with_workload_options
from chunksim.workloads.options import WorkloadOptions, build_workload
from chunksim.workloads.stats import describe_workload


@with_workload_options
def describe(
    workload_opts: WorkloadOptions,
    path: Annotated[
        Path | None,
        typer.Argument(help="Trace file to describe (same as --trace); omit for synthetic."),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Also write arrival-rate and length histograms to this PNG."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the statistics as one JSON line instead.")
    ] = False,
) -> None:
    """Print a workload's count, span, rate, inter-arrival CV, length percentiles, prefix reuse."""
    from chunksim.cli.paths import check_out_file

    check_out_file(plot, "--plot")
    opts = replace(workload_opts, trace=path) if path is not None else workload_opts
    workload = build_workload(opts)
    stats = describe_workload(workload)
    if plot is not None:
        from chunksim.reports.workload_plot import plot_workload

        plot_workload(workload, plot)
        stats["plot"] = str(plot)
    if as_json:
        typer.echo(json.dumps(stats))
        return
    _print_table(stats)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _print_table(stats: dict) -> None:
    from rich.table import Table

    from chunksim.reports.console import make_console

    table = Table(title=f"workload {stats['name']}", show_header=False)
    table.add_column("statistic", style="bold")
    table.add_column("value", justify="right")
    scalar = (
        "num_requests",
        "duration_s",
        "mean_rate_per_s",
        "interarrival_cv",
        "max_requests_in_1s",
        "total_prompt_tokens",
        "total_output_tokens",
    )
    for key in scalar:
        table.add_row(key, _fmt(stats[key]))
    for kind in ("prompt_tokens", "output_tokens"):
        cells = [f"{q} {_fmt(stats[f'{kind}_{q}'])}" for q in ("mean", "p50", "p90", "p99", "max")]
        table.add_row(kind, "  ".join(cells))
    if stats["prefix_reuse_fraction"] is not None:
        table.add_row(
            "prefix reuse",
            f"{stats['prefix_reuse_fraction']:.1%} of {stats['prefix_block_tokens']}-token blocks "
            f"seen before ({stats['unique_prefix_blocks']:,} unique)",
        )
    if len(stats["classes"]) > 1 or "default" not in stats["classes"]:
        table.add_row("classes", ", ".join(f"{k}: {v}" for k, v in stats["classes"].items()))
    console = make_console()
    console.print(table)
    for note in stats["notes"]:
        console.print(f"note: {note}")
    if "plot" in stats:
        console.print(f"wrote {stats['plot']}")


workload_app = typer.Typer(no_args_is_help=True, add_completion=False,
                           pretty_exceptions_enable=False)


@workload_app.callback()
def workload() -> None:
    """Inspect workloads and traces."""


lazy.register(workload_app, "describe", describe)

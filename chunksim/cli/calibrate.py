"""`sim calibrate`: fit a per-step framework time and two scales to measured benchmark
runs, check the fit on a held-out run (or the later part of one run), write the
calibrated profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.options import with_run_options
from chunksim.sim.run import RunConfig

_C = "Calibration"


@with_run_options
def calibrate(
    run_cfg: RunConfig,
    against: Annotated[list[Path], typer.Option("--against", rich_help_panel=_C, help=(
        "A benchmark's results (as `sim validate --against` reads them); repeat the flag "
        "for several runs."))],
    profile: Annotated[str, typer.Option("--profile", rich_help_panel=_C, help=(
        "The profile to calibrate: a bundled name or a CSV."))],
    out: Annotated[Path, typer.Option("--out", rich_help_panel=_C, help=(
        "The calibrated profile's CSV (its JSON provenance is written beside it)."))],
    fit: Annotated[str, typer.Option("--fit", rich_help_panel=_C, help=(
        "Parameters to fit, comma-separated: framework (per-step framework time), compute "
        "(scale on each step's prefill part), memory (scale on its decode part)."))] = (
        "framework,compute,memory"),
    hold_out: Annotated[int | None, typer.Option("--hold-out", min=0, rich_help_panel=_C,
                                                  help=(
        "Which run (0-based, in --against order) the fit does not see (default: the last). "
        "With one run, its later part is held out instead (--tail-fraction)."))] = None,
    tail_fraction: Annotated[float, typer.Option("--tail-fraction", rich_help_panel=_C,
                                                  help=(
        "With one run: the share of its requests (the latest arrivals) held out."))] = 1 / 3,
    results_format: Annotated[str | None, typer.Option("--results-format",
                                                       rich_help_panel=_C, help=(
        "vllm, sglang or generic (default: detected from each file)."))] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, rich_help_panel=_C, help=(
        "The seed the bench tool ran with, to rebuild arrivals a file does not record "
        "(vLLM's and SGLang's default 0)."))] = 0,
    as_json: Annotated[bool, typer.Option("--json", rich_help_panel=_C, help=(
        "Print the fit's record as one JSON line, last on stdout."))] = False,
) -> None:
    """Fit the few physical parameters that explain how measured runs differ from the
    simulator's prediction: a per-step framework time, a scale on each step's prefill
    (compute-bound) part and one on its decode (memory-bound) part. One run, or the later
    part of a single run, is held out and its error reported beside the fitted one. A
    parameter the runs cannot identify is refused, saying what data would.

    Example: `sim calibrate --against low.json --against high.json --profile
    llama-3.1-8b-h200 --out h200-calibrated.csv`.
    """
    from chunksim.cli.paths import check_out_file
    from chunksim.cli.say import say, warn
    from chunksim.latency.profile import load_profile
    from chunksim.reports.against_report import print_calibration
    from chunksim.validate.against import profile_warnings
    from chunksim.validate.calibrate import calibrate as fit_runs
    from chunksim.validate.calibrate import parse_fit, write_calibrated
    from chunksim.validate.results import load_results

    names = parse_fit(fit)
    check_out_file(out)
    if out.suffix != ".csv":
        raise ValueError(f"--out {out}: a profile is a .csv file (its provenance is written "
                         "beside it as .json)")
    runs = [load_results(p, results_format, seed=seed, progress=say) for p in against]
    base = load_profile(profile)
    for warning in (w for run in runs for w in profile_warnings(run, base)):
        warn(warning)
    result = fit_runs(runs, base, run_cfg.variant(seed=seed), names, hold_out, tail_fraction,
                      say=say)
    write_calibrated(base, result, runs, out)
    record = {"calibration": result.calibration.as_dict(), **result.provenance(runs)}
    for warning in result.warnings:
        warn(warning)
    if as_json:
        typer.echo(json.dumps(record, default=float))
        return
    print_calibration(record)
    typer.echo(f"wrote {out} and {out.with_suffix('.json')}")

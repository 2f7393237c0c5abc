"""`sim validate`: profile (or reuse a profile), run the workload live, simulate it, and
write how far the prediction is from the measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.options import ProfileOpt, with_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions, build_workload

_V = "Validation"


@with_run_options
@with_workload_options
def validate(
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    out: Annotated[Path, typer.Option("--out", rich_help_panel=_V, help=(
        "Directory for validation.json, live/sim requests and steps CSVs, live_tokens.csv "
        "and validation.png (written atomically)."))],
    model: Annotated[str, typer.Option("--model", rich_help_panel=_V, help=(
        "Model preset to profile when no --profile is given."))] = "tiny",
    device: Annotated[str, typer.Option("--device", rich_help_panel=_V, help=(
        "cpu, cuda or auto, when profiling on the fly."))] = "auto",
    dtype: Annotated[str | None, typer.Option("--dtype", rich_help_panel=_V, help=(
        "Profile dtype when profiling on the fly (default float32 on CPU, bfloat16 on "
        "CUDA)."))] = None,
    grid: Annotated[str, typer.Option("--grid", rich_help_panel=_V, help=(
        "Grid preset when profiling on the fly (quick, default, fine)."))] = "quick",
    passes: Annotated[int, typer.Option("--passes", min=1, rich_help_panel=_V, help=(
        "Profile passes when profiling on the fly: each pass after the first re-times the "
        "points under 300 ms once more, cold if they have a prefill (a new prompt's chunk "
        "runs after other work), in a fresh random order; the table keeps the median. "
        "benchmarks/fidelity.py uses 6."))] = 1,
    threads: Annotated[int | None, typer.Option("--threads", min=1, rich_help_panel=_V, help=(
        "torch threads on CPU (default: the profile's; 1 when profiling on the fly). Must "
        "match a reused profile's."))] = None,
    idle_wait: Annotated[str, typer.Option("--idle-wait", rich_help_panel=_V, help=(
        "How the idle live loop waits for traffic: sleep (as a server does) or spin "
        "(keeps the CPU core awake)."))] = "sleep",
    replay_steps: Annotated[int | None, typer.Option("--replay-steps", min=0,
                                                     rich_help_panel=_V, help=(
        "Live steps re-timed alone after the run, to split the step error into "
        "interpolation, machine drift and in-sequence costs (0 = skip). Default 180 with a "
        "whole-step profile; 0 with a component profile, whose points are not whole "
        "steps to re-time."))] = None,
    live_runs: Annotated[int, typer.Option("--live-runs", min=1, rich_help_panel=_V, help=(
        "Serve the workload live this many times and report how far the runs differ "
        "from each other: the machine's own noise, below which the simulator's error "
        "cannot be judged. Figures and records are the first run's."))] = 1,
    plot: Annotated[bool, typer.Option("--plot/--no-plot", rich_help_panel=_V, help=(
        "Draw validation.png."))] = True,
    as_json: Annotated[bool, typer.Option("--json", rich_help_panel=_V, help=(
        "Print validation.json's metrics as one JSON line, last on stdout."))] = False,
    against: Annotated[Path | None, typer.Option("--against", rich_help_panel=_V, help=(
        "Validate against a benchmark's results instead of the live loop: a `vllm bench "
        "serve --save-result --save-detailed` JSON, an SGLang `bench_serving "
        "--output-details` JSONL, or a per-request CSV/JSONL (docs/validation.md). Its "
        "requests are replayed at their arrivals (rebuilt from --seed, the bench tool's, "
        "where the file has none) under the engine flags given. No torch."))] = None,
    results_format: Annotated[str | None, typer.Option("--results-format", rich_help_panel=_V,
                                                       help=(
        "vllm, sglang or generic (default: detected from the file)."))] = None,
    run_index: Annotated[int | None, typer.Option("--run", min=0, rich_help_panel=_V, help=(
        "Which run of an SGLang JSONL holding several (0-based; default the last)."))] = None,
    profile: ProfileOpt = None,
) -> None:
    """Check the simulator against real execution: run the workload live (real forward
    passes of the profiled model, same policy code) and simulated, and report the signed
    error of mean/P50/P90/P99 TTFT, ITL, TPOT, E2EL and throughput.

    Examples (the second profiles first; the third also serves the workload three times):
    `sim validate --profile tiny-cpu --policy chunk --chunk 256 --out v`;
    `sim validate --grid quick --out runs/val`;
    `sim validate --grid quick --live-runs 3 --out runs/val`;
    `sim validate --against result.json --profile llama-3.1-8b-h200 --out v` (a vLLM
    benchmark's results).
    """
    if against is not None:
        live_only = {"--model": (model, "tiny"), "--device": (device, "auto"),
                     "--dtype": (dtype, None), "--grid": (grid, "quick"),
                     "--passes": (passes, 1), "--threads": (threads, None),
                     "--idle-wait": (idle_wait, "sleep"), "--replay-steps": (replay_steps, None),
                     "--live-runs": (live_runs, 1)}
        given = [flag for flag, (v, default) in live_only.items() if v != default]
        if given:
            raise ValueError(f"{', '.join(given)} set(s) up the live loop, which --against "
                             "does not run; drop them or --against")
        _validate_against(against, results_format, run_index, run_cfg, workload_opts, out,
                          profile, plot, as_json)
        return
    from chunksim.cli.paths import check_out_dir
    from chunksim.latency.profile import load_profile
    from chunksim.live.settings import LiveSettings

    if run_cfg.fleet.active:
        raise ValueError("sim validate serves one live engine; drop --replicas / --pd / "
                         "--replica-groups (validate a fleet's policy on one engine)")
    check_out_dir(out)
    from chunksim.validate.output import write_validation
    from chunksim.validate.run import validate as run_validation

    if profile is not None:
        if passes > 1:
            raise typer.BadParameter(
                f"--passes {passes} applies only when profiling on the fly; drop --profile "
                f"{profile} or --passes", param_hint="--passes")
        from chunksim.cli.options import say_calibration

        profile = say_calibration(load_profile(profile))
    else:
        from chunksim.validate.profiling import profile_now

        typer.echo(f"profiling {model} ({grid} grid) into {out}/profile.csv ...", err=True)
        profile = profile_now(out / "profile.csv", model=model, device=device, dtype=dtype,
                              threads=threads or 1, grid=grid, seed=workload_opts.seed,
                              passes=passes)
    replay_steps = replay_steps_for(profile.kind, replay_steps)
    if profile.kind == "components" and replay_steps == 0:
        typer.echo("component profile: the step-error decomposition (--replay-steps) is "
                   "skipped", err=True)
    settings = LiveSettings.from_profile(profile.provenance, threads=threads,
                                         seed=workload_opts.seed, idle_wait=idle_wait)
    workload = build_workload(workload_opts)
    times = f", {live_runs} times" if live_runs > 1 else ""
    typer.echo(f"running {len(workload.requests)} requests live "
               f"(~{workload.duration_s:.0f} s of arrivals{times}) ...", err=True)
    v = run_validation(workload, profile, run_cfg.variant(seed=workload_opts.seed), settings,
                       replay_steps=replay_steps, live_runs=live_runs)
    from chunksim.reports.validation_plot import plot_validation

    write_validation(out, v, plot=plot_validation if plot else None)
    if as_json:
        typer.echo(json.dumps(v.report, default=str))
        return
    from chunksim.reports.validation_table import print_validation

    print_validation(v.report)
    typer.echo(f"wrote {out}/validation.json and the records next to it")


def replay_steps_for(profile_kind: str, given: int | None) -> int:
    """--replay-steps as given, else 180 for a whole-step profile and 0 for a component
    profile (an explicit count with a component profile is refused by `validate`)."""
    if given is not None:
        return given
    return 0 if profile_kind == "components" else 180


def _validate_against(against: Path, results_format: str | None, run_index: int | None,
                      run_cfg: RunConfig, workload_opts: WorkloadOptions, out: Path,
                      profile: str | None, plot: bool, as_json: bool) -> None:
    """`--against`: replay the results file's requests and compare (no live loop)."""
    from dataclasses import replace

    from chunksim.cli.paths import check_out_dir
    from chunksim.latency.profile import load_profile
    from chunksim.validate.against import validate_against, write_against
    from chunksim.validate.results import load_results

    given = replace(workload_opts, seed=0) != WorkloadOptions()
    if given:
        raise ValueError("--against replays the results file's own requests; drop the "
                         "workload flags (--rate, --workload, --trace, ...); --seed stays: "
                         "it is the seed the bench tool ran with")
    from chunksim.progress import DelayedProgress
    from chunksim.validate.against import profile_warnings

    check_out_dir(out)
    say = lambda line: typer.echo(line, err=True)  # noqa: E731
    run = load_results(against, results_format, seed=workload_opts.seed, run=run_index,
                       progress=say)
    prof = load_profile(profile)
    for warning in profile_warnings(run, prof):
        typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    with DelayedProgress(f"replaying {len(run):,} requests") as replay:
        v = validate_against(run, prof, run_cfg.variant(seed=workload_opts.seed), replay)
    draw = None
    if plot:
        from chunksim.reports.against_report import plot_against

        draw = plot_against
    write_against(out, v, draw)
    if as_json:
        typer.echo(json.dumps(v.report, default=str))
        return
    from chunksim.reports.against_report import print_against

    print_against(v.report)
    typer.echo(f"wrote {out}/validation.json, validation.html and the records next to it")

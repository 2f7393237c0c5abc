"""`sim validate`: profile (or reuse a profile), run the workload live, simulate it, and
write how far the prediction is from the measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.options import ProfileOpt, with_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions

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
    from chunksim.cli.paths import check_out_dir
    from chunksim.cli.say import say, warn
    from chunksim.reports import validate_flow as flow

    if against is not None:
        flow.refuse_live_flags({
            "--model": (model, "tiny"), "--device": (device, "auto"), "--dtype": (dtype, None),
            "--grid": (grid, "quick"), "--passes": (passes, 1), "--threads": (threads, None),
            "--idle-wait": (idle_wait, "sleep"), "--replay-steps": (replay_steps, None),
            "--live-runs": (live_runs, 1)})
        check_out_dir(out)
        done = flow.validate_against(against, results_format, run_index, run_cfg,
                                     workload_opts, out, profile, plot, say, warn)
    else:
        if run_cfg.fleet.active:
            raise ValueError("sim validate serves one live engine; drop --replicas / --pd / "
                             "--replica-groups (validate a fleet's policy on one engine)")
        check_out_dir(out)
        done = flow.validate_live(_live_profile(profile, passes, model, grid, device, dtype,
                                                threads, workload_opts.seed, out),
                                  live_runs, replay_steps, threads, idle_wait, run_cfg,
                                  workload_opts, out, plot, say)
    if as_json:
        typer.echo(json.dumps(done.report, default=str))
        return
    done.show(done.report)
    typer.echo(done.wrote)


def _live_profile(profile: str | None, passes: int, model: str, grid: str, device: str,
                  dtype: str | None, threads: int | None, seed: int, out: Path):
    """--profile loaded, or without it one profiled now into --out."""
    if profile is not None:
        if passes > 1:
            raise typer.BadParameter(
                f"--passes {passes} applies only when profiling on the fly; drop --profile "
                f"{profile} or --passes", param_hint="--passes")
        from chunksim.cli.options import say_calibration
        from chunksim.latency.profile import load_profile

        return say_calibration(load_profile(profile))
    from chunksim.validate.profiling import profile_now

    typer.echo(f"profiling {model} ({grid} grid) into {out}/profile.csv ...", err=True)
    return profile_now(out / "profile.csv", model=model, device=device, dtype=dtype,
                       threads=threads or 1, grid=grid, seed=seed,
                       passes=passes)

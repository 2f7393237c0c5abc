"""`sim validate` below the command line: the rules of its flags, the replay of a bench
tool's results (`validate_against`) or the live loop against the simulator
(`validate_live`), and their files. The command parses, calls one of these, and prints
what comes back (`Checked`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions

Say = Callable[[str], None]


@dataclass(frozen=True)
class Checked:
    """What a validation prints: its report (`--json` prints it as is), the table that
    shows it, and the line naming what was written."""

    report: dict
    show: Callable[[dict], None]
    wrote: str


def refuse_live_flags(given: dict[str, tuple[object, object]]) -> None:
    """--against runs no live loop: refuse the flags that set it up ({flag: (value,
    default)}) when any differs from its default."""
    named = [flag for flag, (v, default) in given.items() if v != default]
    if named:
        raise ValueError(f"{', '.join(named)} set(s) up the live loop, which --against "
                         "does not run; drop them or --against")


def validate_against(against: Path, results_format: str | None, run_index: int | None,
                     run_cfg: RunConfig, workload_opts: WorkloadOptions, out: Path,
                     profile: str | None, plot: bool, say: Say, warn: Say) -> Checked:
    """`--against`: replay the results file's requests and compare (no live loop)."""
    from chunksim.latency.profile import load_profile
    from chunksim.progress import DelayedProgress
    from chunksim.reports.against_report import print_against
    from chunksim.validate.against import profile_warnings, write_against
    from chunksim.validate.against import validate_against as replay_against
    from chunksim.validate.results import load_results

    if replace(workload_opts, seed=0) != WorkloadOptions():
        raise ValueError("--against replays the results file's own requests; drop the "
                         "workload flags (--rate, --workload, --trace, ...); --seed stays: "
                         "it is the seed the bench tool ran with")
    run = load_results(against, results_format, seed=workload_opts.seed, run=run_index,
                       progress=say)
    prof = load_profile(profile)
    for warning in profile_warnings(run, prof):
        warn(warning)
    with DelayedProgress(f"replaying {len(run):,} requests") as progress:
        v = replay_against(run, prof, run_cfg.variant(seed=workload_opts.seed), progress)
    draw = None
    if plot:
        from chunksim.reports.against_report import plot_against

        draw = plot_against
    write_against(out, v, draw)
    return Checked(v.report, print_against,
                   f"wrote {out}/validation.json, validation.html and the records next to it")


def validate_live(profile, live_runs: int, replay_steps: int | None, threads: int | None,
                  idle_wait: str, run_cfg: RunConfig, workload_opts: WorkloadOptions,
                  out: Path, plot: bool, say: Say) -> Checked:
    """The live loop on `profile` (loaded, or profiled on the fly) against the simulator
    on the same workload."""
    from chunksim.live.settings import LiveSettings
    from chunksim.reports.validation_table import print_validation
    from chunksim.validate.output import write_validation
    from chunksim.validate.run import validate as run_validation
    from chunksim.workloads.options import build_workload

    replay_steps = replay_steps_for(profile.kind, replay_steps)
    if profile.kind == "components" and replay_steps == 0:
        say("component profile: the step-error decomposition (--replay-steps) is skipped")
    settings = LiveSettings.from_profile(profile.provenance, threads=threads,
                                         seed=workload_opts.seed, idle_wait=idle_wait)
    workload = build_workload(workload_opts)
    times = f", {live_runs} times" if live_runs > 1 else ""
    say(f"running {len(workload.requests)} requests live "
        f"(~{workload.duration_s:.0f} s of arrivals{times}) ...")
    v = run_validation(workload, profile, run_cfg.variant(seed=workload_opts.seed), settings,
                       replay_steps=replay_steps, live_runs=live_runs)
    from chunksim.reports.validation_plot import plot_validation

    write_validation(out, v, plot=plot_validation if plot else None)
    return Checked(v.report, print_validation,
                   f"wrote {out}/validation.json and the records next to it")


def replay_steps_for(profile_kind: str, given: int | None) -> int:
    """--replay-steps as given, else 180 for a whole-step profile and 0 for a component
    profile (an explicit count with a component profile is refused by `validate`)."""
    if given is not None:
        return given
    return 0 if profile_kind == "components" else 180

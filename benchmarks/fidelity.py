"""Fidelity of the simulator on CPU: every policy x load, predicted vs measured.

    python benchmarks/fidelity.py                       # profile, then the 12 scenarios
    python benchmarks/fidelity.py --profile P.csv       # reuse a profile (same machine!)
    python benchmarks/fidelity.py --only whole/heavy    # one scenario
    python benchmarks/fidelity.py --dry-run             # seconds: tiny grid, 1-s workloads
    python benchmarks/fidelity.py --resimulate          # the recorded live runs, simulated anew

The profile is measured first, unless given: one `sim profile` pass, then 5 round-robin
passes timing each point under 300 ms again: once, cold, if it has a prefill (after a
different point, as a serving loop runs a new prompt's chunk), warm if it is decode-only
(decode steps run back to back); the table keeps the median of the 6 looks. Each
scenario runs its workload live (real forward passes of `tiny`, 1 thread, the same
policy objects and EngineCore as the simulator), then simulates it on the profile with
the live loop's measured per-step overhead, and writes out/fidelity/<scenario>/
(validation.json, CSVs, plot). The first
table shows the signed
error (predicted - measured) / measured in % of mean and P99 TTFT, ITL and TPOT (target:
within 5 %), the step-level check (the table's forward time for each live step's own
composition vs its measured forward time: median signed, P99 absolute), the overhead, the
other processes' CPU use, and the worst error once the table is rescaled by the machine's
measured drift. The second table splits the step-level error (see chunksim/live/replay.py).
The last line is one JSON object.

The physics of the error: a CPU step of `tiny` takes 1-10 ms, and on a shared cloud
machine the same step runs at different speeds depending on what the host runs beside it
(invisible from inside), and up to 2x slower right after the loop slept. Profile and live
run must see the same machine: run nothing else meanwhile (each scenario waits for the
machine to be quiet and records the drift of the profile's own points around its run).
Figures and their meaning: docs/results/cpu.md; how to read them: docs/validation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without installing


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=None, help="reuse this profile CSV")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "fidelity")
    ap.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (when profiling)")
    ap.add_argument("--passes", type=int, default=6,
                    help="profile passes (the first as `sim profile` does; median over all)")
    ap.add_argument("--repass-below-ms", type=float, default=300.0,
                    help="points faster than this are measured again in each extra pass")
    ap.add_argument("--warm-looks", action="store_true",
                    help="extra passes repeat each point warm (as `sim profile` does) instead "
                         "of timing it once, cold, in a round robin")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--idle-wait", choices=("sleep", "spin"), default="sleep",
                    help="how the idle live loop waits for traffic")
    ap.add_argument("--wait-quiet", type=float, default=120.0, metavar="S",
                    help="before the profile and each scenario, wait up to S seconds for "
                         "other processes to leave the CPUs alone (0 = don't)")
    ap.add_argument("--live-runs", type=int, default=1,
                    help="serve each workload this many times and report the live runs' "
                         "spread (the machine's own noise; each extra run adds ~7 minutes "
                         "to the suite)")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny grid and 1-second workloads: checks the script end to end")
    ap.add_argument("--resimulate", action="store_true",
                    help="no live runs: simulate the live runs recorded under --out again "
                         "with the current simulator (profile: --profile, else "
                         "OUT/profile.csv) and print the errors; for judging a change to "
                         "the simulator against the same measurements")
    return ap.parse_args(argv)


def resimulate(args: argparse.Namespace) -> dict:
    """The suite's errors with the recorded live summaries and a fresh simulation of the
    same workloads, configuration and measured per-step overhead."""
    from chunksim.latency.profile import load_profile
    from chunksim.live.settings import LiveSettings
    from chunksim.sim.run import simulate
    from chunksim.validate.compare import TARGET_KEYS, compare_summaries, worst_abs_error
    from chunksim.validate.run import comparable_config
    from chunksim.workloads.options import build_workload

    profile = load_profile(str(args.profile or args.out / "profile.csv"))
    settings = LiveSettings.from_profile(profile.provenance, seed=args.seed,
                                         idle_wait=args.idle_wait)
    scenarios: dict[str, dict] = {}
    for sc in scenarios_for(args):
        d = args.out / sc.name.replace("/", "__")
        if not (d / "live_summary.json").is_file():
            print(f"{sc.name:<24} no recorded live run under {d}; skipped")
            continue
        live = json.loads((d / "live_summary.json").read_text())
        overhead_s = json.loads((d / "validation.json").read_text())["step_overhead_s"]
        cfg = replace(comparable_config(sc.run, profile, settings), step_overhead_s=overhead_s)
        _, sim = simulate(build_workload(sc.workload), profile, cfg)
        metrics = compare_summaries(sim, live)
        scenarios[sc.name] = {k: metrics[k]["error_pct"] for k in TARGET_KEYS}
        print(f"{sc.name:<24}" + "".join(f"{scenarios[sc.name][k]:+8.1f}" for k in TARGET_KEYS)
              + f"   worst {worst_abs_error(metrics)[1]:.1f} %")
    worst = max((abs(v) for s in scenarios.values() for v in s.values() if v is not None),
                default=float("nan"))
    summary = {"worst_abs_error_pct": worst, "scenarios": scenarios, "resimulated": True,
               "profile_sha256": profile.sha256}
    print(json.dumps(summary))
    return summary


def scenarios_for(args: argparse.Namespace):
    from chunksim.validate.scenarios import suite

    scenarios = suite(seed=args.seed)
    if args.only:
        unknown = set(args.only) - {s.name for s in scenarios}
        if unknown:
            raise SystemExit(f"unknown scenario(s) {sorted(unknown)}; choose from "
                             f"{[s.name for s in scenarios]}")
        scenarios = [s for s in scenarios if s.name in args.only]
    if args.dry_run:  # same code path, a second of traffic each, light load
        scenarios = [replace(s, workload=replace(s.workload, duration_s=1.0, rate=3.0,
                                                 long_arrival_s=0.3, long_prompt_tokens=512))
                     for s in scenarios[:2]]
    return scenarios


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.resimulate:
        return resimulate(args)
    if args.dry_run:
        args.wait_quiet = 0.0
    from chunksim.latency.profile import load_profile
    from chunksim.live.settings import LiveSettings
    from chunksim.reports.validation_plot import plot_validation
    from chunksim.validate.machine import CpuMonitor, wait_for_quiet
    from chunksim.validate.profiling import profile_now
    from chunksim.validate.scenarios import VALIDATION_GRID
    from chunksim.validate.suite import format_step_table, format_table, run_suite, summary_line

    started = time.perf_counter()
    if args.profile:
        profile = load_profile(args.profile)
    else:
        axes = dict(VALIDATION_GRID)
        if args.dry_run:
            axes = {"chunk_lens": "0,64,512", "decode_counts": "0,1,4", "kv_lens": "1,512",
                    "prior_lens": "256"}
        if args.wait_quiet > 0:
            wait_for_quiet(args.wait_quiet)
        t0 = time.perf_counter()
        monitor = CpuMonitor()
        profile = profile_now(args.out / "profile.csv", model="tiny", device="cpu",
                              threads=args.threads, grid="quick", seed=args.seed,
                              show_progress=sys.stderr.isatty(), passes=args.passes,
                              repass_below_s=args.repass_below_ms / 1e3,
                              cold_looks=not args.warm_looks, **axes)
        other = monitor.done()["other_cpu_busy"]
        print(f"profiled tiny on cpu ({len(profile.table)} points, {args.passes} passes) in "
              f"{time.perf_counter() - t0:.0f} s -> {profile.path}; other processes kept "
              f"{'?' if other is None else f'{other:.2f}'} CPUs busy meanwhile")
    settings = LiveSettings.from_profile(profile.provenance, seed=args.seed,
                                         idle_wait=args.idle_wait)
    reports = run_suite(scenarios_for(args), profile, args.out, settings,
                        plot=None if args.no_plot else plot_validation,
                        quiet_wait_s=args.wait_quiet,
                        replay_steps=30 if args.dry_run else 120, live_runs=args.live_runs)
    print()
    print(format_table(reports))
    print()
    print(format_step_table(reports))
    summary = summary_line(reports)
    print(f"\nworst |error| over mean/P99 TTFT, ITL, TPOT: {summary['worst_abs_error_pct']:.1f} %"
          f" (target 5 %); profile {profile.label}, sha256 {profile.sha256[:12]}; "
          f"{time.perf_counter() - started:.0f} s in all")
    summary.update(profile_sha256=profile.sha256, elapsed_s=time.perf_counter() - started)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()

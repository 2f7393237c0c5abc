"""Validate the simulator against real execution of Llama-3.1-8B (bf16) on one CUDA GPU.

    python benchmarks/validate_gpu.py                   # on the GPU machine, one command
    python benchmarks/validate_gpu.py --profile P.csv   # reuse a profile made on this GPU
    python benchmarks/validate_gpu.py --grid chat       # profile only the workload's steps
    python benchmarks/validate_gpu.py --dry-run         # same code path: tiny, CPU, seconds

Steps: (1) check the mixed forward step against an fp64 reference on the device; (2)
profile the 8B model over a grid dense where medium load's steps fall and wide enough to
ship (chunks to 8192, 256 decodes, 8k contexts; see GPU_GRID); (3) find "medium load":
half the simulated capacity of `budget 512` (Sarathi-Serve's capacity: median scheduling
delay <= 2 s); (4) load the live model and time steps of never-run shapes against their
repeats, with torch's default SDPA kernels and with the project's (profiler.first_call:
seconds), and decode steps of unequal contexts against equal ones (profiler.decode_spread:
the live loop's masked, padded decode path vs the table's points; ~10 s); (5) for
`whole`, `chunk 256` and `budget 512` at that rate, run the chat workload live (real
forward passes, same policy objects) and simulated, and write
out/validate_gpu/<policy>__medium/. Prints the error tables and ends with one JSON line.

Why step (4): torch's default SDPA kernel on sm90/sm100 GPUs (cuDNN, with torch >= 2.9
and a bundled cuDNN >= 9.15) builds an execution plan per new shape; a serving loop's
steps mostly have new shapes, while the profiler's warm-ups build each point's plan before
timing it, so a table timed that way under-prices serving. The model excludes cuDNN
(decoder.attention.SDPA_BACKENDS); step (4) shows the cost with and without it. Results
on an H200 and what they mean: docs/results/h200.md.

Time: profiling GPU_GRID takes ~400 s on an H200 and each scenario 60-90 s, ~11 minutes
in all. Pass `--profile chunksim/data/profiles/llama-3.1-8b-h200.csv` on an H200 with
torch 2.11 to skip profiling (~4-5 minutes; that table was measured with torch's default
kernels, cuDNN plans warm, so its difference from the live loop's kernels shows as
`table vs replay`), or `--grid chat` to profile only the workload's steps with the live
loop's kernels (CHAT_GRID: ~160 s estimated from GPU_GRID's per-point times; ~7-8 minutes
in all). benchmarks/gpu_suite.sh runs this script under a time limit and packs its output.
Peak memory: weights 16 GB + the live KV pools (slots per size class, 128 KiB a token).
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

GPU_GRID = {
    "chunk_lens": "0,64,128,256,384,512,768,1024,1536,2048,4096,8192",
    "decode_counts": "0,1,2,4,8,16,32,64,128,256",
    "kv_lens": "1,256,512,1024,2048,4096,8192",
    "prior_lens": "256,512,1024,2048,4096,8192",
}
"""Dense where the chat workload's steps fall (chunks to 2048, tens of decodes over
contexts to 4096), and wide enough (chunks to 8192 = vLLM's default budget on this GPU
class, 256 decodes, 8k contexts) for the table to ship as the bundled H200 profile."""
CHAT_GRID = {
    "chunk_lens": "0,64,128,256,512,1024,2048,4096",
    "decode_counts": "0,1,4,16,32,64,128,256",
    "kv_lens": "1,256,512,1024,2048,4096",
    "prior_lens": "256,512,1024,2048",
}
"""GPU_GRID cut to the chat workload's steps (prompts to 2048 tokens, a few of them in one
`whole` step; contexts to ~2.5k) and thinned where the H200 table is flat or linear: 363
of its 797 points, ~160 s estimated from GPU_GRID's per-point times (GPU_GRID: 396 s on an
H200). For a validation that profiles with its own kernels in under 10 minutes: `--grid
chat`."""
DRY_GRID = {"chunk_lens": "0,64,512", "decode_counts": "0,1,8", "kv_lens": "1,512",
            "prior_lens": "256"}
CAPACITY_SHARE = 0.5
"""Medium load: this share of the simulated capacity (Sarathi-Serve's: median scheduling
delay <= 2 s) of `budget 512`."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny model on CPU, tiny grid, 2-second workloads")
    ap.add_argument("--profile", default=None, help="reuse this profile CSV (same GPU)")
    ap.add_argument("--grid", choices=("ship", "chat"), default="ship",
                    help="profile grid when not reusing one: ship = GPU_GRID (the bundled "
                         "table's, ~400 s on an H200), chat = CHAT_GRID (the validation "
                         "workload's steps only)")
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of arrivals [12; 2 with --dry-run]")
    ap.add_argument("--rate", type=float, default=None, help="skip calibration: req/s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--live-runs", type=int, default=1,
                    help="serve each workload this many times: the GPU's run-to-run spread "
                         "beside the error (each extra run costs a scenario's live time)")
    return ap.parse_args(argv)


def workload_options(args: argparse.Namespace):
    """Chat traffic for an 8B model: prompts ~512 tokens, outputs ~128."""
    from chunksim.workloads.options import WorkloadOptions

    if args.dry_run:
        return WorkloadOptions(prompt_mean=128, prompt_std=96, prompt_min=16, prompt_max=512,
                               output_mean=16, output_std=8, output_min=4, output_max=64,
                               duration_s=args.duration or 2.0, seed=args.seed)
    return WorkloadOptions(prompt_mean=512, prompt_std=384, prompt_min=32, prompt_max=2048,
                           output_mean=128, output_std=96, output_min=16, output_max=512,
                           duration_s=args.duration or 12.0, seed=args.seed)


def get_profile(args: argparse.Namespace, out: Path):
    from chunksim.latency.profile import load_profile
    from chunksim.profiler.selfcheck import check_mixed_step
    from chunksim.validate.profiling import profile_now

    device, dtype = ("cpu", "float32") if args.dry_run else ("cuda", "bfloat16")
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device visible to torch; run on the GPU machine or "
                             "pass --dry-run")
    t0 = time.perf_counter()
    err = check_mixed_step(device, dtype)
    print(f"self-check: mixed step vs fp64 reference on {device}/{dtype}: relative error "
          f"{err:.2e} ({time.perf_counter() - t0:.1f} s)")
    if args.profile:
        return load_profile(args.profile)
    t0 = time.perf_counter()
    profile = profile_now(out / "profile.csv", model="tiny" if args.dry_run else args.model,
                          device=device, dtype=dtype, threads=1, grid="quick", seed=args.seed,
                          show_progress=sys.stderr.isatty(),
                          **(DRY_GRID if args.dry_run else
                             CHAT_GRID if args.grid == "chat" else GPU_GRID))
    print(f"profiled {profile.label}: {len(profile.table)} points in "
          f"{time.perf_counter() - t0:.0f} s -> {profile.path}")
    if not args.dry_run:  # the profiler's model and pools must not crowd the live run's
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
    return profile


def first_call_check(settings):
    """Load the live model once; time steps of never-run shapes against their repeats with
    torch's default SDPA kernels and with the project's (profiler.first_call). Returns the
    runtime (reused by the suite) and the figures."""
    from chunksim.live.runtime import Runtime, pinned_threads
    from chunksim.profiler.first_call import compare_kernels, format_first_call

    t0 = time.perf_counter()
    with pinned_threads(settings.threads):
        runtime = Runtime(settings)
        runtime.warm_up()
        try:
            result = compare_kernels(runtime.model, runtime.device, runtime.dtype,
                                     runtime.sync)
        except Exception as exc:  # a diagnostic: it must never cost the suite
            print(f"first-call check failed ({type(exc).__name__}: {exc}); going on")
            return runtime, {"error": f"{type(exc).__name__}: {exc}"}
    print(f"first call of a new step shape over its repeat ({time.perf_counter() - t0:.1f} s):")
    print(format_first_call(result))
    return runtime, result


DRY_SPREAD_CASES = ((8, 256, 0.5), (16, 256, 0.002), (16, 256, 0.5))
"""Smaller cases for `--dry-run` (tiny on the CPU): the same code path in a few seconds."""


def decode_spread_check(runtime, dry_run: bool = False) -> dict | list:
    """Time decode steps of unequal contexts (masked, padded: as the live loop batches
    them) against equal-length ones (as the table's points) on the live model
    (profiler.decode_spread). A diagnostic: a failure is reported, not raised."""
    from chunksim.live.runtime import pinned_threads
    from chunksim.profiler.decode_spread import decode_spread_ratios, format_decode_spread

    t0 = time.perf_counter()
    try:
        kw = {"cases": DRY_SPREAD_CASES, "rounds": 1} if dry_run else {}
        with pinned_threads(runtime.settings.threads):  # timed as the live loop runs
            rows = decode_spread_ratios(runtime.model, runtime.device, runtime.dtype,
                                        runtime.sync, **kw)
    except Exception as exc:  # e.g. out of memory next to the live KV pools
        print(f"decode spread check failed ({type(exc).__name__}: {exc}); going on")
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if runtime.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
    print(f"decode steps of unequal contexts over equal ones ({time.perf_counter() - t0:.1f} "
          "s; the table prices the equal ones):")
    print(format_decode_spread(rows))
    return rows


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from chunksim.live.settings import LiveSettings
    from chunksim.reports.validation_plot import plot_validation
    from chunksim.sim.run import RunConfig
    from chunksim.validate.scenarios import POLICIES, Scenario, medium_rate
    from chunksim.validate.suite import format_step_table, format_table, run_suite, summary_line

    started = time.perf_counter()
    out = args.out or ROOT / "out" / ("validate_gpu_dry" if args.dry_run else "validate_gpu")
    profile = get_profile(args, out)
    print(f"[{time.perf_counter() - started:.0f} s] profile ready")
    opts = workload_options(args)
    configs = {label: RunConfig(policy=family, chunk=chunk,
                                prefix_caching=False) for label, family, chunk in POLICIES}
    rate = args.rate
    if rate is None:
        rate, capacity = medium_rate(profile, opts, configs["budget512"], CAPACITY_SHARE)
        print(f"medium load: {rate} req/s = {CAPACITY_SHARE:.0%} of the simulated capacity "
              f"of budget 512 ({capacity:.2f} req/s with median scheduling delay <= 2 s)")
    opts = replace(opts, rate=rate)
    # budget 512 first: the policy that defines medium load; then the others, so a run cut
    # short by a time limit still has it
    order = sorted(configs, key=lambda label: label != "budget512")
    scenarios = [Scenario(f"{label}/medium", opts, configs[label]) for label in order]
    settings = LiveSettings.from_profile(profile.provenance, seed=args.seed)
    runtime, first_call = first_call_check(settings)
    decode_spread = decode_spread_check(runtime, args.dry_run)
    print(f"[{time.perf_counter() - started:.0f} s] validating {len(scenarios)} scenarios at "
          f"{rate} req/s")
    reports = run_suite(scenarios, profile, out, settings, plot=plot_validation,
                        replay_steps=30 if args.dry_run else 120, keep_going=True,
                        runtime=runtime, live_runs=args.live_runs)
    if not reports:
        raise SystemExit("every scenario failed (tracebacks above)")
    print()
    print(format_table(reports))
    print()
    print(format_step_table(reports))
    summary = summary_line(reports)
    summary.update(
        model=profile.provenance["model"]["name"], device_name=profile.provenance.get(
            "device_name"), dtype=profile.provenance.get("dtype"), rate_per_s=rate,
        profile_sha256=profile.sha256, elapsed_s=time.perf_counter() - started,
        first_call=first_call, decode_spread=decode_spread,
        metrics={n: {k: v for k, v in r["metrics"].items()} for n, r in reports.items()})
    print(f"\nworst |error| over mean/P99 TTFT, ITL, TPOT: {summary['worst_abs_error_pct']:.1f} %"
          f" ({time.perf_counter() - started:.0f} s in all)")
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()

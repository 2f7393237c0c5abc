"""Does a fleet cost about the sum of its replicas? The Azure conversation hour on one
engine, and the same hour at 8x its arrival rate on 8 replicas behind `least-tokens`.

Workload: the public Azure LLM 2023 conversation trace (../shared/traces, or --trace PATH)
when present, else a synthetic hour with its statistics (as benchmarks/sim_speed.py: 19,366
requests, Poisson 5.5 req/s, lognormal prompt 1,155 / 1,109 and output 211 / 163 tokens).
The x8 hour superposes eight copies of the trace, copy k shifted by k/8 of the hour
(wrapping around), so every replica sees about the original rate and the fleet simulates
eight times the tokens. Budget policy, 2048 tokens, the bundled default profile, routed
by least-tokens (--router).

A linear fleet costs ~8x the single run; the goal is a ratio <= 10 (router and merging
overhead small). The fleet's replicas run more steps than one engine does, so the ratio
is also split into the steps ratio and the cost per step, and the steps ratio into its
parts: 8 replicas, how much busier each is than the lone engine (a router that spreads
requests leaves a replica idle less often) and how much shorter its steps are (smaller
batches), over the simulated span of each.
Prints a table and the process's peak RSS (the fleet's run), then one JSON line.

    python benchmarks/fleet_speed.py [--profile NAME] [--repeats 1] [--router NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from chunksim.latency.profile import load_profile
from chunksim.sim.fleet.config import FleetConfig
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads.build import workload_from_arrays

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import AZURE_CONV, _peak_rss_mb, real_trace, synthetic  # noqa: E402  the same hour

SCALE = 8


def hour(trace: Path):
    """The Azure conversation trace, or sim_speed's synthetic hour with its statistics."""
    if trace.is_file():
        return real_trace(trace), "azure_conv_trace"
    return synthetic(), "synthetic_azure_conv"


def scaled(w, k: int):
    """k copies of `w`, copy j shifted by j/k of its span (wrapping): k x the rate."""
    t = np.array([s.arrival_s for s in w.requests])
    span = float(t.max()) + 1e-9
    arr = np.concatenate([(t + j * span / k) % span for j in range(k)])
    p = np.tile([s.prompt_tokens for s in w.requests], k)
    o = np.tile([s.output_tokens for s in w.requests], k)
    return workload_from_arrays(f"{w.name}x{k}", arr, p, o)


def timed(w, profile, cfg, repeats: int) -> dict:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, s = simulate(w, profile, cfg)
        walls.append(time.perf_counter() - t0)
    return {"wall_s": statistics.median(walls), "requests": s["completed"],
            "steps": s["steps"], "simulated_s": s["duration"],
            "busy_fraction": s["busy_fraction"], "mean_step_ms": s["mean_step_ms"],
            "p99_ttft_ms": s["p99_ttft_ms"], "p99_itl_ms": s["p99_itl_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None, help="profile name or CSV [bundled default]")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--trace", type=Path, default=AZURE_CONV)
    ap.add_argument("--router", default="least-tokens",
                    help="the fleet's router (sim run --router) [least-tokens]")
    args = ap.parse_args()
    profile = load_profile(args.profile)
    w, name = hour(args.trace)
    cfg = RunConfig(policy="budget", chunk=2048)
    single = timed(w, profile, cfg, args.repeats)
    fleet_cfg = replace(cfg, fleet=FleetConfig(replicas=SCALE, router=args.router))
    fleet = timed(scaled(w, SCALE), profile, fleet_cfg, args.repeats)
    print(f"profile: {profile.label}; workload: {name}; router: {args.router}")
    print(f"{'run':<22}{'requests':>10}{'steps':>10}{'sim s':>8}{'busy':>7}{'step ms':>9}"
          f"{'wall s':>9}{'p99 TTFT ms':>13}{'p99 ITL ms':>12}")
    for label, r in (("1 replica", single), (f"{SCALE} replicas, x{SCALE}", fleet)):
        print(f"{label:<22}{r['requests']:>10}{r['steps']:>10}{r['simulated_s']:>8.0f}"
              f"{r['busy_fraction']:>7.3f}{r['mean_step_ms']:>9.2f}"
              f"{r['wall_s']:>9.2f}{r['p99_ttft_ms']:>13.1f}{r['p99_itl_ms']:>12.1f}")
    ratio = fleet["wall_s"] / single["wall_s"]
    # the wall ratio mixes how many steps the fleet runs (smaller batches step more
    # often) with what each costs (routing reads, one event per bulk segment)
    steps_ratio = fleet["steps"] / single["steps"]
    per_step = ratio / steps_ratio
    # steps = busy time / mean step, over the same simulated span: the fleet's replicas
    # step more where they are busier (the router spreads requests) and step shorter
    busier = fleet["busy_fraction"] / single["busy_fraction"]
    shorter = single["mean_step_ms"] / fleet["mean_step_ms"]
    print(f"ratio {ratio:.2f} (goal <= 10; {SCALE} = linear)")
    print(f"steps ratio {steps_ratio:.2f} = {SCALE} replicas x {busier:.3f} (busier) x "
          f"{shorter:.3f} (shorter steps) x {steps_ratio / (SCALE * busier * shorter):.3f} "
          f"(span); cost per step {per_step:.2f}x one engine's")
    rss = _peak_rss_mb()  # the process's peak: the fleet's run, the larger of the two
    print(f"peak RSS {rss:.0f} MB (the fleet's run, its steps kept as a run keeps them)")
    sys.stdout.flush()
    print(json.dumps({"wall_s_fleet8": round(fleet["wall_s"], 3),
                      "wall_s_single": round(single["wall_s"], 3), "ratio": round(ratio, 3),
                      "steps_ratio": round(steps_ratio, 3),
                      "busy_ratio": round(busier, 4), "step_length_ratio": round(shorter, 4),
                      "per_step_ratio": round(per_step, 3), "peak_rss_mb": round(rss),
                      "workload": name, "router": args.router,
                      "profile_sha256": profile.sha256}))


if __name__ == "__main__":
    main()

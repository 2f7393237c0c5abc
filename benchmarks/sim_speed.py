"""How fast is the simulator? One hour of Azure-conversation-like traffic, budget 2048.

Workload: 19,366 requests, Poisson 5.5 req/s (one hour), prompt lognormal mean 1,155 /
std 1,109 tokens and output lognormal mean 211 / std 163 (the public Azure LLM 2023
conversation trace's statistics), on the bundled default profile. Also replays the real
trace itself when ../shared/traces is present (or --trace PATH).

Physics of the hot path: every output token is one step for its request, so an hour at a
few ms per step is ~10^5-10^6 steps; the engine runs steady decode-only stretches as one
vectorized bulk, so Python work scales with events (arrivals, finishes), not steps.
Target: <= 5 s wall on a 2-core machine. Prints a table, then one JSON line.

    python benchmarks/sim_speed.py [--profile NAME] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from chunksim.latency.profile import load_profile
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess
from chunksim.workloads.lengths import LogNormal
from chunksim.workloads.synthetic import SyntheticConfig, generate

AZURE_CONV = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / \
    "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def synthetic():
    return generate(SyntheticConfig(
        arrivals=ArrivalProcess(ArrivalKind.POISSON, rate_per_s=5.5),
        prompt=LogNormal(1155, 1109, 1, 16384), output=LogNormal(211, 163, 1, 1000),
        num_requests=19366, seed=0))


def real_trace(path: Path):
    from chunksim.workloads import load_trace

    return load_trace(path)


def timed(workload, profile, repeats: int) -> dict:
    cfg = RunConfig(policy="budget", chunk=2048)
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        _, s = simulate(workload, profile, cfg)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"wall_s": statistics.median(walls), "walls_s": walls,
            "cpu_s": statistics.median(cpus),
            "simulated_s": s["duration"], "steps": s["steps"],
            "steps_per_s": s["steps"] / statistics.median(walls),
            "requests": s["completed"], "p99_itl_ms": s["p99_itl_ms"],
            "mean_ttft_ms": s["mean_ttft_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None, help="profile name or CSV [bundled default]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=AZURE_CONV)
    args = ap.parse_args()
    profile = load_profile(args.profile)
    rows = {}
    t0 = time.perf_counter()
    w = synthetic()
    gen_s = time.perf_counter() - t0
    rows["synthetic"] = timed(w, profile, args.repeats)
    rows["synthetic"]["workload_build_s"] = gen_s
    if args.trace.is_file():
        t0 = time.perf_counter()
        w = real_trace(args.trace)
        load_s = time.perf_counter() - t0
        rows["azure_conv_trace"] = timed(w, profile, args.repeats)
        rows["azure_conv_trace"]["workload_build_s"] = load_s
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"profile: {profile.label} ({profile.sha256[:12]})")
    print(f"{'workload':<18}{'requests':>9}{'sim s':>9}{'steps':>10}{'wall s':>8}{'cpu s':>7}"
          f"{'steps/s':>11}{'build s':>9}  walls")
    for name, r in rows.items():
        print(f"{name:<18}{r['requests']:>9}{r['simulated_s']:>9.0f}{r['steps']:>10}"
              f"{r['wall_s']:>8.2f}{r['cpu_s']:>7.2f}{r['steps_per_s']:>11.0f}"
              f"{r['workload_build_s']:>9.2f}  "
              + " ".join(f"{x:.2f}" for x in r["walls_s"]))
    print(f"peak RSS {peak_mb:.0f} MB; target wall <= 5 s")
    head = rows["synthetic"]
    out = {"wall_s": round(head["wall_s"], 3), "cpu_s": round(head["cpu_s"], 3),
           "simulated_s": round(head["simulated_s"], 1),
           "steps": head["steps"], "steps_per_s": round(head["steps_per_s"]),
           "peak_rss_mb": round(peak_mb), "profile_sha256": profile.sha256}
    if "azure_conv_trace" in rows:
        t = rows["azure_conv_trace"]
        out["trace"] = {"wall_s": round(t["wall_s"], 3), "cpu_s": round(t["cpu_s"], 3),
                        "simulated_s": round(t["simulated_s"], 1),
                        "steps": t["steps"], "load_s": round(t["workload_build_s"], 3)}
    sys.stdout.flush()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""How fast is the simulator? One hour of Azure-conversation-like traffic, budget 2048.

Workload: 19,366 requests, Poisson 5.5 req/s (one hour), prompt lognormal mean 1,155 /
std 1,109 tokens and output lognormal mean 211 / std 163 (the public Azure LLM 2023
conversation trace's statistics), on the bundled default profile. Also replays the real
trace itself when ../shared/traces is present (or --trace PATH).

Physics of the hot path: every output token is one step for its request, so an hour at a
few ms per step is ~10^5-10^6 steps; the engine runs steady decode-only stretches as one
vectorized bulk, so Python work scales with events (arrivals, finishes), not steps.
Timed: the run and its summary (`simulate`; a run's steps frame is built only when
read). Target: <= 3 s wall on a 2-core machine. Prints a table, then one JSON line.

`--scale` also runs `sim run -n N --rate 4` end to end for N = 19,366, 200,000 and
1,000,000 (`--sizes` to change them), each in its own process so its peak RSS is its
own, fits the growth exponent k (wall ~ N^k, least squares on log-log), and times
`sim run --trace <Azure conv> --policy budget --chunk 2048 --out DIR` end to end (null
without the trace). Its JSON line: wall_s, wall_s_trace, wall_s_cli_out, wall_s_1m,
peak_rss_mb_1m, k (and the per-size rows).

    python benchmarks/sim_speed.py [--profile NAME] [--repeats 3] [--scale [--sizes ...]]

(It measures the chunksim it imports; `PYTHONPATH=.` makes that this checkout's.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
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


SCALE_SIZES = (19366, 200_000, 1_000_000)
ROOT = Path(__file__).resolve().parents[1]


def _one_cli_run(argv: list[str]) -> None:
    """Child of --scale: run `sim run ARGV` in this process, then print its peak RSS."""
    from chunksim.cli import app

    try:
        app(["run", *argv], standalone_mode=False)
    finally:
        print(json.dumps({"peak_rss_mb": round(_peak_rss_mb())}), file=sys.stderr)


def _peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM (getrusage's maxrss would carry the parent's peak
    over fork + exec on Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cli_run(argv: list[str]) -> dict:
    """`sim run ARGV` end to end in a fresh process: wall (process start to exit) and
    that process's peak RSS."""
    import chunksim

    # the child imports the same chunksim as this process (not whatever is installed)
    src = str(Path(chunksim.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(argv)],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"sim run {' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    rss = json.loads(proc.stderr.strip().splitlines()[-1])["peak_rss_mb"]
    return {"wall_s": wall, "peak_rss_mb": rss}


def growth_exponent(ns, walls) -> float | None:
    """k in wall ~ N^k: least-squares slope of log(wall) on log(N); None with fewer than
    two distinct sizes (`--sizes 1000000` times one size only)."""
    if len(set(ns)) < 2:
        return None
    x = [math.log(n) for n in ns]
    y = [math.log(w) for w in walls]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return (sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
            / sum((a - mx) ** 2 for a in x))


def scale(sizes, trace: Path, profile: str | None) -> dict:
    """Per size: `sim run -n N --rate 4 --json` end to end; and the trace with --out."""
    prof = ["--profile", profile] if profile else []
    rows = []
    for n in sizes:
        r = cli_run(["-n", str(n), "--rate", "4", "--json", *prof])
        rows.append({"n": n, **r})
        print(f"sim run -n {n:>9,} --rate 4   wall {r['wall_s']:8.2f} s   peak RSS "
              f"{r['peak_rss_mb']:6.0f} MB", flush=True)
    k = growth_exponent([r["n"] for r in rows], [r["wall_s"] for r in rows])
    if k is not None:
        print(f"growth exponent k = {k:.2f} (wall ~ N^k)")
    out_wall = None
    if trace.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            r = cli_run(["--trace", str(trace), "--policy", "budget", "--chunk", "2048",
                         "--json", "--out", os.path.join(tmp, "out"), *prof])
        out_wall = r["wall_s"]
        print(f"sim run --trace {trace.name} --out DIR   wall {out_wall:.2f} s   peak RSS "
              f"{r['peak_rss_mb']:.0f} MB")
    big = max(rows, key=lambda r: r["n"])
    return {"wall_s_cli_out": None if out_wall is None else round(out_wall, 3),
            "wall_s_1m": round(big["wall_s"], 3) if big["n"] == 1_000_000 else None,
            "peak_rss_mb_1m": big["peak_rss_mb"] if big["n"] == 1_000_000 else None,
            "k": None if k is None else round(k, 3),
            "scale": [{"n": r["n"], "wall_s": round(r["wall_s"], 3),
                       "peak_rss_mb": r["peak_rss_mb"]} for r in rows]}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _one_cli_run(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None, help="profile name or CSV [bundled default]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=AZURE_CONV)
    ap.add_argument("--scale", action="store_true",
                    help="also run 19k, 200k and 1M requests end to end (wall, peak RSS, k)")
    ap.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")],
                    default=list(SCALE_SIZES), help="--scale sizes, comma-separated")
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
    print(f"peak RSS {peak_mb:.0f} MB; target wall <= 3 s")
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
    if args.scale:
        grown = scale(args.sizes, args.trace, args.profile)
        out = {"wall_s": out["wall_s"],
               "wall_s_trace": out["trace"]["wall_s"] if "trace" in out else None,
               **grown}
    sys.stdout.flush()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

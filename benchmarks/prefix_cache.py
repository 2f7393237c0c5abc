"""Prefix-cache hit rates on Mooncake traces (the public traces with block hashes).

Replays each trace under `budget 2048` on the bundled profile with prefix caching on, and
prints the token hit rate next to the trace's block reuse (the share of 512-token hash
blocks seen before, from `sim workload describe`). With a cache that never evicts, the hit
rate approaches the reuse; the gap is the partial last block, the always-recomputed last
token, and blocks evicted under memory pressure. Ends with one JSON line.

    python benchmarks/prefix_cache.py                     # the bundled Mooncake samples
    python benchmarks/prefix_cache.py synthetic_trace.jsonl conversation_trace.jsonl
    python benchmarks/prefix_cache.py TRACE... --kv-blocks N

The full traces are FAST'25 Mooncake's `synthetic_trace.jsonl` and
`conversation_trace.jsonl` (github.com/kvcache-ai/Mooncake, FAST25-release/traces).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from chunksim.latency.profile import load_profile
from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads import describe_workload, load_trace, sample_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="*", type=Path, metavar="TRACE",
                    help="Mooncake JSONL traces (default: the bundled samples)")
    ap.add_argument("--kv-blocks", type=int, default=None,
                    help="KV capacity in blocks (default: from the profile)")
    args = ap.parse_args()
    missing = [str(p) for p in args.traces if not p.is_file()]
    if missing:
        ap.error(f"no such trace file: {', '.join(missing)}")
    if args.traces:
        traces = {p.name: p for p in args.traces}
    else:
        traces = {"sample: mooncake-synthetic": sample_path("mooncake-synthetic"),
                  "sample: mooncake-conversation": sample_path("mooncake-conversation")}
    profile = load_profile()
    out = {}
    print(f"{'trace':<36}{'requests':>9}{'block reuse':>12}{'hit rate':>10}{'wall s':>8}")
    for name, path in traces.items():
        w = load_trace(path)
        reuse = describe_workload(w)["prefix_reuse_fraction"]
        t0 = time.perf_counter()
        _, s = simulate(w, profile, RunConfig(policy="budget", chunk=2048,
                                              kv_blocks=args.kv_blocks))
        wall = time.perf_counter() - t0
        out[name] = {"requests": len(w), "block_reuse": round(reuse, 4),
                     "hit_rate": round(s["prefix_cache_hit_rate"], 4), "wall_s": round(wall, 2)}
        print(f"{name:<36}{len(w):>9}{reuse:>12.1%}{s['prefix_cache_hit_rate']:>10.1%}"
              f"{wall:>8.1f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

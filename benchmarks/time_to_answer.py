"""Time to answer: the README's `sim compare` example, its `sim capacity` example and its
`sim capacity --gpus 4` example, plus `sim --help` and the fixed cost of `sim run` (`sim
run -n 1`: one request, everything but the simulation), timed on the code of a base commit
(checked out with `git worktree`) and on this checkout, in one run, one after the other
per command so both sides see the same machine load.

Each side runs as `python -m chunksim.cli` with its own tree first on PYTHONPATH, bytecode
caching on (as an installed package has it), after one untimed `sim --help` that warms
the caches. `answers_equal` compares what the commands answer: for compare, every
configuration's row of comparison.csv (numbers to rounding, 1e-12 relative); for
capacity, each configuration's max rate (to the search's tolerance, --tol, as the
bracket may start elsewhere) and the recommendation. With `--repeats N` each answer runs
N times a side, the sides alternating and taking turns to go first (before, after, after,
before, ...: the second of two runs back to back can run a few percent slower, so a fixed
order would favour one side), and the table shows medians (the JSON line lists every
run). Prints the machine, a table, then one JSON line.

    python benchmarks/time_to_answer.py --base REV [--only compare,capacity,...] [--repeats N]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {  # the README's examples, verbatim but for --out
    "compare": ["compare", "-w", "long-prompt", "--policies", "whole,chunk,budget",
                "--chunks", "256,512,1024,2048"],
    "capacity": ["capacity", "--slo", "p99_itl_ms=100", "--slo", "p99_ttft_ms=2000"],
    "capacity_gpus4": ["capacity", "-w", "long-prompt", "--profile",
                       "llama-3.1-8b-h200-vllm", "--policies", "budget", "--chunks", "8192",
                       "--gpus", "4", "--fleet", "router=least-tokens", "--seeds", "0",
                       "--slo", "p99_ttft_ms=200", "--slo", "p99_itl_ms=50"],
}
TOL = 0.03


def sim(tree: Path, args: list[str], out: Path | None = None) -> float:
    """Wall seconds of one `sim` command on `tree`'s code (fails loudly)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(tree), COLUMNS="100", TERM="dumb")
    cmd = [sys.executable, "-m", "chunksim.cli", *args, *(["--out", str(out)] if out else [])]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed in {tree}:\n{res.stderr[-2000:]}")
    return wall


def answer(kind: str, out: Path) -> dict:
    """What a command answered, to compare between the two sides."""
    if kind == "compare":
        with open(out / "comparison.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        return {"rows": rows}
    doc = json.loads((out / "capacity.json").read_text())
    rec = doc.get("recommendation") or {}
    return {"rates": {c["config"]: c["max_rate"] for c in doc["configurations"]},
            "recommended": rec.get("config")}


def _close(a, b) -> bool:
    """Equal, numbers to rounding (1e-12 relative: a mean may sum the same values in
    another order), mappings key by key."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return a == b


def _cell(a: str, b: str) -> bool:
    """Two cells of comparison.csv say the same: equal text, or numbers (also those of a
    JSON cell, per class) equal to rounding."""
    if a == b:
        return True
    try:
        return _close(json.loads(a), json.loads(b))
    except ValueError:
        return False


def same(kind: str, a: dict, b: dict) -> bool:
    if kind == "compare":
        ra, rb = a["rows"], b["rows"]
        return len(ra) == len(rb) and all(
            x.keys() == y.keys() and all(_cell(x[k], y[k]) for k in x)
            for x, y in zip(ra, rb, strict=True))
    if a["recommended"] != b["recommended"] or a["rates"].keys() != b["rates"].keys():
        return False
    return all(abs(a["rates"][k] - b["rates"][k]) <= TOL * max(a["rates"][k], 1e-9) * 1.0001
               for k in a["rates"])


def turns(sides: dict[str, Path], i: int) -> list[tuple[str, Path]]:
    """The sides in the order of repeat i: as given on even repeats, reversed on odd."""
    order = list(sides.items())
    return order[::-1] if i % 2 else order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the commit to time against")
    ap.add_argument("--only", default="compare,capacity,capacity_gpus4",
                    help="which examples, comma-separated")
    ap.add_argument("--startup-repeats", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1,
                    help="time each answer this many times a side, alternating the sides; "
                         "the table shows medians (this machine's speed drifts: one pair "
                         "can mislead)")
    args = ap.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    unknown = set(kinds) - set(COMMANDS)
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}; choose from {list(COMMANDS)}")
    tmp = Path(tempfile.mkdtemp(prefix="tta-"))
    old = tmp / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), args.base], cwd=ROOT,
                   check=True, capture_output=True)
    try:
        sides = {"before": old, "after": ROOT}
        for tree in sides.values():
            sim(tree, ["--help"])  # warm the bytecode and page caches
        startup = {s: [] for s in sides}
        fixed = {s: [] for s in sides}
        for i in range(args.startup_repeats):
            for s, tree in turns(sides, i):
                startup[s].append(sim(tree, ["--help"]))
                fixed[s].append(sim(tree, ["run", "-n", "1"]))
        rows = {"cli_startup": {s: statistics.median(v) for s, v in startup.items()},
                "run_fixed": {s: statistics.median(v) for s, v in fixed.items()}}
        equal = True
        runs: dict[str, dict[str, list[float]]] = {}
        for kind in kinds:
            walls: dict[str, list[float]] = {s: [] for s in sides}
            for i in range(max(1, args.repeats)):
                answers = {}
                for s, tree in turns(sides, i):
                    out = tmp / f"{kind}-{s}"
                    shutil.rmtree(out, ignore_errors=True)
                    walls[s].append(sim(tree, COMMANDS[kind], out))
                    answers[s] = answer(kind, out)
                ok = same(kind, answers["before"], answers["after"])
                equal = equal and ok
                print(f"{kind}: before {walls['before'][-1]:.1f} s, after "
                      f"{walls['after'][-1]:.1f} s, same answer: {ok}", flush=True)
            runs[kind] = walls
            rows[kind] = {s: statistics.median(v) for s, v in walls.items()}
            if kind != "compare":
                rows[kind]["answers"] = answers
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT,
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; python {platform.python_version()}")
    print(f"base {args.base} vs this checkout")
    print(f"{'answer':<18}{'before s':>10}{'after s':>10}{'ratio':>8}")
    for kind, r in rows.items():
        print(f"{kind:<18}{r['before']:>10.2f}{r['after']:>10.2f}"
              f"{r['after'] / r['before']:>8.2f}")
    if args.repeats > 1:
        print(f"medians of {args.repeats} alternated runs; each run (before / after):")
        for kind, w in runs.items():
            print(f"  {kind}: " + ", ".join(f"{b:.2f} / {a:.2f}" for b, a in
                                            zip(w["before"], w["after"], strict=True)))
    for kind, r in rows.items():
        if "answers" in r:
            for s in ("before", "after"):
                a = r["answers"][s]
                print(f"  {kind} {s}: {a['recommended']}; "
                      + ", ".join(f"{k} {v:.3g}" for k, v in a["rates"].items()))
    sys.stdout.flush()
    print(json.dumps({
        "compare_s": round(rows["compare"]["after"], 2) if "compare" in rows else None,
        "capacity_s": round(rows["capacity"]["after"], 2) if "capacity" in rows else None,
        "capacity_gpus4_s": (round(rows["capacity_gpus4"]["after"], 2)
                             if "capacity_gpus4" in rows else None),
        "cli_startup_s": round(rows["cli_startup"]["after"], 3),
        "run_fixed_s": round(rows["run_fixed"]["after"], 3),
        "answers_equal": equal,
        "before": {k: round(r["before"], 2) for k, r in rows.items()},
        "runs": {k: {s: [round(x, 2) for x in v] for s, v in w.items()}
                 for k, w in runs.items()},
    }))


if __name__ == "__main__":
    main()

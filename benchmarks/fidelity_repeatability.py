"""How far real execution differs from itself: recorded fidelity-suite runs side by side.

    python benchmarks/fidelity_repeatability.py out/fidelity_a out/fidelity_b ...
    python benchmarks/fidelity_repeatability.py docs/results/cpu-data/cpu-suite.csv
    python benchmarks/fidelity_repeatability.py RUN_DIRS... --save runs.csv

Every suite run (`benchmarks/fidelity.py --out DIR`) serves the same 12 workloads live
(same seed: same arrivals, lengths, policies). Their measured figures should agree as far
as the machine repeats itself, and the simulator cannot be judged below that: when two
live runs of one workload differ by 20 %, any single prediction is ~10 % off one of them.
For each scenario and target metric (mean and P99 of TTFT, ITL, TPOT) this prints the
live runs' spread (max / min - 1) and the typical difference between two runs (median
of |a - b| / b over pairs), beside the simulator's median |error| over the same runs and
how often a run's prediction fell within the live runs' range. Runs whose workloads
differ (arrivals, lengths, policy, KV) are refused. `--save` writes the compact extract
(one row per run x scenario x metric) that a directory-free rerun reads. The last line is
one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without installing

from chunksim import atomic  # noqa: E402
from chunksim.validate.compare import TARGET_KEYS, metric_keys  # noqa: E402
from chunksim.validate.repeat import spread_of  # noqa: E402

FIELDS = ("run", "scenario", "metric", "predicted", "measured", "error_pct", "workload")
"""The extract's columns (`workload`: fingerprint of what was served)."""


def workload_fingerprint(scenario_dir: Path, report: dict) -> str:
    """sha256 (16 hex) of what must be equal for two live runs to be comparable: the
    served requests (arrival, prompt and output lengths) and the policy and KV settings."""
    h = hashlib.sha256()
    with (scenario_dir / "live_requests.csv").open() as f:
        for row in csv.DictReader(f):
            h.update(f"{row['arrival_s']},{row['prompt_tokens']},{row['output_tokens']}\n"
                     .encode())
    same = {k: report.get(k) for k in ("policy", "policy_params", "workload",
                                       "workload_params", "kv_blocks", "block_size",
                                       "max_model_len")}
    h.update(json.dumps(same, sort_keys=True).encode())
    return h.hexdigest()[:16]


def read_run_dir(run_dir: Path) -> list[dict]:
    """Extract rows of one suite output folder (every SCENARIO/validation.json in it)."""
    rows = []
    found = sorted(run_dir.glob("*/validation.json"))
    if not found:
        raise SystemExit(f"{run_dir}: no SCENARIO/validation.json inside; give folders "
                         f"written by benchmarks/fidelity.py --out, or an extract CSV")
    for path in found:
        report = json.loads(path.read_text())
        fp = workload_fingerprint(path.parent, report)
        for key in metric_keys():
            m = report["metrics"][key]
            rows.append({"run": run_dir.name, "scenario": path.parent.name, "metric": key,
                         "predicted": m["predicted"], "measured": m["measured"],
                         "error_pct": m["error_pct"], "workload": fp})
    return rows


def read_extract(path: Path) -> list[dict]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows or set(FIELDS) - set(rows[0]):
        raise SystemExit(f"{path}: not an extract (columns {', '.join(FIELDS)}); write one "
                         f"with --save")
    for r in rows:
        for k in ("predicted", "measured"):
            r[k] = float(r[k])
        r["error_pct"] = None if r["error_pct"] in ("", "None") else float(r["error_pct"])
    return rows


def analyse(rows: list[dict]) -> dict:
    """Per scenario x target metric: the live runs' spread and pairwise difference, the
    simulator's median |error| and how many runs' predictions fell in the live range."""
    runs = sorted({r["run"] for r in rows})
    by = {}
    for r in rows:
        by.setdefault((r["scenario"], r["metric"]), {})[r["run"]] = r
    scenarios: dict[str, dict] = {}
    for (scenario, metric), per_run in sorted(by.items()):
        if metric not in TARGET_KEYS:
            continue
        if set(per_run) != set(runs):
            raise SystemExit(f"scenario {scenario}: recorded by {sorted(per_run)}, not by "
                             f"every run given ({runs}); give runs of the same suite")
        prints = {r["workload"] for r in per_run.values()}
        if len(prints) > 1:
            raise SystemExit(f"scenario {scenario}: the runs served different workloads "
                             f"(fingerprints {sorted(prints)}); compare runs of one suite "
                             f"version and seed only")
        measured = [per_run[run]["measured"] for run in runs]
        errors = [abs(per_run[run]["error_pct"]) for run in runs
                  if per_run[run]["error_pct"] is not None]
        lo, hi = min(measured), max(measured)
        scenarios.setdefault(scenario, {})[metric] = {
            **spread_of(measured),
            "median_abs_error_pct": float(np.median(errors)) if errors else None,
            "predictions_in_range": sum(lo <= per_run[run]["predicted"] <= hi
                                        for run in runs),
        }
    cells = [c for s in scenarios.values() for c in s.values()]

    def med(key: str) -> float | None:
        vals = [c[key] for c in cells if c[key] is not None]
        return float(np.median(vals)) if vals else None

    return {"runs": runs, "cells": len(cells),
            "median_spread_pct": med("spread_pct"),
            "median_pairwise_pct": med("pairwise_pct"),
            "median_abs_error_pct": med("median_abs_error_pct"),
            "predictions_in_range": sum(c["predictions_in_range"] for c in cells),
            "predictions": len(cells) * len(runs),
            "scenarios": scenarios}


def print_table(result: dict) -> None:
    short = {k: k.replace("_ms", "").replace("_", " ") for k in TARGET_KEYS}
    print(f"{len(result['runs'])} live runs of each workload: {', '.join(result['runs'])}")
    print("per cell: live spread % (max/min - 1) / typical two-run difference % / simulator "
          "median |error| %")
    print(f"{'scenario':24s}" + "".join(f"{short[k]:>20s}" for k in TARGET_KEYS))
    for scenario, cells in result["scenarios"].items():
        line = f"{scenario:24s}"
        for k in TARGET_KEYS:
            c = cells[k]
            parts = [c["spread_pct"], c["pairwise_pct"], c["median_abs_error_pct"]]
            line += f"{' / '.join('-' if p is None else f'{p:.0f}' for p in parts):>20s}"
        print(line)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f} %"

    print(f"median over {result['cells']} cells: live spread {pct(result['median_spread_pct'])}"
          f", two-run difference {pct(result['median_pairwise_pct'])}, simulator |error| "
          f"{pct(result['median_abs_error_pct'])}; a run's prediction within the live range "
          f"in {result['predictions_in_range']} of {result['predictions']}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path,
                    help="suite output folders (benchmarks/fidelity.py --out), or one "
                         "extract CSV")
    ap.add_argument("--save", type=Path, default=None, help="write the extract CSV here")
    args = ap.parse_args(argv)
    if len(args.inputs) == 1 and args.inputs[0].suffix == ".csv":
        rows = read_extract(args.inputs[0])
    else:
        if len(args.inputs) < 2:
            raise SystemExit("give two or more suite output folders (or one extract CSV)")
        rows = [r for d in args.inputs for r in read_run_dir(d)]
        if len({d.name for d in args.inputs}) < len(args.inputs):
            raise SystemExit("two folders share a name; the extract keys runs by folder name")
    if args.save is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)  # floats as repr: the extract reproduces every figure
        atomic.write_text(args.save, buf.getvalue())
    result = analyse(rows)
    print_table(result)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

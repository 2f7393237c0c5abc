"""Composed (component) vs whole-step cost model: error on whole-model steps, and what each
profile costs to measure.

Profiles `--model` (default `tiny`, CPU, one thread) twice, side by side, on the `quick`
grid: `sim profile --kind components` (its calibration times a seeded sample of whole
steps: several chunks, unequal decodes, mixed) and `sim profile` (whole steps). Then
prices the calibration's measured steps with both models: the component model as
`sim run` loads it, and the whole-step table (chunks merged into one of the summed
length at an effective prior, decodes at their mean context). Prints a table of |error|
per step kind and the calibration's noise floor (the same steps timed alone twice: how
far the two looks differ; an error below it cannot be told from noise), then one JSON
line: {"median_abs_error_pct", "p90_abs_error_pct" (the composed model, all steps,
against the steps timed alone), "profile_s_components", "profile_s_whole_step" (wall
seconds), "noise_floor_median_pct", "noise_floor_p90_pct", "by_kind" ([median, P90] of
the composed model per kind), ...}.

    python benchmarks/cost_model.py [--model tiny] [--out-dir out/cost_model]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from chunksim.core.shape import BatchShape
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.profiler.calibration import error_stats


def whole_step_shape(chunks: list, decodes: list) -> BatchShape:
    """How a whole-step table sees a step (chunksim.latency.model's docstring)."""
    prefill = sum(n for n, _, _ in chunks)
    work = sum(n * (c + (n + 1) / 2) for n, c, _ in chunks)
    prior = max(0.0, work / prefill - (prefill + 1) / 2) if prefill else 0.0
    d = len(decodes)
    return BatchShape(prefill, prior, d, sum(decodes) / d if d else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out-dir", type=Path, default=Path("out/cost_model"))
    args = ap.parse_args()
    from chunksim.profiler.component_run import run_components
    from chunksim.profiler.run import run_profile
    from chunksim.profiler.settings import build_component_settings, build_settings

    out = args.out_dir
    t0 = time.perf_counter()
    run_components(build_component_settings(model=args.model, device="cpu",
                                            out=out / "components.csv"), show_progress=False)
    comp_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_profile(build_settings(model=args.model, device="cpu", out=out / "whole.csv"),
                show_progress=False)
    whole_s = time.perf_counter() - t0

    comp = load_profile(str(out / "components.csv"))
    whole = latency_model(load_profile(str(out / "whole.csv")), 0.0)
    cal = comp.provenance["calibration"]
    if "skipped" in cal:
        sys.exit(f"calibration skipped: {cal['skipped']}")
    kinds = [s["kind"] for s in cal["sample"]]
    alone = [s["alone_s"] for s in cal["sample"]]
    seq = [s["in_sequence_s"] for s in cal["sample"]]
    composed = [s["predicted_s"] for s in cal["sample"]]
    scale = comp.provenance["components"]["in_sequence_scale"]
    table = [whole.step_s(whole_step_shape(*s["step"]))[0] for s in cal["sample"]]
    stats = {"composed vs alone": error_stats(kinds, composed, alone),
             "composed vs in sequence": error_stats(kinds, [p * scale for p in composed], seq),
             "whole-step vs alone": error_stats(kinds, table, alone),
             "whole-step vs in sequence": error_stats(kinds, table, seq)}
    print(f"model {args.model} · quick grids · {len(kinds)} calibration steps · "
          f"drift {cal['drift']['factor']:.3f}")
    print(f"{'model vs measured':<27}{'kind':<9}{'steps':>6}{'median |err| %':>16}"
          f"{'P90 |err| %':>13}{'median err %':>14}")
    for label, by_kind in stats.items():
        for kind, st in by_kind.items():
            print(f"{label:<27}{kind:<9}{st['steps']:>6}{st['median_abs_error_pct']:>16.1f}"
                  f"{st['p90_abs_error_pct']:>13.1f}{st['median_error_pct']:>14.1f}")
    rep = cal.get("repeatability") or {}
    for kind, st in rep.items():
        print(f"{'noise floor (look 2 vs 1)':<27}{kind:<9}{st['steps']:>6}"
              f"{st['median_abs_error_pct']:>16.1f}{st['p90_abs_error_pct']:>13.1f}")
    print(f"profile wall time: components {comp_s:.1f} s, whole-step {whole_s:.1f} s")
    head = stats["composed vs alone"]["all"]
    print(json.dumps({
        "median_abs_error_pct": head["median_abs_error_pct"],
        "p90_abs_error_pct": head["p90_abs_error_pct"],
        "profile_s_components": round(comp_s, 1), "profile_s_whole_step": round(whole_s, 1),
        "whole_step_median_abs_error_pct": stats["whole-step vs alone"]["all"][
            "median_abs_error_pct"],
        "in_sequence_ratio_median": cal["in_sequence_ratio"]["median"],
        "drift_factor": cal["drift"]["factor"],
        "noise_floor_median_pct": (rep.get("all") or {}).get("median_abs_error_pct"),
        "noise_floor_p90_pct": (rep.get("all") or {}).get("p90_abs_error_pct"),
        "by_kind": {k: [v["median_abs_error_pct"], v["p90_abs_error_pct"]]
                    for k, v in stats["composed vs alone"].items()},
        "steps": len(kinds), "unequal_decode_steps": int(np.sum(
            [len(set(s["step"][1])) > 1 for s in cal["sample"]]))}))


if __name__ == "__main__":
    main()

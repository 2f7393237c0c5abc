"""Profile Llama-3.1-8B (bf16, random weights) on one CUDA GPU over the `default` grid.

    python benchmarks/profile_gpu.py              # on the GPU machine (tens of minutes)
    python benchmarks/profile_gpu.py --resume     # continue after an interruption
    python benchmarks/profile_gpu.py --dry-run    # same code path: tiny model, CPU, tiny grid

Writes chunksim/data/profiles/llama-3.1-8b-h200.csv + .json (override with --out), prints a
human table of landmark steps and ends with one JSON line of those figures.

What the numbers should look like (H200: ~4.8 TB/s HBM, ~990 TFLOP/s dense bf16):
- a decode-only step reads all 16 GB of weights once, so even one decode costs ~3.5 ms,
  and more decodes are nearly free until the batch's KV reads (128 KiB per cached token)
  rival the weights: 64 decodes over 4096 tokens read 34 GB of KV;
- a prefill chunk is compute-bound: ~2 x 8e9 FLOP per token, so 2048 tokens ~ 33 TFLOP
  ~ 40-50 ms at realistic utilisation; attention adds ~4 * 32 layers * 4096 * chunk *
  context FLOP, which matters from a few thousand tokens of prior context on;
- mixing decodes into a chunk step costs little (the weights are read once either way): the
  reason chunked prefill exists.
The grid prunes points whose KV + weights exceed 90% of GPU memory (e.g. 256 decodes over
4096 tokens = 128 GiB of KV). Every point is checkpointed, so an interrupted run loses
at most one point; `--resume` picks up where it stopped.

Before profiling, the mixed step is checked against an fp64 reference on the device
(`chunksim.profiler.selfcheck`): timings of a wrong forward pass are worthless.
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

# (label, chunk_len, prior_len, decode_count, kv_len): steps a reader can sanity-check.
LANDMARKS = (
    ("decode 1 @ kv 1024", 0, 0, 1, 1024),
    ("decode 64 @ kv 4096", 0, 0, 64, 4096),
    ("decode 256 @ kv 1024", 0, 0, 256, 1024),
    ("chunk 512", 512, 0, 0, 0),
    ("chunk 2048", 2048, 0, 0, 0),
    ("chunk 8192", 8192, 0, 0, 0),
    ("chunk 2048 + 64 decodes @ 4096", 2048, 0, 64, 4096),
    ("chunk 2048 over prior 16384", 2048, 16384, 0, 0),
    ("chunk 8192 over prior 16384", 8192, 16384, 0, 0),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny model on CPU with a tiny grid: checks the script end to end")
    ap.add_argument("--resume", action="store_true", help="continue the checkpoint")
    ap.add_argument("--out", type=Path, default=None, help="CSV path (JSON next to it)")
    ap.add_argument("--model", default="llama-3.1-8b", help="model preset (default 8B)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    return ap.parse_args(argv)


def settings_for(args: argparse.Namespace):
    """The ProfileSettings this run uses (the dry run differs only in scale and device)."""
    from chunksim.decoder.config import preset_config
    from chunksim.profiler.grid import GridSpec, grid_preset
    from chunksim.profiler.run import ProfileSettings

    if args.dry_run:
        # Small, but holding two landmarks so the human table shows numbers.
        grid = GridSpec(preset="dry-run", chunk_len=(0, 16, 512), decode_count=(0, 1, 4),
                        kv_len=(1, 1024), prior_len=(32,), warmup=1, repeats=2,
                        point_budget_s=0.5, point_min_s=0.0)
        return ProfileSettings(
            model=preset_config("tiny"), device="cpu", dtype="float32", grid=grid,
            out_csv=args.out or ROOT / "out" / "profiles" / "dry-run-gpu-script.csv",
            threads=1, resume=args.resume)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to torch; run on the GPU machine or pass "
                         "--dry-run")
    grid = replace(grid_preset("default"), warmup=args.warmup, repeats=args.repeats)
    return ProfileSettings(
        model=preset_config(args.model), device="cuda", dtype="bfloat16", grid=grid,
        out_csv=args.out or ROOT / "chunksim" / "data" / "profiles" / f"{args.model}-h200.csv",
        threads=None, resume=args.resume)


def landmark_figures(csv_path: Path) -> dict[str, float | None]:
    """Median seconds of each landmark step (None where the grid lacks or pruned it)."""
    import csv

    with csv_path.open() as f:
        table = {(int(r["chunk_len"]), int(r["prior_len"]), int(r["decode_count"]),
                  int(r["kv_len"])): float(r["median_s"]) for r in csv.DictReader(f)}
    return {label: table.get((c, p, d, k)) for label, c, p, d, k in LANDMARKS}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from chunksim.profiler.run import run_profile
    from chunksim.profiler.selfcheck import check_mixed_step

    settings = settings_for(args)
    t0 = time.perf_counter()
    err = check_mixed_step(settings.device, settings.dtype)
    print(f"self-check: mixed step vs fp64 reference, relative error {err:.2e} "
          f"({settings.device}/{settings.dtype}, {time.perf_counter() - t0:.1f} s)")
    if args.dry_run:  # the CUDA attention branch (CausalBias, repeated KV heads) on CPU
        err_cuda_path = check_mixed_step("cpu", "float32", cuda_kernels=True)
        print(f"self-check: CUDA attention path on CPU, relative error {err_cuda_path:.2e}")
    result = run_profile(settings, show_progress=sys.stderr.isatty())
    meta = result.meta
    figures = landmark_figures(result.csv_path)
    print(f"\n{meta['model']['name']} on {meta['device_name']} ({meta['dtype']}, "
          f"{meta['attention_backend']}): {meta['points']} points in {meta['elapsed_s']:.0f} s, "
          f"pruned {meta['pruned_points']}")
    print(f"{'step':<34}{'median ms':>12}")
    for label, value in figures.items():
        shown = "   (absent)" if value is None else f"{value * 1e3:12.3f}"
        print(f"{label:<34}{shown}")
    summary = {
        "profile": str(result.csv_path), "model": meta["model"]["name"],
        "device_name": meta["device_name"], "dtype": meta["dtype"], "points": meta["points"],
        "elapsed_s": meta["elapsed_s"], "content_sha256": meta["content_sha256"],
        "selfcheck_rel_error": err, "median_s": figures,
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()

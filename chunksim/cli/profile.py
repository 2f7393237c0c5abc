"""`sim profile`: measure the forward-step latency table the simulator reads.

No torch import at module level: `sim` imports this module to register the command, and
`sim run` must start without loading torch.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from chunksim.profiler.settings import build_settings


class ModelName(str, Enum):
    """Model presets (the Typer choice type)."""

    tiny = "tiny"
    llama_3_1_8b = "llama-3.1-8b"
    qwen2_5_0_5b = "qwen2.5-0.5b"
    mistral_7b = "mistral-7b"


class DeviceName(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class DtypeName(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class GridName(str, Enum):
    quick = "quick"
    default = "default"
    fine = "fine"


def profile(
    model: ModelName = typer.Option(ModelName.tiny, "--model", help="Model shape preset."),
    hf_config: Path | None = typer.Option(
        None, "--hf-config", help="Local Hugging Face config.json (overrides --model)."),
    device: DeviceName = typer.Option(DeviceName.auto, "--device"),
    dtype: DtypeName | None = typer.Option(
        None, "--dtype", help="Default: float32 on CPU, bfloat16 on CUDA."),
    threads: int = typer.Option(1, "--threads", help="torch intra-op threads (CPU only)."),
    grid: GridName = typer.Option(GridName.quick, "--grid", help="Grid preset."),
    chunk_lens: str | None = typer.Option(None, "--chunk-lens", help="e.g. 0,64,256"),
    decode_counts: str | None = typer.Option(None, "--decode-counts", help="e.g. 0,1,8"),
    kv_lens: str | None = typer.Option(None, "--kv-lens", help="e.g. 1,1024,4096"),
    prior_lens: str | None = typer.Option(
        None, "--prior-lens", help="e.g. 512,4096 ('' for no prior-context rows)"),
    warmup: int | None = typer.Option(None, "--warmup", help="Default: the grid preset's."),
    repeats: int | None = typer.Option(None, "--repeats", help="Default: the grid preset's."),
    point_budget_s: float | None = typer.Option(
        None, "--point-budget-s",
        help="Stop repeating a point after this many timed seconds (min 3 repeats)."),
    out: Path | None = typer.Option(
        None, "--out", help="CSV path (JSON next to it). Default: out/profiles/MODEL-DEVICE.csv"),
    passes: int = typer.Option(
        1, "--passes", help="Look at every fast point (see --repass-below-ms) this many "
        "times, each pass in a fresh order, and keep the median: robust to a machine "
        "whose speed drifts. Costs ~ one grid pass of the fast points per extra pass."),
    repass_below_ms: float | None = typer.Option(
        None, "--repass-below-ms",
        help="With --passes: points whose first median is under this are looked at again "
        "(default 300)."),
    warm_looks: bool = typer.Option(
        False, "--warm-looks", help="With --passes: every later look warms up and repeats, "
        "as the first pass does, instead of timing a point with a prefill once, cold."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run."),
    seed: int = typer.Option(0, "--seed", help="Seed of weights, KV contents, tokens."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Profile forward-step latency over a (chunk, prior, decodes, kv) grid."""
    settings = build_settings(
        model=model.value, hf_config=hf_config, device=device.value,
        dtype=None if dtype is None else dtype.value, threads=threads, grid=grid.value,
        chunk_lens=chunk_lens, decode_counts=decode_counts, kv_lens=kv_lens,
        prior_lens=prior_lens, warmup=warmup, repeats=repeats, point_budget_s=point_budget_s,
        out=out, resume=resume, seed=seed, passes=passes,
        repass_below_s=None if repass_below_ms is None else repass_below_ms / 1e3,
        cold_looks=not warm_looks,
    )
    from chunksim.cli.paths import check_out_file
    from chunksim.profiler.run import run_profile

    check_out_file(settings.out_csv)
    try:
        result = run_profile(settings, show_progress=not quiet)
    except KeyboardInterrupt:
        from chunksim.cli.interrupts import command_as_typed, interrupted
        from chunksim.profiler.store import Checkpoint

        ckpt = Checkpoint(settings.out_csv)
        n = (max(len(ckpt.csv_path.read_text().splitlines()) - 1, 0)
             if ckpt.csv_path.is_file() else 0)
        if not ckpt.exists():
            interrupted("nothing was saved", command_as_typed())
        interrupted(f"{n} measured point(s) are saved in {ckpt.csv_path}",
                    command_as_typed("--resume"))
    meta = result.meta
    looks = (f", {meta['passes']} passes over {meta['repassed_points']} fast points"
             if meta["passes"] > 1 else "")
    typer.echo(f"wrote {result.csv_path} ({meta['points']} points{looks}, "
               f"{meta['elapsed_s']:.1f} s) and {result.json_path}")
    warning = first_call_warning(meta.get("first_call"))
    if warning:
        typer.echo(warning, err=True)


def first_call_warning(first_call: dict | None) -> str | None:
    """A warning when a new step shape's first call cost much more than its repeat."""
    from chunksim.profiler.first_call import costly_kind

    costly = costly_kind(first_call)
    if costly is None:
        return None
    kind, ratio = costly
    return (f"warning: on this machine the first call of a new {kind} step shape took "
            f"{ratio:.1f}x its repeat; the table is timed warm, so it under-prices a "
            "serving loop, which meets new shapes every step. Look for a library that "
            "builds a plan or compiles per shape (docs/results/h200.md).")

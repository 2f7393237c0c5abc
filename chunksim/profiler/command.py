"""`sim profile`: measure the forward-step latency table the simulator reads.

No torch import at module level: `sim` imports this module to register the command, and
`sim run` must start without loading torch.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer


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
    from chunksim.profiler.run import run_profile

    result = run_profile(settings, show_progress=not quiet)
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
            "builds a plan or compiles per shape (docs/fidelity.md, 'Results on GPU').")


def build_settings(*, model: str = "tiny", hf_config: Path | None = None,
                   device: str = "auto", dtype: str | None = None, threads: int = 1,
                   grid: str = "quick", chunk_lens: str | None = None,
                   decode_counts: str | None = None, kv_lens: str | None = None,
                   prior_lens: str | None = None, warmup: int | None = None,
                   repeats: int | None = None, point_budget_s: float | None = None,
                   out: Path | None = None, resume: bool = False, seed: int = 0,
                   passes: int = 1, repass_below_s: float | None = None,
                   cold_looks: bool = True):
    """Flags -> `ProfileSettings` (imports torch to resolve the device). ValueError names the
    flag at fault."""
    from chunksim.profiler.config import load_hf_config, preset_config
    from chunksim.profiler.device import resolve_device
    from chunksim.profiler.grid import grid_preset, parse_axis
    from chunksim.profiler.run import REPASS_BELOW_S, ProfileSettings

    cfg = load_hf_config(hf_config) if hf_config is not None else preset_config(model)
    dev = resolve_device(device)
    spec = grid_preset(grid).with_overrides(
        chunk_len=None if chunk_lens is None else parse_axis(chunk_lens, "--chunk-lens"),
        decode_count=None if decode_counts is None else parse_axis(decode_counts,
                                                                   "--decode-counts"),
        kv_len=None if kv_lens is None else parse_axis(kv_lens, "--kv-lens"),
        prior_len=None if prior_lens is None else parse_axis(prior_lens, "--prior-lens"),
    )
    timing = {"warmup": warmup, "repeats": repeats, "point_budget_s": point_budget_s}
    timing = {k: v for k, v in timing.items() if v is not None}
    if timing:
        from dataclasses import replace

        spec = replace(spec, **timing)
    if dev == "cpu" and threads < 1:
        raise ValueError(f"--threads {threads}: use 1 or more")
    return ProfileSettings(
        model=cfg, device=dev, dtype=dtype or ("float32" if dev == "cpu" else "bfloat16"),
        grid=spec, out_csv=out or Path("out/profiles") / f"{cfg.name}-{dev}.csv",
        threads=threads if dev == "cpu" else None, seed=seed, resume=resume, passes=passes,
        repass_below_s=REPASS_BELOW_S if repass_below_s is None else repass_below_s,
        cold_looks=cold_looks,
    )

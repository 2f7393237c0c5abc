"""`sim profile` (measure) below the command line: the rules of its flags per engine and
kind, and the measurement itself (`profiler.run` for whole steps, `profiler.component_run`
for a step's components, `profiler.vllm_profile` for vLLM's own engine steps), with the
lines that say what was written. No torch import at module level: the command imports
this module."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MeasureFlags:
    """The flags of `sim profile` as parsed (choices as their strings); `sim profile
    --help` says what each means."""

    model: str
    hf_config: Path | None
    device: str
    dtype: str | None
    threads: int
    grid: str
    chunk_lens: str | None
    decode_counts: str | None
    kv_lens: str | None
    prior_lens: str | None
    warmup: int | None
    repeats: int | None
    point_budget_s: float | None
    out: Path | None
    passes: int
    repass_below_ms: float | None
    warm_looks: bool
    resume: bool
    seed: int
    quiet: bool
    kind: str
    tp: int
    ep: int
    link: str | None
    link_gbps: float | None
    link_latency_us: float | None
    clock: str | None
    calibrate: bool
    engine: str
    block_size: int | None


@dataclass(frozen=True)
class MeasureIO:
    """What the flow needs from the command line: `presets` (the model presets),
    `check_out_file` (refuses an --out it may not write), `echo` (the answer, stdout),
    `say` (a warning line, stderr) and `interrupted` (Ctrl-C: says what the checkpoint it
    is given holds and how to continue; does not return)."""

    presets: Sequence[str]
    check_out_file: Callable[[Path], None]
    echo: Callable[[str], None]
    say: Callable[[str], None]
    interrupted: Callable[[object], None]


VLLM_FLAGS = frozenset({
    "model", "device", "dtype", "threads", "grid", "chunk_lens", "decode_counts", "kv_lens",
    "prior_lens", "repeats", "block_size", "out", "seed", "quiet", "engine", "clock"})
"""The flags (parameter names) `--engine vllm` reads."""
_VLLM_ONLY = ("{flags}: not used by --engine vllm, which times whole engine steps over "
              "its own grid; drop them (see sim profile --help)")


def measure(f: MeasureFlags, on_command_line: Collection[str], io: MeasureIO) -> None:
    """Measure the profile `f` asks for and say what was written. `on_command_line`: the
    parameter names typed on the command line (--engine vllm refuses the ones it does not
    read). Raises ValueError naming the flag."""
    if f.engine == "vllm":
        _measure_vllm(f, on_command_line, io)
        return
    if f.block_size is not None:
        raise ValueError("--block-size applies to --engine vllm only")
    if f.model not in io.presets:
        raise ValueError(f"--model {f.model!r} is not a preset; use one of "
                         f"{', '.join(io.presets)} (or --hf-config PATH; "
                         f"a model folder is for --engine vllm)")
    if f.kind == "components":
        given = [flag for flag, v in (
            ("--chunk-lens", f.chunk_lens), ("--decode-counts", f.decode_counts),
            ("--kv-lens", f.kv_lens), ("--prior-lens", f.prior_lens),
            ("--repass-below-ms", f.repass_below_ms)) if v is not None]
        given += [flag for flag, v in (("--passes", f.passes != 1),
                                       ("--warm-looks", f.warm_looks)) if v]
        if given:
            raise ValueError(f"{', '.join(given)} apply to --kind whole-step only; a "
                             f"component profile takes its axes from --grid")
        _measure_components(f, io)
        return
    if f.ep != 1:
        raise ValueError(f"--ep {f.ep} applies to --kind components only")
    if (f.tp != 1 or f.link is not None or f.link_gbps is not None
            or f.link_latency_us is not None):
        raise ValueError("--tp / --link / --link-gbps / --link-latency-us apply to --kind "
                         "components only")
    if not f.calibrate or f.clock is not None:
        raise ValueError("--no-calibrate / --clock apply to --kind components only (--clock "
                         "also to --engine vllm)")
    _measure_whole_steps(f, io)


def _measure_whole_steps(f: MeasureFlags, io: MeasureIO) -> None:
    """`--kind whole-step`: whole forward passes over a (chunk, prior, decodes, kv) grid."""
    from chunksim.profiler.run import run_profile
    from chunksim.profiler.settings import build_settings

    settings = build_settings(
        model=f.model, hf_config=f.hf_config, device=f.device, dtype=f.dtype,
        threads=f.threads, grid=f.grid, chunk_lens=f.chunk_lens,
        decode_counts=f.decode_counts, kv_lens=f.kv_lens, prior_lens=f.prior_lens,
        warmup=f.warmup, repeats=f.repeats, point_budget_s=f.point_budget_s, out=f.out,
        resume=f.resume, seed=f.seed, passes=f.passes,
        repass_below_s=None if f.repass_below_ms is None else f.repass_below_ms / 1e3,
        cold_looks=not f.warm_looks,
    )
    io.check_out_file(settings.out_csv)
    try:
        result = run_profile(settings, show_progress=not f.quiet)
    except KeyboardInterrupt:
        from chunksim.profiler.store import Checkpoint

        io.interrupted(Checkpoint(settings.out_csv))
        raise
    meta = result.meta
    looks = (f", {meta['passes']} passes over {meta['repassed_points']} fast points"
             if meta["passes"] > 1 else "")
    io.echo(f"wrote {result.csv_path} ({meta['points']} points{looks}, "
            f"{meta['elapsed_s']:.1f} s) and {result.json_path}")
    warning = first_call_warning(meta.get("first_call"))
    if warning:
        io.say(warning)


def _measure_vllm(f: MeasureFlags, on_command_line: Collection[str],
                  io: MeasureIO) -> None:
    """`--engine vllm`: vLLM's own engine steps as a component profile."""
    given = sorted("--" + name.replace("_", "-") for name in on_command_line
                   if name not in VLLM_FLAGS)
    if given:
        raise ValueError(_VLLM_ONLY.format(flags=", ".join(given)))
    out = f.out
    if out is None:
        raise ValueError("--engine vllm needs --out P.csv (the profile's CSV path)")
    if out.suffix != ".csv":
        raise ValueError(f"--out {str(out)!r}: give the CSV path, ending in .csv")
    if f.threads < 1:
        raise ValueError(f"--threads {f.threads}: give at least 1")
    from chunksim.profiler.vllm_points import engine_grid
    from chunksim.profiler.vllm_profile import (
        VllmProfileSettings,
        held_out_line,
        run_vllm_profile,
        summary_line,
    )

    settings = VllmProfileSettings(
        model=f.model, out_csv=out,
        grid=engine_grid(f.grid, f.chunk_lens, f.prior_lens, f.decode_counts, f.kv_lens,
                         f.repeats),
        dtype=f.dtype, block_size=f.block_size, threads=f.threads, seed=f.seed,
        device=f.device, clock=f.clock)
    io.check_out_file(out)
    meta = run_vllm_profile(settings, show_progress=not f.quiet)
    m = meta["measurement"]
    io.echo(f"wrote {out} ({m['points']} engine step shapes x {m['looks']} looks, each "
            f"shape-checked; {meta['elapsed_s']:.1f} s) and {out.with_suffix('.json')}")
    io.echo(summary_line(meta))
    io.echo(held_out_line(meta))


def _measure_components(f: MeasureFlags, io: MeasureIO) -> None:
    """`--kind components`: a layer's parts, composed into steps and calibrated."""
    from chunksim.profiler.component_points import checkpoint
    from chunksim.profiler.component_run import run_components
    from chunksim.profiler.settings import build_component_settings

    settings = build_component_settings(
        model=f.model, hf_config=f.hf_config, device=f.device, dtype=f.dtype,
        threads=f.threads, grid=f.grid, warmup=f.warmup, repeats=f.repeats,
        point_budget_s=f.point_budget_s, out=f.out, seed=f.seed, tp=f.tp, link=f.link,
        link_gbps=f.link_gbps, link_latency_us=f.link_latency_us, calibrate=f.calibrate,
        clock=f.clock, resume=f.resume, ep=f.ep)
    io.check_out_file(settings.out_csv)
    try:
        result = run_components(settings, show_progress=not f.quiet)
    except KeyboardInterrupt:
        io.interrupted(checkpoint(settings.out_csv))
        raise
    meta = result.meta
    io.echo(f"wrote {result.csv_path} ({meta['points']} component points, "
            f"{meta['elapsed_s']:.1f} s) and {result.json_path}")
    io.echo(calibration_lines(meta.get("calibration")))


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


def calibration_lines(cal: dict | None) -> str:
    """The composed model's error on the calibration sample, one line per step kind."""
    if not cal or "skipped" in cal:
        return f"calibration skipped: {(cal or {}).get('skipped', 'not run')}"
    lines = [f"composed vs whole-model steps ({cal['steps']} steps; |error| %):",
             f"{'kind':<9}{'steps':>6}{'alone med':>11}{'alone p90':>11}"
             f"{'in-seq med':>12}{'in-seq p90':>12}"]
    for kind, a in cal["alone"].items():
        q = cal["in_sequence"][kind]
        lines.append(f"{kind:<9}{a['steps']:>6}{a['median_abs_error_pct']:>11.1f}"
                     f"{a['p90_abs_error_pct']:>11.1f}{q['median_abs_error_pct']:>12.1f}"
                     f"{q['p90_abs_error_pct']:>12.1f}")
    r = cal["in_sequence_ratio"]
    lines.append(f"in sequence / alone: median {r['median']:.3f}, P25 {r['p25']:.3f}")
    rep = (cal.get("repeatability") or {}).get("all")
    if rep:
        lines.append(f"noise floor: the same steps timed alone twice differ by median "
                     f"{rep['median_abs_error_pct']:.1f} %, P90 {rep['p90_abs_error_pct']:.1f} %")
    d = cal["drift"]
    if abs(d["factor"] - 1) > 0.05:
        a = cal["alone_drift_corrected"]["all"]
        lines.append(f"the machine's speed moved: components re-timed after the whole steps "
                     f"ran {d['factor']:.2f}x their table figures; at that speed the error "
                     f"would be median {a['median_abs_error_pct']:.1f} %, P90 "
                     f"{a['p90_abs_error_pct']:.1f} %")
    return "\n".join(lines)

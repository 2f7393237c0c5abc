"""`sim profile`: measure the forward-step latency table the simulator reads.

No torch import at module level: `sim` imports this module to register the command, and
`sim run` must start without loading torch.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from chunksim.cli import help_format, lazy
from chunksim.profiler.settings import build_settings


class ModelName(str, Enum):
    """Model presets (the Typer choice type)."""

    tiny = "tiny"
    llama_3_1_8b = "llama-3.1-8b"
    qwen2_5_0_5b = "qwen2.5-0.5b"
    mistral_7b = "mistral-7b"
    llama_3_1_70b = "llama-3.1-70b"
    qwen2_5_72b = "qwen2.5-72b"
    llama_3_1_70b_mini = "llama-3.1-70b-mini"
    mixtral_8x7b = "mixtral-8x7b"
    qwen3_30b_a3b = "qwen3-30b-a3b"
    deepseek_v3 = "deepseek-v3"
    tiny_moe = "tiny-moe"


class EngineName(str, Enum):
    """What `sim profile` times."""

    torch = "torch"
    vllm = "vllm"


class DeviceName(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class DtypeName(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class KindName(str, Enum):
    whole_step = "whole-step"
    components = "components"


class LinkName(str, Enum):
    nvlink_h100 = "nvlink-h100"
    nvlink_h200 = "nvlink-h200"
    pcie = "pcie"
    measured = "measured"


class GridName(str, Enum):
    quick = "quick"
    default = "default"
    fine = "fine"


def profile(
    ctx: typer.Context,
    model: str = typer.Option(
        ModelName.tiny.value, "--model", help="Model shape preset (--engine torch: "
        f"{', '.join(m.value for m in ModelName)}); with --engine vllm a folder holding "
        "the model's config.json, or a name in the local Hugging Face cache."),
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
    kind: KindName = typer.Option(
        KindName.whole_step, "--kind", help="whole-step: time whole forward passes over a "
        "(chunk, prior, decodes, kv) grid. components: time a layer's parts and compose "
        "steps from them (docs/profile-format.md), calibrated against whole steps."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (--kind components): "
                           "time one shard's shapes, add two all-reduces per layer."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel degree of a MoE model (--kind "
                           "components): 1, or --tp (whole experts, num_experts / ep per "
                           "device, all-to-all dispatch and combine from the link model)."),
    link: LinkName | None = typer.Option(
        None, "--link", help="All-reduce link preset with --tp (default nvlink-h100), or "
        "measured: time it with torch.distributed (NCCL over --tp CUDA devices, gloo on "
        "CPU)."),
    link_gbps: float | None = typer.Option(
        None, "--link-gbps", help="All-reduce bandwidth, Gbit/s (overrides --link)."),
    link_latency_us: float | None = typer.Option(
        None, "--link-latency-us", help="All-reduce latency per call, us (overrides --link)."),
    clock: str | None = typer.Option(
        None, "--clock", help="--kind components or --engine vllm: wall or thread-cpu "
        "(default: thread-cpu on one CPU thread, so other processes do not skew short and "
        "long timings differently; else wall)."),
    calibrate: bool = typer.Option(
        True, "--calibrate/--no-calibrate", help="--kind components: time whole-model "
        "steps to fit the fixed cost and report the composed model's error."),
    engine: EngineName = typer.Option(
        EngineName.torch, "--engine", help="torch: chunksim's own PyTorch decoder, a model "
        "of your own code's forward pass. vllm: the installed vLLM's own engine steps "
        "(dummy weights; pip install 'chunksim[vllm]'), written as a component profile "
        "with mixed steps measured jointly."),
    block_size: int | None = typer.Option(
        None, "--block-size", help="--engine vllm: KV block size (default 32 on CPU, "
        "whose attention backend needs a multiple of 32; 16 on CUDA)."),
) -> None:
    """Profile forward-step latency: whole steps over a grid, or a step's components.
    `sim profile import DIR` builds a component profile from external measurements."""
    if ctx.invoked_subcommand is not None:
        return
    if engine is EngineName.vllm:
        _profile_vllm(ctx, model, device.value, None if dtype is None else dtype.value,
                      threads, grid.value, chunk_lens, decode_counts, kv_lens, prior_lens,
                      repeats, block_size, out, seed, quiet, clock)
        return
    if block_size is not None:
        raise ValueError("--block-size applies to --engine vllm only")
    if model not in {m.value for m in ModelName}:
        raise ValueError(f"--model {model!r} is not a preset; use one of "
                         f"{', '.join(m.value for m in ModelName)} (or --hf-config PATH; "
                         f"a model folder is for --engine vllm)")
    model = ModelName(model)
    if kind is KindName.components:
        given = [f for f, v in (("--chunk-lens", chunk_lens), ("--decode-counts", decode_counts),
                                ("--kv-lens", kv_lens), ("--prior-lens", prior_lens),
                                ("--repass-below-ms", repass_below_ms))
                 if v is not None]
        given += [f for f, v in (("--passes", passes != 1), ("--warm-looks", warm_looks))
                  if v]
        if given:
            raise ValueError(f"{', '.join(given)} apply to --kind whole-step only; a "
                             f"component profile takes its axes from --grid")
        _profile_components(model.value, hf_config, device.value,
                            None if dtype is None else dtype.value, threads, grid.value,
                            warmup, repeats, point_budget_s, out, seed, quiet, tp,
                            None if link is None else link.value, link_gbps,
                            link_latency_us, calibrate, clock, resume, ep)
        return
    if ep != 1:
        raise ValueError(f"--ep {ep} applies to --kind components only")
    if tp != 1 or link is not None or link_gbps is not None or link_latency_us is not None:
        raise ValueError("--tp / --link / --link-gbps / --link-latency-us apply to --kind "
                         "components only")
    if not calibrate or clock is not None:
        raise ValueError("--no-calibrate / --clock apply to --kind components only (--clock "
                         "also to --engine vllm)")
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
        from chunksim.profiler.store import Checkpoint

        _interrupted(Checkpoint(settings.out_csv))
    meta = result.meta
    looks = (f", {meta['passes']} passes over {meta['repassed_points']} fast points"
             if meta["passes"] > 1 else "")
    typer.echo(f"wrote {result.csv_path} ({meta['points']} points{looks}, "
               f"{meta['elapsed_s']:.1f} s) and {result.json_path}")
    warning = first_call_warning(meta.get("first_call"))
    if warning:
        typer.echo(warning, err=True)


_VLLM_ONLY = ("{flags}: not used by --engine vllm, which times whole engine steps over "
              "its own grid; drop them (see sim profile --help)")


def _profile_vllm(ctx: typer.Context, model: str, device: str, dtype: str | None,
                  threads: int, grid: str, chunk_lens: str | None,
                  decode_counts: str | None, kv_lens: str | None, prior_lens: str | None,
                  repeats: int | None, block_size: int | None, out: Path | None, seed: int,
                  quiet: bool, clock: str | None) -> None:
    """`sim profile --engine vllm`: vLLM's own engine steps as a component profile."""
    allowed = {"model", "device", "dtype", "threads", "grid", "chunk_lens", "decode_counts",
               "kv_lens", "prior_lens", "repeats", "block_size", "out", "seed", "quiet",
               "engine", "clock"}
    given = sorted("--" + name.replace("_", "-") for name in ctx.params
                   if name not in allowed
                   and getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE")
    if given:
        raise ValueError(_VLLM_ONLY.format(flags=", ".join(given)))
    if out is None:
        raise ValueError("--engine vllm needs --out P.csv (the profile's CSV path)")
    if out.suffix != ".csv":
        raise ValueError(f"--out {str(out)!r}: give the CSV path, ending in .csv")
    if threads < 1:
        raise ValueError(f"--threads {threads}: give at least 1")
    from chunksim.profiler.vllm_points import engine_grid
    from chunksim.profiler.vllm_profile import (
        VllmProfileSettings,
        held_out_line,
        run_vllm_profile,
        summary_line,
    )

    settings = VllmProfileSettings(
        model=model, out_csv=out,
        grid=engine_grid(grid, chunk_lens, prior_lens, decode_counts, kv_lens, repeats),
        dtype=dtype, block_size=block_size, threads=threads, seed=seed, device=device,
        clock=clock)
    from chunksim.cli.paths import check_out_file

    check_out_file(out)
    meta = run_vllm_profile(settings, show_progress=not quiet)
    m = meta["measurement"]
    typer.echo(f"wrote {out} ({m['points']} engine step shapes x {m['looks']} looks, each "
               f"shape-checked; {meta['elapsed_s']:.1f} s) and {out.with_suffix('.json')}")
    typer.echo(summary_line(meta))
    typer.echo(held_out_line(meta))


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


def _interrupted(ckpt) -> None:
    """Ctrl-C: say what the checkpoint holds and how to continue."""
    from chunksim.cli.interrupts import command_as_typed, interrupted

    n = (max(len(ckpt.csv_path.read_text().splitlines()) - 1, 0)
         if ckpt.csv_path.is_file() else 0)
    if not ckpt.exists():
        interrupted("nothing was saved", command_as_typed())
    interrupted(f"{n} measured point(s) are saved in {ckpt.csv_path}",
                command_as_typed("--resume"))


def _profile_components(model: str, hf_config: Path | None, device: str, dtype: str | None,
                        threads: int, grid: str, warmup: int | None, repeats: int | None,
                        point_budget_s: float | None, out: Path | None, seed: int,
                        quiet: bool, tp: int, link: str | None, link_gbps: float | None,
                        link_latency_us: float | None, calibrate: bool,
                        clock: str | None, resume: bool, ep: int = 1) -> None:
    from chunksim.profiler.settings import build_component_settings

    settings = build_component_settings(
        model=model, hf_config=hf_config, device=device, dtype=dtype, threads=threads,
        grid=grid, warmup=warmup, repeats=repeats, point_budget_s=point_budget_s, out=out,
        seed=seed, tp=tp, link=link, link_gbps=link_gbps, link_latency_us=link_latency_us,
        calibrate=calibrate, clock=clock, resume=resume, ep=ep)
    from chunksim.cli.paths import check_out_file
    from chunksim.profiler.component_points import checkpoint
    from chunksim.profiler.component_run import run_components

    check_out_file(settings.out_csv)
    try:
        result = run_components(settings, show_progress=not quiet)
    except KeyboardInterrupt:
        _interrupted(checkpoint(settings.out_csv))
    meta = result.meta
    typer.echo(f"wrote {result.csv_path} ({meta['points']} component points, "
               f"{meta['elapsed_s']:.1f} s) and {result.json_path}")
    typer.echo(calibration_lines(meta.get("calibration")))


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


class SourceName(str, Enum):
    """Where `sim profile import` reads timings from."""

    csv = "csv"
    aiconfigurator = "aiconfigurator"
    vllm_log = "vllm-log"


def profile_import(
    folder: Path | None = typer.Argument(
        None, help="--from csv: folder of per-component CSVs (docs/profile-format.md, "
        "Importing). --from vllm-log: the server log (LOG)."),
    out: Path = typer.Option(..., "--out", help="CSV path of the profile (JSON next to it)."),
    source: SourceName = typer.Option(
        SourceName.csv, "--from", help="csv: a folder of per-component CSVs. "
        "aiconfigurator: NVIDIA AIConfigurator's measured kernel database (pip install "
        "'chunksim[aic]'). vllm-log: fit step costs to a `vllm serve "
        "--enable-logging-iteration-details` log."),
    model: str | None = typer.Option(
        None, "--model", help="Model the timings are of: a preset (--from csv; or "
        "--hf-config, or a config.json in the folder; --from vllm-log: or the config.json "
        "of the model folder the log names) or a Hugging Face id (--from aiconfigurator, "
        "e.g. meta-llama/Meta-Llama-3.1-8B, Qwen/Qwen3-30B-A3B)."),
    hf_config: Path | None = typer.Option(None, "--hf-config", help="--from csv, vllm-log: "
                                          "local config.json (instead of --model)."),
    dtype: DtypeName = typer.Option(DtypeName.bfloat16, "--dtype", help="--from csv; --from "
                                    "vllm-log: the log's dtype where it states one."),
    device_name: str | None = typer.Option(None, "--device-name", help="--from csv: the "
                                           "device measured, e.g. 'NVIDIA H100 80GB HBM3' "
                                           "(--from vllm-log: optional)."),
    device_memory_gib: float | None = typer.Option(
        None, "--device-memory-gib", help="--from csv, vllm-log: its memory (sizes the "
        "simulated KV cache; without it, give sim run --kv-blocks)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree the timings were taken "
                           "at (per-shard weights and KV)."),
    framework_ms: float | None = typer.Option(
        None, "--framework-ms", help="Per-step framework time outside the kernels "
        "(scheduling, input preparation, sampling), ms. Default: 0 for --from csv; "
        "aiconfigurator: a documented 1 ms (docs/profile-format.md)."),
    step_overhead_ms: float | None = typer.Option(
        None, "--step-overhead-ms", hidden=True, help="Old name of --framework-ms."),
    system: str | None = typer.Option(None, "--system", help="--from aiconfigurator: the "
                                      "GPU system, e.g. h200_sxm, h100_sxm, b200_sxm."),
    backend: str = typer.Option("vllm", "--backend", help="--from aiconfigurator: vllm, "
                                "sglang or trtllm."),
    backend_version: str | None = typer.Option(
        None, "--backend-version", help="--from aiconfigurator: the engine version's data "
        "(default: the database's current one)."),
    ep: int = typer.Option(1, "--ep", help="--from aiconfigurator: expert-parallel degree "
                           "of a MoE model: 1 (experts sharded --tp ways), or --tp (vLLM "
                           "--enable-expert-parallel)."),
    quant: str | None = typer.Option(None, "--quant", help="--from aiconfigurator: GEMM "
                                     "quantization, e.g. fp8 (default: the model's own)."),
) -> None:
    """Build a component profile from timings measured elsewhere: a folder of per-component
    CSVs, NVIDIA AIConfigurator's kernel database (--from aiconfigurator), or the engine
    steps a vLLM server logged (--from vllm-log)."""
    from chunksim.cli.paths import check_out_file
    from chunksim.cli.say import say
    from chunksim.profiler.import_flow import import_profile

    if step_overhead_ms is not None:
        say("note: --step-overhead-ms is now --framework-ms")
        if framework_ms is not None:
            raise ValueError("give --framework-ms once (--step-overhead-ms is its old name)")
        framework_ms = step_overhead_ms
    import_profile(folder, out, source.value, model, hf_config, dtype.value, device_name,
                   device_memory_gib, tp, framework_ms, system, backend, backend_version, ep,
                   quant, [m.value for m in ModelName], check_out_file, typer.echo, say)


profile_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
"""`sim profile` (measure) with its subcommand `sim profile import`."""
profile_app.callback(invoke_without_command=True,
                     help=help_format.reflow(profile.__doc__))(profile)
lazy.register(profile_app, "import", profile_import)

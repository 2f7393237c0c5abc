"""`sim profile`: measure the forward-step latency table the simulator reads.

No torch import at module level: `sim` imports this module to register the command, and
`sim run` must start without loading torch.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from chunksim.cli import help_format, lazy


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
    from chunksim.cli.paths import check_out_file
    from chunksim.cli.say import say
    from chunksim.profiler.measure_flow import MeasureFlags, MeasureIO, measure

    flags = MeasureFlags(
        model=model, hf_config=hf_config, device=device.value, dtype=_value(dtype),
        threads=threads, grid=grid.value, chunk_lens=chunk_lens, decode_counts=decode_counts,
        kv_lens=kv_lens, prior_lens=prior_lens, warmup=warmup, repeats=repeats,
        point_budget_s=point_budget_s, out=out, passes=passes,
        repass_below_ms=repass_below_ms, warm_looks=warm_looks, resume=resume, seed=seed,
        quiet=quiet, kind=kind.value, tp=tp, ep=ep, link=_value(link), link_gbps=link_gbps,
        link_latency_us=link_latency_us, clock=clock, calibrate=calibrate,
        engine=engine.value, block_size=block_size)
    typed = [name for name in ctx.params
             if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"]
    measure(flags, typed, MeasureIO([m.value for m in ModelName], check_out_file,
                                    typer.echo, say, _interrupted))


def _value(choice: Enum | None) -> str | None:
    """A choice flag's string (None when not given)."""
    return None if choice is None else choice.value


def _interrupted(ckpt) -> None:
    """Ctrl-C: say what the checkpoint holds and how to continue."""
    from chunksim.cli.interrupts import command_as_typed, interrupted

    n = (max(len(ckpt.csv_path.read_text().splitlines()) - 1, 0)
         if ckpt.csv_path.is_file() else 0)
    if not ckpt.exists():
        interrupted("nothing was saved", command_as_typed())
    interrupted(f"{n} measured point(s) are saved in {ckpt.csv_path}",
                command_as_typed("--resume"))


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

"""CLI flags -> Workload, written once and shared by `sim run/compare/capacity/validate/sweep`.

A command either declares the flags itself, one line each with the `*Opt` aliases below,
and calls `WorkloadOptions.from_cli(locals())`, or decorates itself with
`@with_workload_options` and receives a ready `workload_opts: WorkloadOptions`.
`None` means "unset": each workload kind fills in its own default (documented in the help).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess
from chunksim.workloads.lengths import (
    Constant,
    LengthDist,
    LengthKind,
    LogNormal,
    Normal,
    Uniform,
    empirical_from_csv,
    empirical_pair_from_csv,
)
from chunksim.workloads.scenarios import (
    LONG_PROMPT_DEFAULT_RATE_PER_S,
    SHORT_CHAT_OUTPUT,
    SHORT_CHAT_PROMPT,
    LongPromptConfig,
    long_prompt,
)
from chunksim.workloads.spec import Workload
from chunksim.workloads.synthetic import CHAT_OUTPUT, CHAT_PROMPT, SyntheticConfig, generate
from chunksim.workloads.traces.config import TimeUnit, TraceFormat, TraceOptions

DEFAULT_RATE_PER_S = 4.0
"""Synthetic arrival rate when `--rate` is not given, requests/s."""


class WorkloadKind(str, Enum):
    """What `--workload` selects."""

    POISSON = "poisson"
    GAMMA = "gamma"
    FIXED_RATE = "fixed-rate"
    BURST = "burst"
    LONG_PROMPT = "long-prompt"
    SHARED_PREFIX = "shared-prefix"
    TRACE = "trace"


@dataclass(frozen=True)
class WorkloadOptions:
    """Every workload flag, as parsed; `build_workload` turns it into a Workload."""

    workload: WorkloadKind = WorkloadKind.POISSON
    """Arrival process / scenario / trace replay."""
    rate: float | None = None
    """Synthetic: arrival rate (req/s, default 4). Trace: rescale to this mean rate."""
    num_requests: int | None = None
    """Synthetic: exact count (default 200 unless --duration). Trace: keep at most this many."""
    duration_s: float | None = None
    """Synthetic: arrivals in [0, duration). Trace: window length in trace seconds."""
    burstiness: float | None = None
    """Gamma shape (vLLM's --burstiness): 1 = Poisson, < 1 burstier."""
    prompt_dist: LengthKind | None = None
    """Prompt length family (default lognormal)."""
    prompt_mean: float | None = None
    """Prompt mean tokens (constant: the value)."""
    prompt_std: float | None = None
    """Prompt std tokens (lognormal/normal)."""
    prompt_min: int | None = None
    """Prompt clamp low (uniform: low end)."""
    prompt_max: int | None = None
    """Prompt clamp high (uniform: high end)."""
    output_dist: LengthKind | None = None
    """Output length family (default lognormal)."""
    output_mean: float | None = None
    """Output mean tokens."""
    output_std: float | None = None
    """Output std tokens."""
    output_min: int | None = None
    """Output clamp low."""
    output_max: int | None = None
    """Output clamp high."""
    lengths_csv: Path | None = None
    """CSV of observed lengths for the `empirical` family."""
    prompt_column: str | None = None
    """Prompt length column (lengths CSV or generic trace)."""
    output_column: str | None = None
    """Output length column (lengths CSV or generic trace)."""
    seed: int = 0
    """Seed of every random draw."""
    long_prompt_tokens: int = 8192
    """long-prompt: the long request's prompt tokens."""
    long_output_tokens: int = 128
    """long-prompt: the long request's output tokens."""
    long_arrival_s: float = 10.0
    """long-prompt: when the long request arrives, s."""
    num_prefixes: int = 8
    """shared-prefix: number of distinct system prompts."""
    prefix_tokens: int = 1024
    """shared-prefix: tokens in each system prompt."""
    prefix_share: float = 1.0
    """shared-prefix: fraction of requests that start with a system prompt."""
    trace: Path | None = None
    """Trace file to replay (implies --workload trace)."""
    trace_format: TraceFormat = TraceFormat.AUTO
    """Trace file layout."""
    time_unit: TimeUnit | None = None
    """Generic trace: time column unit."""
    time_column: str | None = None
    """Generic trace: time column."""
    class_column: str | None = None
    """Generic trace: traffic class column."""
    priority_column: str | None = None
    """Generic trace: priority column."""
    trace_model: str | None = None
    """BurstGPT: keep one model's rows."""
    start_s: float = 0.0
    """Trace: seconds to skip before the window."""
    speedup: float | None = None
    """Trace: divide arrival times by this."""
    jitter_ticks: bool = False
    """Trace: jitter quantized timestamps inside their tick."""
    strict_order: bool = False
    """Trace: refuse unsorted timestamps instead of sorting."""

    @classmethod
    def from_cli(cls, values: dict[str, Any]) -> WorkloadOptions:
        """Pick this dataclass's fields out of a command's `locals()` (others ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def _length_dist(opts: WorkloadOptions, role: str, default: LengthDist) -> LengthDist:
    """The prompt or output distribution the flags describe, filling unset ones from
    `default` (a LogNormal) so `--prompt-mean 2000` alone keeps the default shape."""
    g = lambda k: getattr(opts, f"{role}_{k}")  # noqa: E731 - tiny local accessor
    kind = g("dist") or LengthKind.LOGNORMAL
    assert isinstance(default, LogNormal)
    lo = g("min") if g("min") is not None else default.min_tokens
    hi = g("max") if g("max") is not None else default.max_tokens
    mean = g("mean") if g("mean") is not None else default.mean_tokens
    match kind:
        case LengthKind.CONSTANT:
            return Constant(int(round(mean)))
        case LengthKind.UNIFORM:
            if g("min") is None or g("max") is None:
                raise ValueError(
                    f"--{role}-dist uniform needs --{role}-min and --{role}-max "
                    f"(got {g('min')} and {g('max')})"
                )
            return Uniform(lo, hi)
        case LengthKind.LOGNORMAL | LengthKind.NORMAL:
            # Scale the default std with the mean so the CV (the shape) stays the same.
            cv = default.std_tokens / default.mean_tokens
            std = g("std") if g("std") is not None else cv * mean
            cls = LogNormal if kind is LengthKind.LOGNORMAL else Normal
            return cls(mean, std, lo, hi)
        case LengthKind.EMPIRICAL:
            if opts.lengths_csv is None:
                raise ValueError(f"--{role}-dist empirical needs --lengths-csv PATH")
            hi = g("max") if g("max") is not None else 1 << 20
            lo = g("min") if g("min") is not None else 1
            return empirical_from_csv(
                opts.lengths_csv, g("column"), role=role, min_tokens=lo, max_tokens=hi
            )
    raise AssertionError(kind)  # unreachable


def _lengths(opts: WorkloadOptions, defaults: tuple[LengthDist, LengthDist]):
    both_empirical = opts.prompt_dist is LengthKind.EMPIRICAL and (
        opts.output_dist is LengthKind.EMPIRICAL
    )
    if both_empirical and opts.lengths_csv is not None:
        # Same rows for prompt and output keeps their correlation.
        return empirical_pair_from_csv(
            opts.lengths_csv,
            opts.prompt_column,
            opts.output_column,
            prompt_bounds=(opts.prompt_min or 1, opts.prompt_max or 1 << 20),
            output_bounds=(opts.output_min or 1, opts.output_max or 1 << 20),
        )
    return _length_dist(opts, "prompt", defaults[0]), _length_dist(opts, "output", defaults[1])


_ARRIVALS = {
    WorkloadKind.POISSON: ArrivalKind.POISSON,
    WorkloadKind.GAMMA: ArrivalKind.GAMMA,
    WorkloadKind.FIXED_RATE: ArrivalKind.FIXED_RATE,
    WorkloadKind.BURST: ArrivalKind.BURST,
    WorkloadKind.SHARED_PREFIX: ArrivalKind.POISSON,
}


def trace_options(opts: WorkloadOptions) -> TraceOptions:
    """The trace-replay part of the flags."""
    return TraceOptions(
        format=opts.trace_format,
        time_unit=opts.time_unit,
        time_column=opts.time_column,
        prompt_column=opts.prompt_column,
        output_column=opts.output_column,
        class_column=opts.class_column,
        priority_column=opts.priority_column,
        model=opts.trace_model,
        start_s=opts.start_s,
        duration_s=opts.duration_s,
        max_requests=opts.num_requests,
        speedup=opts.speedup,
        rate_per_s=opts.rate,
        jitter_ticks=opts.jitter_ticks,
        seed=opts.seed,
        strict_order=opts.strict_order,
    )


# Flags that only mean something for generated workloads, or only for trace replay; giving
# one to the other kind is refused rather than silently ignored.
_SYNTHETIC_ONLY = (
    "burstiness",
    "prompt_dist",
    "prompt_mean",
    "prompt_std",
    "prompt_min",
    "prompt_max",
    "output_dist",
    "output_mean",
    "output_std",
    "output_min",
    "output_max",
    "lengths_csv",
)
_TRACE_ONLY = (
    "time_unit",
    "time_column",
    "class_column",
    "priority_column",
    "trace_model",
    "speedup",
)


def _refuse_unused(opts: WorkloadOptions, names: tuple[str, ...], where: str) -> None:
    given = [n for n in names if getattr(opts, n) is not None]
    if opts.start_s and names is _TRACE_ONLY:
        given.append("start_s")
    if opts.jitter_ticks and names is _TRACE_ONLY:
        given.append("jitter_ticks")
    if opts.trace_format is not TraceFormat.AUTO and names is _TRACE_ONLY:
        given.append("trace_format")
    if given:
        flags = ", ".join("--" + n.removesuffix("_s").replace("_", "-") for n in given)
        raise ValueError(f"{flags} do(es) not apply to {where}; drop them")


def build_workload(opts: WorkloadOptions) -> Workload:
    """The workload the flags describe (ValueError with the fix on a bad combination)."""
    kind = WorkloadKind.TRACE if opts.trace is not None else opts.workload
    if kind is WorkloadKind.TRACE:
        _refuse_unused(opts, _SYNTHETIC_ONLY, "trace replay (the trace has its own lengths)")
        if opts.trace is None:
            raise ValueError("--workload trace needs --trace PATH")
        from chunksim.workloads.traces.load import load_trace

        return load_trace(opts.trace, trace_options(opts))
    _refuse_unused(opts, _TRACE_ONLY, f"--workload {kind.value} (only to --trace)")
    if opts.burstiness is not None and kind is not WorkloadKind.GAMMA and opts.burstiness != 1:
        raise ValueError(
            f"--burstiness {opts.burstiness} only applies to --workload gamma (got {kind.value})"
        )
    if kind is WorkloadKind.LONG_PROMPT:
        prompt, output = _lengths(opts, (SHORT_CHAT_PROMPT, SHORT_CHAT_OUTPUT))
        if opts.num_requests is not None:
            raise ValueError("--workload long-prompt is sized by --duration, not --num-requests")
        return long_prompt(
            LongPromptConfig(
                rate_per_s=opts.rate if opts.rate is not None else LONG_PROMPT_DEFAULT_RATE_PER_S,
                duration_s=opts.duration_s if opts.duration_s is not None else 30.0,
                long_prompt_tokens=opts.long_prompt_tokens,
                long_output_tokens=opts.long_output_tokens,
                long_arrival_s=opts.long_arrival_s,
                prompt=prompt,
                output=output,
                seed=opts.seed,
            )
        )
    prompt, output = _lengths(opts, (CHAT_PROMPT, CHAT_OUTPUT))
    config = SyntheticConfig(
        arrivals=ArrivalProcess(
            kind=_ARRIVALS[kind],
            rate_per_s=opts.rate if opts.rate is not None else DEFAULT_RATE_PER_S,
            burstiness=opts.burstiness if opts.burstiness is not None else 1.0,
        ),
        prompt=prompt,
        output=output,
        num_requests=opts.num_requests,
        duration_s=opts.duration_s,
        seed=opts.seed,
    )
    if kind is WorkloadKind.SHARED_PREFIX:
        from chunksim.workloads.shared_prefix import SharedPrefixConfig, shared_prefix

        return shared_prefix(
            SharedPrefixConfig(
                base=config,
                num_prefixes=opts.num_prefixes,
                prefix_tokens=opts.prefix_tokens,
                share_fraction=opts.prefix_share,
            )
        )
    return generate(config)


# ---- Typer option aliases: help text written once, one line per command parameter ----
_P = "Workload"  # rich help panel grouping these flags in --help
_T = "Trace replay"

WorkloadOpt = Annotated[
    WorkloadKind,
    typer.Option(
        "--workload",
        "-w",
        rich_help_panel=_P,
        help="Arrivals: poisson, gamma (see --burstiness), fixed-rate, burst (all at t=0); "
        "long-prompt (one 8192-token prompt at 10 s into a 4 req/s short-chat stream, 30 s); "
        "shared-prefix (system prompts with prefix hashes); trace (replay --trace).",
    ),
]
RateOpt = Annotated[
    float | None,
    typer.Option(
        "--rate",
        "--trace-rate",
        rich_help_panel=_P,
        min=0.0,
        help="Mean arrival rate, req/s (synthetic default 4). With --trace: rescale all gaps by "
        "one factor to reach this rate (keeps burstiness).",
    ),
]
NumRequestsOpt = Annotated[
    int | None,
    typer.Option(
        "--num-requests",
        "--max-requests",
        "-n",
        rich_help_panel=_P,
        min=1,
        help="Synthetic: exactly this many requests (default 200 unless --duration). "
        "Trace: keep at most this many after the window.",
    ),
]
DurationOpt = Annotated[
    float | None,
    typer.Option(
        "--duration",
        "--window",
        "--trace-duration",
        rich_help_panel=_P,
        min=0.0,
        help="Seconds. Synthetic: generate arrivals in [0, duration) instead of a count "
        "(long-prompt default 30). Trace: window length after --start, in trace time.",
    ),
]
BurstinessOpt = Annotated[
    float | None,
    typer.Option(
        "--burstiness",
        rich_help_panel=_P,
        min=0.0,
        help="Gamma shape as in `vllm bench serve`: gap CV = 1/sqrt(b); 1 = Poisson, "
        "<1 burstier (default 1; gamma only).",
    ),
]
PromptDistOpt = Annotated[
    LengthKind | None,
    typer.Option(
        "--prompt-dist",
        rich_help_panel=_P,
        help="Prompt length family (default lognormal). constant uses --prompt-mean; uniform "
        "--prompt-min..--prompt-max; empirical samples --lengths-csv.",
    ),
]
PromptMeanOpt = Annotated[
    float | None,
    typer.Option(
        "--prompt-mean",
        rich_help_panel=_P,
        min=0.0,
        help="Prompt mean, tokens (default 1155, Azure 2023 conv; long-prompt chat: 256).",
    ),
]
PromptStdOpt = Annotated[
    float | None,
    typer.Option(
        "--prompt-std",
        rich_help_panel=_P,
        min=0.0,
        help="Prompt std, tokens (default: scaled with the mean, CV 0.96, i.e. 1109 at mean 1155; "
        "long-prompt chat: 192).",
    ),
]
PromptMinOpt = Annotated[
    int | None,
    typer.Option(
        "--prompt-min",
        rich_help_panel=_P,
        min=1,
        help="Prompt clamp low / uniform low, tokens (default 1; long-prompt chat: 32).",
    ),
]
PromptMaxOpt = Annotated[
    int | None,
    typer.Option(
        "--prompt-max",
        rich_help_panel=_P,
        min=1,
        help="Prompt clamp high / uniform high, tokens (default 16384; long-prompt chat: 1024).",
    ),
]
OutputDistOpt = Annotated[
    LengthKind | None,
    typer.Option(
        "--output-dist", rich_help_panel=_P, help="Output length family (default lognormal)."
    ),
]
OutputMeanOpt = Annotated[
    float | None,
    typer.Option(
        "--output-mean",
        rich_help_panel=_P,
        min=0.0,
        help="Output mean, tokens (default 211, Azure 2023 conv; long-prompt chat: 128).",
    ),
]
OutputStdOpt = Annotated[
    float | None,
    typer.Option(
        "--output-std",
        rich_help_panel=_P,
        min=0.0,
        help="Output std, tokens (default: scaled with the mean, CV 0.77, i.e. 163 at 211; "
        "long-prompt chat: 96).",
    ),
]
OutputMinOpt = Annotated[
    int | None,
    typer.Option(
        "--output-min",
        rich_help_panel=_P,
        min=1,
        help="Output clamp low, tokens (default 1; long-prompt chat: 16).",
    ),
]
OutputMaxOpt = Annotated[
    int | None,
    typer.Option(
        "--output-max",
        rich_help_panel=_P,
        min=1,
        help="Output clamp high, tokens (default 1024; long-prompt chat: 512).",
    ),
]
LengthsCsvOpt = Annotated[
    Path | None,
    typer.Option(
        "--lengths-csv",
        rich_help_panel=_P,
        help="CSV of observed lengths for --*-dist empirical (sampled with replacement; "
        "both empirical = sampled as pairs from the same rows).",
    ),
]
PromptColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt-column",
        rich_help_panel=_P,
        help="Prompt length column of --lengths-csv or a generic trace (guessed: "
        "ContextTokens, num_prefill_tokens, input_length, Request tokens, prompt_tokens).",
    ),
]
OutputColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--output-column",
        rich_help_panel=_P,
        help="Output length column (guessed like --prompt-column).",
    ),
]
SeedOpt = Annotated[
    int, typer.Option("--seed", rich_help_panel=_P, min=0, help="Seed of every random draw.")
]
LongPromptTokensOpt = Annotated[
    int,
    typer.Option(
        "--long-prompt-tokens",
        rich_help_panel=_P,
        min=1,
        help="long-prompt: the long request's prompt tokens.",
    ),
]
LongOutputTokensOpt = Annotated[
    int,
    typer.Option(
        "--long-output-tokens",
        rich_help_panel=_P,
        min=1,
        help="long-prompt: the long request's output tokens.",
    ),
]
LongArrivalOpt = Annotated[
    float,
    typer.Option(
        "--long-arrival",
        rich_help_panel=_P,
        min=0.0,
        help="long-prompt: arrival time of the long request, s.",
    ),
]
NumPrefixesOpt = Annotated[
    int,
    typer.Option(
        "--num-prefixes",
        rich_help_panel=_P,
        min=1,
        help="shared-prefix: distinct system prompts.",
    ),
]
PrefixTokensOpt = Annotated[
    int,
    typer.Option(
        "--prefix-tokens",
        rich_help_panel=_P,
        min=1,
        help="shared-prefix: tokens per system prompt, added to the sampled prompt.",
    ),
]
PrefixShareOpt = Annotated[
    float,
    typer.Option(
        "--prefix-share",
        rich_help_panel=_P,
        min=0.0,
        max=1.0,
        help="shared-prefix: fraction of requests that start with a system prompt.",
    ),
]
TraceOpt = Annotated[
    Path | None,
    typer.Option(
        "--trace", rich_help_panel=_T, help="Replay this trace file (implies --workload trace)."
    ),
]
TraceFormatOpt = Annotated[
    TraceFormat,
    typer.Option(
        "--trace-format",
        rich_help_panel=_T,
        help="azure (TIMESTAMP,ContextTokens,GeneratedTokens), mooncake (JSONL, ms, hash_ids), "
        "burstgpt (CSV), generic (name the columns + --time-unit); auto detects from header.",
    ),
]
TimeUnitOpt = Annotated[
    TimeUnit | None,
    typer.Option(
        "--time-unit",
        rich_help_panel=_T,
        help="Generic trace: unit of the time column (s, ms, us, ns, datetime).",
    ),
]
TimeColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--time-column", rich_help_panel=_T, help="Generic trace: time column (default timestamp)."
    ),
]
ClassColumnOpt = Annotated[
    str | None,
    typer.Option("--class-column", rich_help_panel=_T, help="Generic trace: traffic class column."),
]
PriorityColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--priority-column",
        rich_help_panel=_T,
        help="Generic trace: integer priority column (lower runs first).",
    ),
]
TraceModelOpt = Annotated[
    str | None,
    typer.Option(
        "--trace-model",
        rich_help_panel=_T,
        help="BurstGPT: keep only this Model's rows (e.g. ChatGPT, GPT-4).",
    ),
]
StartOpt = Annotated[
    float,
    typer.Option(
        "--start",
        rich_help_panel=_T,
        min=0.0,
        help="Trace: skip this many seconds after the first request.",
    ),
]
SpeedupOpt = Annotated[
    float | None,
    typer.Option(
        "--speedup",
        rich_help_panel=_T,
        min=0.0,
        help="Trace: compress time by this factor (2 = twice the rate).",
    ),
]
JitterTicksOpt = Annotated[
    bool,
    typer.Option(
        "--jitter-ticks/--no-jitter-ticks",
        rich_help_panel=_T,
        help="Trace: spread requests uniformly inside each quantized timestamp tick "
        "(Mooncake conversation: ~3 s), keeping order; seeded.",
    ),
]
StrictOrderOpt = Annotated[
    bool,
    typer.Option(
        "--strict-order/--sort-order",
        rich_help_panel=_T,
        help="Trace: refuse out-of-order timestamps instead of sorting them (noted).",
    ),
]

# (name, alias, default) for every flag, in --help order; defaults mirror WorkloadOptions.
CLI_PARAMS: tuple[tuple[str, Any, Any], ...] = (
    ("workload", WorkloadOpt, WorkloadKind.POISSON),
    ("rate", RateOpt, None),
    ("num_requests", NumRequestsOpt, None),
    ("duration_s", DurationOpt, None),
    ("burstiness", BurstinessOpt, None),
    ("prompt_dist", PromptDistOpt, None),
    ("prompt_mean", PromptMeanOpt, None),
    ("prompt_std", PromptStdOpt, None),
    ("prompt_min", PromptMinOpt, None),
    ("prompt_max", PromptMaxOpt, None),
    ("output_dist", OutputDistOpt, None),
    ("output_mean", OutputMeanOpt, None),
    ("output_std", OutputStdOpt, None),
    ("output_min", OutputMinOpt, None),
    ("output_max", OutputMaxOpt, None),
    ("lengths_csv", LengthsCsvOpt, None),
    ("prompt_column", PromptColumnOpt, None),
    ("output_column", OutputColumnOpt, None),
    ("seed", SeedOpt, 0),
    ("long_prompt_tokens", LongPromptTokensOpt, 8192),
    ("long_output_tokens", LongOutputTokensOpt, 128),
    ("long_arrival_s", LongArrivalOpt, 10.0),
    ("num_prefixes", NumPrefixesOpt, 8),
    ("prefix_tokens", PrefixTokensOpt, 1024),
    ("prefix_share", PrefixShareOpt, 1.0),
    ("trace", TraceOpt, None),
    ("trace_format", TraceFormatOpt, TraceFormat.AUTO),
    ("time_unit", TimeUnitOpt, None),
    ("time_column", TimeColumnOpt, None),
    ("class_column", ClassColumnOpt, None),
    ("priority_column", PriorityColumnOpt, None),
    ("trace_model", TraceModelOpt, None),
    ("start_s", StartOpt, 0.0),
    ("speedup", SpeedupOpt, None),
    ("jitter_ticks", JitterTicksOpt, False),
    ("strict_order", StrictOrderOpt, False),
)


def with_workload_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a Typer command: adds every workload flag to its signature and calls
    it with `workload_opts=WorkloadOptions(...)` (the command declares that parameter).

        @app.command()
        @with_workload_options
        def run(policy: str, workload_opts: WorkloadOptions) -> None:
            workload = build_workload(workload_opts)
    """
    from chunksim.cli_bundle import bundle

    return bundle(CLI_PARAMS, WorkloadOptions, "workload_opts")(fn)

"""Workload settings -> Workload, shared by `sim run/compare/capacity/validate/sweep`.

`WorkloadOptions` declares each setting once, as a field whose docstring is its `--help`
text (the CLI derives the flags from it; see `chunksim.core.knobs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from chunksim.core.errors import InputError
from chunksim.core.knobs import flag_name, knob
from chunksim.core.spec import Workload
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
from chunksim.workloads.synthetic import CHAT_OUTPUT, CHAT_PROMPT, SyntheticConfig, generate
from chunksim.workloads.traces.config import TimeUnit, TraceFormat, TraceOptions

DEFAULT_RATE_PER_S = 4.0
"""Synthetic arrival rate when `--rate` is not given, requests/s."""
MAX_REQUESTS = 10_000_000
"""Most requests one run generates: each costs memory (about 1 kB through a run), so a
larger count is refused before anything is allocated."""


class WorkloadKind(str, Enum):
    """What `--workload` selects."""

    POISSON = "poisson"
    GAMMA = "gamma"
    FIXED_RATE = "fixed-rate"
    BURST = "burst"
    LONG_PROMPT = "long-prompt"
    SHARED_PREFIX = "shared-prefix"
    TRACE = "trace"


_T = "Trace replay"


@dataclass(frozen=True)
class WorkloadOptions:
    """Every workload setting (each one a `sim` flag); `build_workload` turns it into a
    Workload. None means "unset": each workload kind fills in its own default."""

    workload: WorkloadKind = knob(WorkloadKind.POISSON, "--workload", "-w")
    """Arrivals: poisson, gamma (see --burstiness), fixed-rate, burst (all at t=0); long-prompt
    (one 8192-token prompt at 10 s into an 8 req/s short-chat stream, 30 s); shared-prefix
    (system prompts with prefix hashes); trace (replay --trace)."""
    rate: float | None = knob(None, "--rate", "--trace-rate", min=0.0, min_open=True)
    """Mean arrival rate, req/s (synthetic default 4). With --trace: rescale all gaps by one
    factor to reach this rate (keeps burstiness)."""
    num_requests: int | None = knob(None, "--num-requests", "--max-requests", "-n", min=1)
    """Synthetic: exactly this many requests (default 200 unless --duration). Trace: keep at
    most this many after the window."""
    duration_s: float | None = knob(None, "--duration", "--window", "--trace-duration", min=0.0,
                                    min_open=True)
    """Seconds. Synthetic: generate arrivals in [0, duration) instead of a count (long-prompt
    default 30). Trace: window length after --start, in trace time."""
    burstiness: float | None = knob(None, "--burstiness", min=0.0, min_open=True)
    """Gamma shape as in `vllm bench serve`: gap CV = 1/sqrt(b); 1 = Poisson, <1 burstier
    (default 1; gamma only)."""
    prompt_dist: LengthKind | None = knob(None, "--prompt-dist")
    """Prompt length family (default lognormal). constant uses --prompt-mean; uniform
    --prompt-min..--prompt-max; empirical samples --lengths-csv."""
    prompt_mean: float | None = knob(None, "--prompt-mean", min=0.0)
    """Prompt mean, tokens (default 1155, Azure 2023 conv; long-prompt chat: 256)."""
    prompt_std: float | None = knob(None, "--prompt-std", min=0.0)
    """Prompt std, tokens (default: scaled with the mean, CV 0.96, i.e. 1109 at mean 1155;
    long-prompt chat: 192)."""
    prompt_min: int | None = knob(None, "--prompt-min", min=1)
    """Prompt clamp low / uniform low, tokens (default 1; long-prompt chat: 32)."""
    prompt_max: int | None = knob(None, "--prompt-max", min=1)
    """Prompt clamp high / uniform high, tokens (default 16384; long-prompt chat: 1024)."""
    output_dist: LengthKind | None = knob(None, "--output-dist")
    """Output length family (default lognormal)."""
    output_mean: float | None = knob(None, "--output-mean", min=0.0)
    """Output mean, tokens (default 211, Azure 2023 conv; long-prompt chat: 128)."""
    output_std: float | None = knob(None, "--output-std", min=0.0)
    """Output std, tokens (default: scaled with the mean, CV 0.77, i.e. 163 at 211; long-prompt
    chat: 96)."""
    output_min: int | None = knob(None, "--output-min", min=1)
    """Output clamp low, tokens (default 1; long-prompt chat: 16)."""
    output_max: int | None = knob(None, "--output-max", min=1)
    """Output clamp high, tokens (default 1024; long-prompt chat: 512)."""
    lengths_csv: Path | None = knob(None, "--lengths-csv")
    """CSV of observed lengths for --*-dist empirical (sampled with replacement; both empirical
    = sampled as pairs from the same rows)."""
    prompt_column: str | None = knob(None, "--prompt-column")
    """Prompt length column of --lengths-csv or a generic trace (guessed: ContextTokens,
    num_prefill_tokens, input_length, Request tokens, prompt_tokens)."""
    output_column: str | None = knob(None, "--output-column")
    """Output length column (guessed like --prompt-column)."""
    seed: int = knob(0, "--seed", min=0)
    """Seed of every random draw."""
    long_prompt_tokens: int = knob(8192, "--long-prompt-tokens", min=1)
    """long-prompt: the long request's prompt tokens."""
    long_output_tokens: int = knob(128, "--long-output-tokens", min=1)
    """long-prompt: the long request's output tokens."""
    long_arrival_s: float = knob(10.0, "--long-arrival", min=0.0)
    """long-prompt: arrival time of the long request, s."""
    num_prefixes: int = knob(8, "--num-prefixes", min=1)
    """shared-prefix: distinct system prompts."""
    prefix_tokens: int = knob(1024, "--prefix-tokens", min=1)
    """shared-prefix: tokens per system prompt, added to the sampled prompt."""
    prefix_share: float = knob(1.0, "--prefix-share", min=0.0, max=1.0)
    """shared-prefix: fraction of requests that start with a system prompt."""
    prefix_match_min: int | None = knob(None, "--prefix-match-min", min=0)
    """shared-prefix: each request matches its system prompt for a uniformly drawn number
    of tokens between this and --prefix-tokens, then diverges (anywhere: the cache reuses
    only the whole blocks before that point). Default: every request matches it whole."""
    hash_block_tokens: int | None = knob(None, "--hash-block-tokens", min=1)
    """Tokens each prefix hash covers: of a generic trace's --hash-column (required with
    it), or of shared-prefix's generated hashes (default 16, vLLM's block). Mooncake's
    hash_ids are 512 tokens each."""
    trace: Path | None = knob(None, "--trace", panel=_T)
    """Replay this trace file (implies --workload trace)."""
    trace_format: TraceFormat = knob(TraceFormat.AUTO, "--trace-format", panel=_T)
    """azure (TIMESTAMP,ContextTokens,GeneratedTokens), mooncake (JSONL, ms, hash_ids), burstgpt
    (CSV), generic (name the columns + --time-unit); auto detects from header."""
    time_unit: TimeUnit | None = knob(None, "--time-unit", panel=_T)
    """Generic trace: unit of the time column (s, ms, us, ns, datetime)."""
    time_column: str | None = knob(None, "--time-column", panel=_T)
    """Generic trace: time column (default timestamp)."""
    class_column: str | None = knob(None, "--class-column", panel=_T)
    """Generic trace: traffic class column."""
    priority_column: str | None = knob(None, "--priority-column", panel=_T)
    """Generic trace: integer priority column (lower runs first)."""
    hash_column: str | None = knob(None, "--hash-column", panel=_T)
    """Generic trace: column of each prompt's block hashes (a JSON list, or integers
    separated by spaces), each covering --hash-block-tokens tokens; enables prefix-cache
    hits between requests."""
    conversation_column: str | None = knob(None, "--conversation-column", panel=_T)
    """Generic trace: conversation (session) id column, for `--router conversation`
    (BurstGPT's Session ID is read as one)."""
    trace_model: str | None = knob(None, "--trace-model", panel=_T)
    """BurstGPT: keep only this Model's rows (e.g. ChatGPT, GPT-4)."""
    start_s: float = knob(0.0, "--start", panel=_T, min=0.0)
    """Trace: skip this many seconds after the first request."""
    speedup: float | None = knob(None, "--speedup", panel=_T, min=0.0, min_open=True)
    """Trace: compress time by this factor (2 = twice the rate)."""
    jitter_ticks: bool = knob(False, "--jitter-ticks/--no-jitter-ticks", panel=_T)
    """Trace: spread requests uniformly inside each quantized timestamp tick (Mooncake
    conversation: ~3 s), keeping order; seeded."""
    strict_order: bool = knob(False, "--strict-order/--sort-order", panel=_T)
    """Trace: refuse out-of-order timestamps instead of sorting them (noted)."""


def _length_dist(opts: WorkloadOptions, role: str, default: LengthDist) -> LengthDist:
    """The prompt or output distribution the flags describe, filling unset ones from
    `default` (a LogNormal) so `--prompt-mean 2000` alone keeps the default shape.
    Errors name the role's flags (--prompt-min, not min_tokens)."""
    try:
        return _length_dist_of(opts, role, default)
    except InputError:
        raise
    except ValueError as exc:
        fields = {f"{k}_tokens": f"--{role}-{k}" for k in ("min", "max", "mean", "std")}
        raise type(exc)(_in_flags(str(exc), fields)) from None


def _length_dist_of(opts: WorkloadOptions, role: str, default: LengthDist) -> LengthDist:
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
        hash_column=opts.hash_column,
        hash_block_tokens=opts.hash_block_tokens,
        conversation_column=opts.conversation_column,
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
    "prefix_match_min",
)
_TRACE_ONLY = (
    "time_unit",
    "time_column",
    "class_column",
    "priority_column",
    "hash_column",
    "conversation_column",
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
        flags = ", ".join(flag_name(WorkloadOptions, n) for n in given)
        verb = "does" if len(given) == 1 else "do"
        raise ValueError(f"{flags} {verb} not apply to {where}; drop "
                         f"{'it' if len(given) == 1 else 'them'}")


_FIELD_OF = {"rate_per_s": "rate", "duration_s": "duration_s", "num_requests": "num_requests",
             "max_requests": "num_requests", "long_arrival_s": "long_arrival_s",
             "long_prompt_tokens": "long_prompt_tokens",
             "long_output_tokens": "long_output_tokens", "burstiness": "burstiness",
             "start_s": "start_s", "speedup": "speedup", "num_prefixes": "num_prefixes",
             "prefix_tokens": "prefix_tokens", "share_fraction": "prefix_share"}
"""Library field names in error messages -> the WorkloadOptions field (and so the flag)."""


def _in_flags(msg: str, flags: dict[str, str]) -> str:
    """`msg` with each `field=value` written `--flag value` and each bare field as its
    flag: errors speak in what the user typed."""
    for name, flag in flags.items():
        # a name already written as a flag (`--speedup`) stays as it is
        msg = re.sub(rf"(?<![-\w]){name}=", f"{flag} ", msg)
        msg = re.sub(rf"(?<![-\w]){name}\b", flag, msg)
    return msg.replace("kind 'burst'", "--workload burst")


def _workload_flags() -> dict[str, str]:
    return {name: flag_name(WorkloadOptions, f) for name, f in _FIELD_OF.items()}


MAX_CLOCK_S = 2.0 ** 33
"""Longest span of arrivals a run accepts, s (~272 years): past it the simulator's
64-bit float clock resolves less than a microsecond (its spacing there is 2e-6 s), so
millisecond latencies round away (`--rate 1e-300` would print 0.00 ms medians). Not the
trace reader's 30-day plausibility rule: a slow synthetic rate is a choice, not a data
error, and a capacity search probes rates down to 1e-3 req/s."""


def _span_error(what: str, span: float, fix: str) -> InputError:
    return InputError(
        f"{what}: the requests would arrive over {span:.3g} s ({span / 86400 / 365:.3g} "
        f"years), past {MAX_CLOCK_S:.3g} s, where the simulator's clock (a 64-bit float) "
        f"resolves less than a microsecond and latencies round away; {fix}")


def _check_span(opts: WorkloadOptions, kind: WorkloadKind) -> None:
    """Refuse, before generating it, a synthetic workload whose arrivals would span more
    than MAX_CLOCK_S."""
    if opts.duration_s is not None and opts.duration_s > MAX_CLOCK_S:
        raise _span_error(f"--duration {opts.duration_s:g}", opts.duration_s,
                          "simulate a shorter window")
    n = opts.num_requests
    if n is None or n < 2 or opts.rate is None or kind is WorkloadKind.BURST:
        return
    if n / opts.rate > MAX_CLOCK_S:
        raise _span_error(f"--rate {opts.rate:g} req/s with {n:,} requests", n / opts.rate,
                          f"give --rate at least {n / MAX_CLOCK_S:.2g} req/s")


def _check_size(opts: WorkloadOptions, kind: WorkloadKind) -> None:
    """Refuse a synthetic workload too large to hold, or too long to time, before
    generating any of it."""
    n = opts.num_requests
    if n is not None and n > MAX_REQUESTS:
        raise InputError(f"--num-requests {n}: one run holds at most {MAX_REQUESTS:,} "
                         "requests; split it into several runs (other --seed values)")
    if n is None and opts.duration_s is not None and kind is not WorkloadKind.BURST:
        default = (LONG_PROMPT_DEFAULT_RATE_PER_S if kind is WorkloadKind.LONG_PROMPT
                   else DEFAULT_RATE_PER_S)
        rate = opts.rate if opts.rate is not None else default
        expected = rate * opts.duration_s
        if expected > MAX_REQUESTS:
            raise InputError(
                f"--duration {opts.duration_s:g} s at --rate {rate:g} req/s means about "
                f"{expected:.3g} requests; one run holds at most {MAX_REQUESTS:,}: shorten "
                "--duration or lower --rate")
    _check_span(opts, kind)


def build_workload(opts: WorkloadOptions) -> Workload:
    """The workload the flags describe (ValueError with the fix, in flags, on a bad
    combination)."""
    try:
        workload = _build(opts)
    except ValueError as exc:
        raise type(exc)(_in_flags(str(exc), _workload_flags())) from None
    _check_built_span(opts, workload)
    return workload


def _check_built_span(opts: WorkloadOptions, workload: Workload) -> None:
    """The span rule (`_check_span`) on what was built: a default request count, or a
    trace rescaled by --rate / --speedup, can reach it too."""
    span = workload.duration_s if len(workload) else 0.0
    if span <= MAX_CLOCK_S:
        return
    given = [(f, v) for f, v in (("--rate", opts.rate), ("--speedup", opts.speedup))
             if v is not None]
    what = " ".join(f"{f} {v:g}" for f, v in given) or f"{len(workload):,} requests"
    raise _span_error(what, span, f"raise {' or '.join(f for f, _ in given)}" if given
                      else "simulate a shorter window")


def _build(opts: WorkloadOptions) -> Workload:
    kind = WorkloadKind.TRACE if opts.trace is not None else opts.workload
    if opts.trace is not None and opts.workload not in (WorkloadKind.POISSON,
                                                        WorkloadKind.TRACE):
        raise ValueError(f"--workload {opts.workload.value} generates its own requests and "
                         f"--trace {opts.trace} replays a file's: give one (--trace alone "
                         "replays the trace)")
    if kind is WorkloadKind.TRACE:
        _refuse_unused(opts, _SYNTHETIC_ONLY, "trace replay (the trace has its own lengths)")
        if opts.trace is None:
            raise ValueError("--workload trace needs --trace PATH")
        from chunksim.workloads.traces.load import load_trace

        return load_trace(opts.trace, trace_options(opts))
    _refuse_unused(opts, _TRACE_ONLY, f"--workload {kind.value} (only to --trace)")
    if kind is not WorkloadKind.SHARED_PREFIX:
        _refuse_unused(opts, ("prefix_match_min", "hash_block_tokens"),
                       f"--workload {kind.value} (only to shared-prefix or a generic trace)")
    _check_size(opts, kind)
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
                match_min_tokens=opts.prefix_match_min,
                **({"block_tokens": opts.hash_block_tokens}
                   if opts.hash_block_tokens is not None else {}),
            )
        )
    return generate(config)

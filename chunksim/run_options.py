"""Policy, engine and profile flags, declared once for `sim run/compare/capacity/validate`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from chunksim.policies import PolicyKnobs, PolicyName
from chunksim.sim.engine import EngineConfig
from chunksim.sim.metrics import parse_class_slos, parse_slos
from chunksim.sim.run import RunConfig

_P = "Policy"
_E = "Engine and KV cache"


@dataclass(frozen=True)
class RunOptions:
    """The flags as parsed; `to_config` builds the library's RunConfig."""

    profile: str | None = None
    policy: PolicyName = PolicyName.budget
    variant: str | None = None
    chunk: int | None = None
    budget: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    prefill_budget: int | None = None
    long_prefill_threshold: int | None = None
    max_partial_prefills: int | None = None
    reserve_full_prompt: bool = True
    kv_blocks: int | None = None
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    jitter: bool = False
    wake_up: bool = True
    step_overhead_ms: float | None = None
    goodput: list[str] | None = None
    class_slo: list[str] | None = None
    prefix_caching: bool = True
    priority: bool = False
    class_chunk: list[str] | None = None
    fast_forward: bool = True

    def knobs(self, chunk: int | None = None) -> PolicyKnobs:
        if self.chunk is not None and self.budget is not None and self.chunk != self.budget:
            raise ValueError(
                f"--chunk {self.chunk} and --budget {self.budget} disagree; --budget is an "
                "alias of --chunk for the budget policy, give one")
        return PolicyKnobs(
            chunk=chunk if chunk is not None else (self.chunk or self.budget),
            variant=self.variant, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            prefill_budget=self.prefill_budget,
            long_prefill_token_threshold=self.long_prefill_threshold,
            max_num_partial_prefills=self.max_partial_prefills,
            reserve_full_prompt=self.reserve_full_prompt,
            priority_scheduling=self.priority,
            class_chunk_caps=_class_caps(self.class_chunk))

    def to_config(self, seed: int, policy: str | None = None,
                  chunk: int | None = None) -> RunConfig:
        """RunConfig for this policy (or another one, for comparisons) and seed."""
        return RunConfig(
            policy=policy or PolicyName(self.policy).value,
            knobs=self.knobs(chunk),
            kv_blocks=self.kv_blocks, block_size=self.block_size,
            gpu_memory_utilization=self.gpu_memory_utilization,
            engine=EngineConfig(jitter=self.jitter, seed=seed, fast_forward=self.fast_forward,
                                max_model_len=self.max_model_len, wake_up=self.wake_up),
            step_overhead_s=None if self.step_overhead_ms is None
            else self.step_overhead_ms / 1000.0,
            slos_s=parse_slos(self.goodput),
            class_slos_s=parse_class_slos(self.class_slo),
            prefix_caching=self.prefix_caching)


def _class_caps(items: list[str] | None) -> tuple[tuple[str, int], ...]:
    caps = []
    for item in items or []:
        cls, sep, val = item.partition("=")
        try:
            cap = int(val)
        except ValueError:
            cap = 0
        if not sep or not cls or cap < 1:
            raise ValueError(
                f"--class-chunk {item!r}: use CLASS=TOKENS with TOKENS >= 1, e.g. "
                "--class-chunk interactive=256")
        caps.append((cls, cap))
    return tuple(sorted(caps))


def _opt(t, *names, panel=_P, **kw):
    return Annotated[t, typer.Option(*names, rich_help_panel=panel, **kw)]


RUN_PARAMS = [
    ("profile", _opt(str | None, "--profile", panel=_E, help=(
        "Latency profile: a bundled name (default tiny-cpu) or a CSV written by "
        "`sim profile`.")), None),
    ("policy", _opt(PolicyName, "--policy", help=(
        "whole = unchunked prefill (vLLM V0 / Orca); chunk = fixed per-request chunk "
        "(Sarathi 2023); budget = token budget with decodes first (vLLM V1 / "
        "Sarathi-Serve).")), PolicyName.budget),
    ("variant", _opt(str | None, "--variant", help=(
        "whole: prefill-first (default) | mixed. chunk: mixed (default) | two-pass | "
        "alternate. budget: v1.")), None),
    ("chunk", _opt(int | None, "--chunk", min=1, help=(
        "chunk: prefill tokens per request per step (default 1024); budget: tokens per step, "
        "decodes included (default 8192 on H100/H200 profiles, else 2048).")), None),
    ("budget", _opt(int | None, "--budget", min=1, help="Alias of --chunk for the budget "
                    "policy."), None),
    ("max_num_seqs", _opt(int | None, "--max-num-seqs", min=1, help=(
        "Seat cap: most requests running at once (default 1024 on H100/H200 profiles, "
        "else 256).")), None),
    ("max_num_batched_tokens", _opt(int | None, "--max-num-batched-tokens", min=1, help=(
        "whole: token cap per step (default 16384); longer prompts are rejected.")), None),
    ("prefill_budget", _opt(int | None, "--prefill-budget", min=1, help=(
        "chunk: prefill tokens per step over all chunks (default 8192).")), None),
    ("long_prefill_threshold", _opt(int | None, "--long-prefill-threshold", min=0, help=(
        "budget: cap on one request's tokens per step (default 0 = off).")), None),
    ("max_partial_prefills", _opt(int | None, "--max-partial-prefills", min=0, help=(
        "budget: most concurrent partial prefills (default 0 = unlimited).")), None),
    ("reserve_full_prompt", _opt(bool, "--reserve-full-prompt/--no-reserve-full-prompt",
                                 help="budget: admit only if KV for the whole prompt is "
                                 "free."), True),
    ("kv_blocks", _opt(int | None, "--kv-blocks", min=1, panel=_E, help=(
        "KV capacity in blocks (default: from the profile, device memory x utilization - "
        "weights).")), None),
    ("block_size", _opt(int, "--block-size", min=1, panel=_E, help="Tokens per KV block."),
     16),
    ("gpu_memory_utilization", _opt(float, "--gpu-memory-utilization", panel=_E, help=(
        "Memory fraction for weights + KV when deriving --kv-blocks.")), 0.9),
    ("max_model_len", _opt(int | None, "--max-model-len", min=2, panel=_E, help=(
        "Reject requests with prompt + output above this (default: no cap).")), None),
    ("jitter", _opt(bool, "--jitter/--no-jitter", panel=_E, help=(
        "Sample each step's time from the profile's measured spread (seeded by "
        "--seed).")), False),
    ("wake_up", _opt(bool, "--wake-up/--no-wake-up", panel=_E, help=(
        "Price the first steps after the engine idled by the profile's measured wake-up "
        "cost (cold cores and caches, lower GPU clocks; profiles made by sim profile "
        "since 2026-11-29).")), True),
    ("step_overhead_ms", _opt(float | None, "--step-overhead-ms", min=0.0, panel=_E, help=(
        "Flat per-step CPU overhead added to every step (default: the profile's fit, base "
        "+ per request in the step, measured on the live loop).")), None),
    ("goodput", _opt(list[str] | None, "--goodput", panel=_E, help=(
        "SLO for goodput, METRIC=MS with METRIC ttft, tpot, e2el or itl (repeat the "
        "flag).")), None),
    ("class_slo", _opt(list[str] | None, "--class-slo", panel=_E, help=(
        "Per request-class SLO, CLASS:METRIC=MS (overrides --goodput for that class; "
        "repeat the flag).")), None),
    ("prefix_caching", _opt(bool, "--prefix-caching/--no-prefix-caching", panel=_E, help=(
        "vLLM V1 automatic prefix caching: cached full blocks cost no budget, freed blocks "
        "stay cached (LRU) so preempted requests re-prefill cheaply.")), True),
    ("priority", _opt(bool, "--priority/--fcfs", help=(
        "budget: vLLM's priority scheduling (waiting heap on priority then arrival; the "
        "victim is the lowest priority, latest arrival).")), False),
    ("class_chunk", _opt(list[str] | None, "--class-chunk", help=(
        "budget: per-class cap on a request's tokens per step, CLASS=TOKENS (repeat).")),
     None),
    ("fast_forward", _opt(bool, "--fast-forward/--no-fast-forward", panel=_E, hidden=True,
                          help="Bulk-simulate steady decode stretches (same results)."), True),
]


def with_run_options(fn):
    """Decorator: add RUN_PARAMS to a command, which receives `run_opts: RunOptions`."""
    from chunksim.cli_bundle import bundle

    return bundle(RUN_PARAMS, RunOptions, "run_opts")(fn)

"""Scheduling policies: `whole`, `chunk`, `budget`, each a small frozen dataclass with a
pure `plan(state) -> Plan`. `make_policy` is the one factory (no registry)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from chunksim.policies.base import Plan, Policy, SchedulerState
from chunksim.policies.budget import TokenBudgetPolicy
from chunksim.policies.chunk import FixedChunkPolicy
from chunksim.policies.whole import WholePrefillPolicy

__all__ = ["Plan", "Policy", "SchedulerState", "PolicyName", "PolicyKnobs", "make_policy",
           "TokenBudgetPolicy", "FixedChunkPolicy", "WholePrefillPolicy", "VARIANTS"]


class PolicyName(str, Enum):
    """The policy families (also the CLI's --policy choices)."""

    whole = "whole"
    chunk = "chunk"
    budget = "budget"


VARIANTS = {
    "whole": ("prefill-first", "mixed"),
    "chunk": ("mixed", "two-pass", "alternate"),
    "budget": ("v1",),
}


@dataclass(frozen=True)
class PolicyKnobs:
    """Every policy knob the CLI exposes; None = the modelled system's default."""

    chunk: int | None = None
    """`chunk`: tokens per request per step; `budget`: tokens per step (decodes included)."""
    variant: str | None = None
    """See VARIANTS; None = the family's first (default) variant."""
    max_num_seqs: int | None = None
    """Seat cap (vLLM: 1024 on H100/H200-class GPUs, else 256)."""
    max_num_batched_tokens: int | None = None
    """`whole`: token cap per step (default max(max_model_len, 2048), here 16384)."""
    prefill_budget: int | None = None
    """`chunk`: prefill tokens per step over all chunks (default 8192)."""
    long_prefill_token_threshold: int | None = None
    """`budget`: cap on one request's tokens per step (0 = off)."""
    max_num_partial_prefills: int | None = None
    """`budget`: most concurrent partial prefills (0 = unlimited, V1)."""
    reserve_full_prompt: bool | None = None
    """`budget`: admit only when KV for the whole prompt is free (default on)."""
    priority_scheduling: bool = False
    """`budget`: vLLM's priority scheduling (heap on priority, arrival; priority victim)."""
    class_chunk_caps: tuple[tuple[str, int], ...] = ()
    """`budget`: per-class cap on a request's tokens per step."""


def _big_gpu(device_name: str | None) -> bool:
    name = (device_name or "").upper()
    return any(tag in name for tag in ("H100", "H200", "H20", "B200", "GB200", "MI300"))


def make_policy(name: str | PolicyName, knobs: PolicyKnobs | None = None,
                device_name: str | None = None) -> Policy:
    """Build a policy; defaults follow the modelled system and the profiled device."""
    knobs = knobs or PolicyKnobs()
    name = PolicyName(name).value if not isinstance(name, PolicyName) else name.value
    if name != "budget" and (knobs.priority_scheduling or knobs.class_chunk_caps):
        raise ValueError(
            f"--priority and --class-chunk apply to --policy budget only (got --policy {name})")
    variant = knobs.variant or VARIANTS[name][0]
    if variant not in VARIANTS[name]:
        raise ValueError(
            f"--variant {variant!r} does not apply to --policy {name}; choose one of "
            f"{', '.join(VARIANTS[name])}")
    big = _big_gpu(device_name)
    seats = knobs.max_num_seqs or (1024 if big else 256)
    if name == "whole":
        return WholePrefillPolicy(
            variant=variant, max_num_seqs=seats,
            max_num_batched_tokens=knobs.max_num_batched_tokens or 16384)
    if name == "chunk":
        return FixedChunkPolicy(
            chunk=knobs.chunk or 1024, variant=variant, max_num_seqs=seats,
            prefill_budget=knobs.prefill_budget or 8192)
    return TokenBudgetPolicy(
        max_num_batched_tokens=knobs.chunk or (8192 if big else 2048),
        max_num_seqs=seats,
        long_prefill_token_threshold=knobs.long_prefill_token_threshold or 0,
        max_num_partial_prefills=knobs.max_num_partial_prefills or 0,
        reserve_full_prompt=True if knobs.reserve_full_prompt is None
        else knobs.reserve_full_prompt,
        priority_scheduling=knobs.priority_scheduling,
        class_chunk_caps=knobs.class_chunk_caps)

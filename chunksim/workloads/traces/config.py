"""What a trace replay is asked to do: the format, its columns, and the window/rescale."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class TraceFormat(str, Enum):
    """Trace file layout (the value doubles as the CLI choice)."""

    AUTO = "auto"
    AZURE = "azure"
    MOONCAKE = "mooncake"
    BURSTGPT = "burstgpt"
    GENERIC = "generic"


class TimeUnit(str, Enum):
    """Unit of a generic trace's time column."""

    S = "s"
    MS = "ms"
    US = "us"
    NS = "ns"
    DATETIME = "datetime"


@dataclass(frozen=True)
class TraceOptions:
    """How to read a trace and which part of it to replay, at what speed."""

    format: TraceFormat = TraceFormat.AUTO
    """File layout; `auto` detects Azure, Mooncake and BurstGPT from the header."""
    time_unit: TimeUnit | None = None
    """Unit of the time column (generic traces must say; the others know theirs)."""
    time_column: str | None = None
    """Generic: arrival time column (default `timestamp`)."""
    prompt_column: str | None = None
    """Generic: prompt length column (default `prompt_tokens`)."""
    output_column: str | None = None
    """Generic: output length column (default `output_tokens`)."""
    class_column: str | None = None
    """Generic: optional traffic class column -> `RequestSpec.request_class`."""
    priority_column: str | None = None
    """Generic: optional integer priority column -> `RequestSpec.priority`."""
    hash_column: str | None = None
    """Generic: optional column of prompt block hashes (a list per request) ->
    `RequestSpec.prefix_hashes`."""
    hash_block_tokens: int | None = None
    """Generic: tokens each entry of `hash_column` covers (required with it)."""
    conversation_column: str | None = None
    """Generic: optional conversation (session) id column -> `RequestSpec.conversation_id`."""
    model: str | None = None
    """BurstGPT: keep only rows whose `Model` equals this (e.g. `ChatGPT`, `GPT-4`)."""
    start_s: float = 0.0
    """Skip this many seconds of trace time (from its first request) before the window."""
    duration_s: float | None = None
    """Keep this many seconds of trace time after `start_s` (None = to the end)."""
    max_requests: int | None = None
    """Keep at most this many requests after windowing (None = all)."""
    speedup: float | None = None
    """Divide every arrival time by this (2 = twice the rate, same shape)."""
    rate_per_s: float | None = None
    """Rescale all gaps by one factor so the mean rate becomes this (keeps burstiness)."""
    jitter_ticks: bool = False
    """Spread requests uniformly inside each timestamp tick (Mooncake conversation trace
    is quantized to ~3 s ticks), keeping their order; seeded by `seed`."""
    seed: int = 0
    """Seed of the tick jitter."""
    strict_order: bool = False
    """Refuse non-monotonic timestamps instead of sorting them (and noting it)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ValueError(f"start_s={self.start_s} must be >= 0 (seconds into the trace)")
        for name in ("duration_s", "speedup", "rate_per_s"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name}={v} must be a finite number > 0 (or unset)")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests={self.max_requests} must be >= 1 (or unset)")
        if (self.hash_column is None) != (self.hash_block_tokens is None):
            raise ValueError(
                "--hash-column and --hash-block-tokens go together: the hashes of a generic "
                "trace need the number of tokens each one covers (e.g. 16, vLLM's block)")
        if self.hash_block_tokens is not None and self.hash_block_tokens < 1:
            raise ValueError(f"--hash-block-tokens {self.hash_block_tokens} must be >= 1")
        if self.speedup is not None and self.rate_per_s is not None:
            raise ValueError(
                f"speedup={self.speedup} and rate_per_s={self.rate_per_s} both rescale time; "
                "give one of them"
            )

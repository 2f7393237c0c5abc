"""Immutable request specs and workloads: the data every policy in a comparison replays."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the workload defines it, before any scheduling."""

    request_id: int
    """Index of the request in its workload (0-based, in arrival order)."""
    arrival_s: float
    """Arrival time in seconds from the workload's start."""
    prompt_tokens: int
    """Prompt (input) length in tokens, >= 1."""
    output_tokens: int
    """Number of output tokens to generate (ignore-eos), >= 1."""
    prefix_hashes: tuple[int, ...] = ()
    """Hashes of the prompt's prefix blocks (equal hash = reusable KV), each covering
    `Workload.prefix_block_tokens` tokens; empty when the workload has none."""
    request_class: str = "default"
    """Traffic class name (e.g. `interactive`, `batch`) for per-class SLOs and metrics."""
    priority: int = 0
    """Scheduling priority; lower runs first (vLLM's convention)."""
    conversation_id: str | None = None
    """The conversation (session) the request belongs to, when the trace says; a fleet's
    `conversation` router keeps a conversation on one replica."""

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(
                f"request {self.request_id}: prompt_tokens={self.prompt_tokens}, "
                f"output_tokens={self.output_tokens}; both must be >= 1"
            )
        if not self.arrival_s >= 0.0:
            raise ValueError(f"request {self.request_id}: arrival_s={self.arrival_s} must be >= 0")


@dataclass(frozen=True)
class Workload:
    """A named, ordered set of requests (sorted by arrival, ids 0..n-1)."""

    name: str
    """Short label used in summaries and plot titles."""
    requests: tuple[RequestSpec, ...]
    """The requests, sorted by `arrival_s`, `request_id == index`."""
    prefix_block_tokens: int = 0
    """Tokens covered by one entry of `RequestSpec.prefix_hashes` (0 = no hashes)."""
    notes: tuple[str, ...] = field(default=())
    """Human notes carried to the summary (e.g. 'timestamps jittered inside 3 s ticks')."""
    params: dict = field(default_factory=dict, compare=False)
    """The generator or loader parameters, echoed into summary.json."""

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError(f"workload {self.name!r} has no requests; give it at least one")
        prev = -1.0
        for i, r in enumerate(self.requests):
            if r.request_id != i:
                raise ValueError(
                    f"workload {self.name!r}: request at index {i} has request_id "
                    f"{r.request_id}; ids must equal their index (use renumbered())"
                )
            if r.arrival_s < prev:
                raise ValueError(
                    f"workload {self.name!r}: request {i} arrives at {r.arrival_s} s, before "
                    f"request {i - 1} at {prev} s; sort requests by arrival"
                )
            prev = r.arrival_s

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival, seconds."""
        return self.requests[-1].arrival_s - self.requests[0].arrival_s


def renumbered(requests: Iterable[RequestSpec]) -> tuple[RequestSpec, ...]:
    """The requests stably sorted by arrival with ids 0..n-1, as `Workload` requires."""
    ordered = sorted(requests, key=lambda r: r.arrival_s)  # sorted() is stable
    return tuple(
        r if r.request_id == i else replace(r, request_id=i) for i, r in enumerate(ordered)
    )

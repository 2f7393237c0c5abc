"""Immutable request specs and workloads: the data every policy in a comparison replays."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


RECENT_SPECS = 256
"""Specs a `SpecTable` keeps after building them (a bounded window, not the workload)."""


class SpecTable(Sequence):
    """A workload's requests as columns: arrival, prompt and output lengths, class codes,
    priorities, prefix hashes as one flat array with offsets. A read-only sequence of
    `RequestSpec` built on access, so a workload of millions of requests costs tens of
    bytes each instead of a few hundred for objects. Rows are sorted by arrival with ids
    0..n-1 (`workloads.build` makes them so)."""

    __slots__ = ("arrival_s", "prompt_tokens", "output_tokens", "class_codes",
                 "class_names", "priority", "hash_values", "hash_offsets",
                 "conversation_id", "_last", "_recent")

    def __init__(self, arrival_s, prompt_tokens, output_tokens, class_codes=None,
                 class_names=("default",), priority=None, hash_values=None,
                 hash_offsets=None, conversation_id=None) -> None:
        import numpy as np

        self.arrival_s = np.asarray(arrival_s, dtype=np.float64)
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(output_tokens, dtype=np.int64)
        n = len(self.arrival_s)
        self.class_codes = (np.zeros(n, dtype=np.int32) if class_codes is None
                            else np.asarray(class_codes, dtype=np.int32))
        self.class_names = tuple(class_names)
        """Every class name a code may point at (sorted, unused ones included)."""
        self.priority = None if priority is None else np.asarray(priority, dtype=np.int64)
        self.hash_values = None if hash_values is None else _hash_array(hash_values)
        self.hash_offsets = None if hash_offsets is None else np.asarray(hash_offsets,
                                                                         dtype=np.int64)
        self.conversation_id = conversation_id
        """A list of ids (or None entries), or None when no request has one."""
        self._last: tuple = (None, None)  # (index, spec) last built
        # the specs built lately, oldest first: a fleet reads each request a few times
        # (its route, its delivery, a P/D handoff) with others' reads in between
        self._recent: dict[int, RequestSpec] = {}

    @classmethod
    def of(cls, specs: Sequence[RequestSpec]) -> SpecTable:
        """The columns of `specs` (in their order; their ids are their indices)."""
        import numpy as np

        names = tuple(sorted({r.request_class for r in specs}))
        code = {c: k for k, c in enumerate(names)}
        lens = [len(r.prefix_hashes) for r in specs]
        offsets = values = None
        if any(lens):
            offsets = np.zeros(len(specs) + 1, dtype=np.int64)
            np.cumsum(lens, out=offsets[1:])
            values = [h for r in specs for h in r.prefix_hashes]
        prios = [r.priority for r in specs]
        convs = [r.conversation_id for r in specs]
        return cls([r.arrival_s for r in specs], [r.prompt_tokens for r in specs],
                   [r.output_tokens for r in specs],
                   [code[r.request_class] for r in specs], names or ("default",),
                   prios if any(prios) else None, values, offsets,
                   convs if any(c is not None for c in convs) else None)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def __getitem__(self, i):
        last = self._last  # the engine reads the next arrival again and again: one hit
        if last[0] == i:
            return last[1]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self.arrival_s)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"request {i} out of range ({n} requests)")
        recent = self._recent
        spec = recent.get(i)
        if spec is not None:
            self._last = (i, spec)
            return spec
        if self.hash_values is not None:
            lo, hi = self.hash_offsets[i], self.hash_offsets[i + 1]
            hashes = tuple(self.hash_values[lo:hi].tolist())
        else:
            hashes = ()
        spec = RequestSpec(
            i, float(self.arrival_s[i]), int(self.prompt_tokens[i]),
            int(self.output_tokens[i]), hashes, self.class_names[self.class_codes[i]],
            0 if self.priority is None else int(self.priority[i]),
            None if self.conversation_id is None else self.conversation_id[i])
        self._last = (i, spec)
        recent[i] = spec
        if len(recent) > RECENT_SPECS:
            del recent[next(iter(recent))]
        return spec

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash((len(self), self.arrival_s.tobytes(), self.prompt_tokens.tobytes(),
                     self.output_tokens.tobytes()))

    def with_outputs(self, output_tokens) -> SpecTable:
        """The same requests with other output lengths (an array of one per request),
        sharing every other column."""
        return SpecTable(self.arrival_s, self.prompt_tokens, output_tokens, self.class_codes,
                         self.class_names, self.priority, self.hash_values,
                         self.hash_offsets, self.conversation_id)

    def request_classes(self) -> list[str]:
        """Each request's class name (a list, for tables)."""
        names = self.class_names
        return [names[c] for c in self.class_codes.tolist()]

    @property
    def nbytes(self) -> int:
        """Bytes held by the numeric columns."""
        cols = (self.arrival_s, self.prompt_tokens, self.output_tokens, self.class_codes,
                self.priority, self.hash_values, self.hash_offsets)
        return sum(c.nbytes for c in cols if c is not None)


def arrival_times(specs: Sequence[RequestSpec]) -> list[float]:
    """Each request's arrival, seconds (from the column when `specs` is a table)."""
    if isinstance(specs, SpecTable):
        return specs.arrival_s.tolist()
    return [s.arrival_s for s in specs]


def _hash_array(values):
    """Prefix hashes as int64, or as Python ints (an object array) when one does not fit
    in 64 bits: equal hashes must stay equal, whatever their size."""
    import numpy as np

    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        return np.asarray(list(values), dtype=object)


@dataclass(frozen=True)
class Workload:
    """A named, ordered set of requests (sorted by arrival, ids 0..n-1)."""

    name: str
    """Short label used in summaries and plot titles."""
    requests: SpecTable
    """The requests as columns, sorted by `arrival_s`, `request_id == index`. A sequence
    of `RequestSpec` given here is checked (ids, order) and stored as its columns."""
    prefix_block_tokens: int = 0
    """Tokens covered by one entry of `RequestSpec.prefix_hashes` (0 = no hashes)."""
    notes: tuple[str, ...] = field(default=())
    """Human notes carried to the summary (e.g. 'timestamps jittered inside 3 s ticks')."""
    params: dict = field(default_factory=dict, compare=False)
    """The generator or loader parameters, echoed into summary.json."""

    def __post_init__(self) -> None:
        if not len(self.requests):
            raise ValueError(f"workload {self.name!r} has no requests; give it at least one")
        if isinstance(self.requests, SpecTable):
            import numpy as np

            a = self.requests.arrival_s
            bad = np.flatnonzero(np.diff(a) < 0)
            if len(bad):
                i = int(bad[0]) + 1
                raise ValueError(
                    f"workload {self.name!r}: request {i} arrives at {a[i]} s, before "
                    f"request {i - 1} at {a[i - 1]} s; sort requests by arrival")
            return
        prev = -1.0
        specs = tuple(self.requests)
        for i, r in enumerate(specs):
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
        object.__setattr__(self, "requests", SpecTable.of(specs))

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

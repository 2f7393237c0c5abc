"""Turn column arrays into a `Workload`: the one place that sorts, renumbers and validates.

Every generator and trace loader ends here, so ordering and id rules are written once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksim.core.spec import SpecTable, Workload


def workload_from_arrays(
    name: str,
    arrival_s: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    *,
    prefix_hashes: Sequence[tuple[int, ...]] | None = None,
    request_class: Sequence[str] | None = None,
    priority: Sequence[int] | np.ndarray | None = None,
    conversation_id: Sequence[str | None] | None = None,
    prefix_block_tokens: int = 0,
    notes: Sequence[str] = (),
    params: dict | None = None,
) -> Workload:
    """Build a workload from per-request columns, stably sorted by arrival, ids 0..n-1.

    Equal arrival times keep their input order (a stable sort), so trace row order and
    generator order survive ties.
    """
    arrival = np.asarray(arrival_s, dtype=np.float64)
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    n = len(arrival)
    if n == 0:
        raise ValueError(f"workload {name!r} has no requests; give it at least one")
    for label, col in (("prompt_tokens", prompt), ("output_tokens", output)):
        if len(col) != n:
            raise ValueError(f"workload {name!r}: {label} has {len(col)} values, arrivals {n}")
    _check_positive(name, "prompt_tokens", prompt)
    _check_positive(name, "output_tokens", output)
    bad = np.flatnonzero(~np.isfinite(arrival) | (arrival < 0))
    if len(bad):
        raise ValueError(
            f"workload {name!r}: request {bad[0]} has arrival_s={arrival[bad[0]]}; "
            "arrivals must be finite and >= 0"
        )

    order = np.argsort(arrival, kind="stable")
    table = _table(arrival, prompt, output, order, prefix_hashes, request_class, priority,
                   conversation_id)
    return Workload(
        name=name,
        requests=table,
        prefix_block_tokens=prefix_block_tokens,
        notes=tuple(notes),
        params=dict(params or {}),
    )


def _table(arrival, prompt, output, order, prefix_hashes, request_class, priority,
           conversation_id) -> SpecTable:
    """The sorted columns as a SpecTable."""
    idx = order.tolist()
    hash_values = hash_offsets = None
    if prefix_hashes is not None:
        lens = np.fromiter((len(prefix_hashes[i]) for i in idx), dtype=np.int64, count=len(idx))
        if lens.any():
            hash_offsets = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(lens, out=hash_offsets[1:])
            try:
                hash_values = np.fromiter((h for i in idx for h in prefix_hashes[i]),
                                          dtype=np.int64, count=int(hash_offsets[-1]))
            except OverflowError:  # a hash past 64 bits: kept as Python ints
                hash_values = [h for i in idx for h in prefix_hashes[i]]
    codes, names = None, ("default",)
    if request_class is not None:
        codes, names = _class_codes(request_class)
        codes = codes[order]
    prios = np.asarray(priority, dtype=np.int64)[order] if priority is not None else None
    convs = None
    if conversation_id is not None and any(c is not None for c in conversation_id):
        convs = [conversation_id[i] for i in idx]
    return SpecTable(arrival[order], prompt[order], output[order], codes, names, prios,
                     hash_values, hash_offsets, convs)


def _class_codes(request_class) -> tuple[np.ndarray, tuple[str, ...]]:
    """(code per request, sorted class names): hash passes, no string copies."""
    names = sorted(set(request_class))
    index = {name: i for i, name in enumerate(names)}
    codes = np.fromiter(map(index.__getitem__, request_class), dtype=np.int32,
                        count=len(request_class))
    return codes, tuple(str(x) for x in names)


def _check_positive(name: str, label: str, col: np.ndarray) -> None:
    bad = np.flatnonzero(col < 1)
    if len(bad):
        raise ValueError(
            f"workload {name!r}: request {bad[0]} has {label}={col[bad[0]]}; "
            f"every request needs {label} >= 1"
        )

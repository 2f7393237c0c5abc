"""Turn column arrays into a `Workload`: the one place that sorts, renumbers and validates.

Every generator and trace loader ends here, so ordering and id rules are written once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksim.core.spec import RequestSpec, Workload


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
    # tolist() converts to Python scalars in C; per-element numpy scalars are ~10x slower.
    arr_l = arrival[order].tolist()
    pro_l = prompt[order].tolist()
    out_l = output[order].tolist()
    idx = order.tolist()
    hashes = [tuple(prefix_hashes[i]) for i in idx] if prefix_hashes is not None else None
    classes = [request_class[i] for i in idx] if request_class is not None else None
    prios = np.asarray(priority, dtype=np.int64)[order].tolist() if priority is not None else None
    convs = [conversation_id[i] for i in idx] if conversation_id is not None else None

    requests = tuple(
        RequestSpec(
            request_id=k,
            arrival_s=arr_l[k],
            prompt_tokens=pro_l[k],
            output_tokens=out_l[k],
            prefix_hashes=hashes[k] if hashes is not None else (),
            request_class=classes[k] if classes is not None else "default",
            priority=prios[k] if prios is not None else 0,
            conversation_id=convs[k] if convs is not None else None,
        )
        for k in range(n)
    )
    return Workload(
        name=name,
        requests=requests,
        prefix_block_tokens=prefix_block_tokens,
        notes=tuple(notes),
        params=dict(params or {}),
    )


def _check_positive(name: str, label: str, col: np.ndarray) -> None:
    bad = np.flatnonzero(col < 1)
    if len(bad):
        raise ValueError(
            f"workload {name!r}: request {bad[0]} has {label}={col[bad[0]]}; "
            f"every request needs {label} >= 1"
        )

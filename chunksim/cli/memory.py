"""Will a run fit in memory? An estimate made before simulating, so a run too large for
the machine is refused at once with the flags that shrink it, instead of swapping for
minutes and failing.

What a run holds grows with its requests (the workload's columns, one record row per
request, the requests table written at the end) and, when steps are kept in memory, with
its steps (tens per request for chat-like traffic: a step per output token of the
running batch; sparser traffic has more), and, for a fleet, with its engines. Step rows
streamed to --out or not kept (`--steps none`, or no --out) cost one buffer; pooled token
gaps are capped (`records.EXACT_GAP_SAMPLES`). The constants are the default workload's, rounded up.
"""

from __future__ import annotations

import os

BASE_BYTES = 300 * 2**20
"""Interpreter, numpy / pandas / pyarrow / simpy and a profile, with headroom."""
REQUEST_BYTES = 1024
"""Per request: workload columns, record columns, the requests table and its file."""
STEP_ROW_BYTES = 208
"""Per step row kept in memory (the row, and its copy in the steps frame)."""
STEPS_PER_REQUEST = 80
"""Step rows per request assumed when steps are kept in memory."""
ENGINE_BYTES = 5 * 2**19
"""Per engine of a fleet (a replica, or a P/D instance): its KV block tables, queues,
record buffers and latency caches (about 2.1 MiB each on the default profile, rounded
up)."""
POOLED_GAP_BYTES = 3 * 8 * 2**23
"""Exactly pooled token gaps at their cap (records.EXACT_GAP_SAMPLES), with copies."""


def estimate_bytes(num_requests: int, steps_in_memory: int, engines: int = 1) -> int:
    """Peak bytes a run of `num_requests` on `engines` engines is expected to need;
    `steps_in_memory`: keep every k-th step in memory (0: none kept or all streamed)."""
    steps = (num_requests * STEPS_PER_REQUEST // steps_in_memory
             if steps_in_memory else 0)
    return (BASE_BYTES + POOLED_GAP_BYTES + num_requests * REQUEST_BYTES
            + steps * STEP_ROW_BYTES + max(0, engines - 1) * ENGINE_BYTES)


def available_bytes() -> int | None:
    """Memory the run may take without swapping: MemAvailable (Linux), else free pages;
    None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(num_requests: int, steps_in_memory: int,
                 available: int | None = None, engines: int = 1) -> int:
    """The estimate; ValueError when it exceeds the available memory, naming the flags
    that help."""
    need = estimate_bytes(num_requests, steps_in_memory, engines)
    have = available_bytes() if available is None else available
    if have is not None and need > have:
        hint = ("keep fewer step rows in memory (--steps none, or --steps sample:N), "
                if steps_in_memory else "")
        if engines > 1 and (engines - 1) * ENGINE_BYTES > need / 2:
            hint += "run fewer engines (--replicas, --pd), "
        fleet = f" on {engines:,} engines" if engines > 1 else ""
        raise ValueError(
            f"a run of {num_requests:,} requests{fleet} needs about {need / 2**30:.1f} GiB of "
            f"memory and {have / 2**30:.1f} GiB is available: {hint}simulate fewer "
            "requests (--num-requests, --duration) or split the workload (--start with "
            "--duration for a trace), or free memory")
    return need

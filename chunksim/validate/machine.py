"""How busy the rest of the machine was while we measured: CPU seconds spent by other
processes, from /proc/stat minus this process's own CPU time (Linux; None elsewhere).

On a small shared machine a CPU step of `tiny` can slow by ~50 % while another process
runs beside it, so a profile and a live run are only comparable if both saw the same
neighbours. Each validation records `other_cpu_busy`: the mean number of CPUs other
processes kept busy during it (0 = quiet).
"""

from __future__ import annotations

import os
import time


def _busy_s() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuMonitor:
    """Call `done()` after the measured work; start is the construction."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.busy0 = _busy_s()
        self.own0 = time.process_time()

    def done(self) -> dict:
        wall = time.perf_counter() - self.t0
        busy = _busy_s()
        own = time.process_time() - self.own0
        if busy is None or self.busy0 is None or wall <= 0:
            return {"other_cpu_busy": None, "own_cpu_busy": own / wall if wall else None}
        other = max(busy - self.busy0 - own, 0.0)
        return {"other_cpu_busy": other / wall, "own_cpu_busy": own / wall,
                "cpus": os.cpu_count(), "wall_s": wall}


def wait_for_quiet(max_wait_s: float, threshold: float = 0.15, window_s: float = 3.0,
                   log=print) -> float:
    """Sleep until other processes kept fewer than `threshold` CPUs busy over a
    `window_s` window, for at most `max_wait_s`; returns the seconds waited."""
    t0 = time.perf_counter()
    while True:
        m = CpuMonitor()
        time.sleep(window_s)
        other = m.done()["other_cpu_busy"]
        waited = time.perf_counter() - t0
        if other is None or other < threshold:
            return waited
        if waited >= max_wait_s:
            log(f"machine still busy (other processes: {other:.2f} CPUs) after {waited:.0f} s;"
                " measuring anyway")
            return waited

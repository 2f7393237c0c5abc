"""The GPU's SM clock and utilisation, sampled in the background while a live run (or a
profile) measures, so a slow stretch can be told apart: a down-clocked GPU shows in the
samples, a slow host does not.

Why: a live loop whose steps run in slow streaks, while the table agrees with the same
steps replayed alone, may be meeting a lowered clock. An eager forward pass is often
launch-bound (more time launching kernels than running them), so the GPU idles most of
each step, and its clock governor may lower the clock in such stretches. The
samples come from NVML (`torch.cuda.clock_rate`, which needs the `pynvml` module of
nvidia-ml-py); where that is missing, nothing is sampled.

A daemon thread reads the clock every `interval_s` (10 Hz by default): each read holds
the GIL only briefly, far below the steps' own noise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

Reader = Callable[[], tuple[float, float]]
"""Returns (SM clock in MHz, GPU utilisation in %)."""


def nvml_reader(device: str) -> Reader | None:
    """A reader of the current CUDA device's clock and utilisation, or None on CPU or
    where NVML cannot be read."""
    if device != "cuda":
        return None
    import torch

    try:
        torch.cuda.clock_rate()
        torch.cuda.utilization()
    except Exception:  # pynvml missing or NVML refused: sample nothing, say so in meta
        return None
    return lambda: (float(torch.cuda.clock_rate()), float(torch.cuda.utilization()))


class ClockSampler:
    """Samples `read()` every `interval_s` on a daemon thread between `start` and `stop`;
    times are `clock()` values minus `t0` (the run's own zero)."""

    def __init__(self, read: Reader, interval_s: float = 0.1,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s={interval_s} must be > 0")
        self.read = read
        self.interval_s = interval_s
        self.clock = clock
        self.t0 = 0.0
        self.samples: list[tuple[float, float, float]] = []
        """(time_s, sm_clock_mhz, utilization_pct) in reading order."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, t0: float) -> None:
        """Begin sampling; `t0` is the `clock()` value that times are relative to."""
        self.t0 = t0
        self._thread = threading.Thread(target=self._run, name="gpu-clock", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                mhz, util = self.read()
                self.samples.append((self.clock() - self.t0, mhz, util))
            except Exception:  # a failed read is a gap in the samples, not a failed run
                pass
            self._stop.wait(self.interval_s)

    def stop(self) -> pd.DataFrame:
        """Stop and join the thread; returns the samples (columns time_s, sm_clock_mhz,
        utilization_pct)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return samples_frame(self.samples)


def samples_frame(samples: list[tuple[float, float, float]]) -> pd.DataFrame:
    """The samples as a frame sorted by time."""
    df = pd.DataFrame(samples, columns=["time_s", "sm_clock_mhz", "utilization_pct"])
    return df.sort_values("time_s", kind="stable").reset_index(drop=True)


def attach_clock(steps: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """`steps` with `sm_clock_mhz`: the latest sample at or before each step's start
    (NaN before the first sample). Same row order as `steps`."""
    out = steps.copy()
    if samples.empty:
        out["sm_clock_mhz"] = np.nan
        return out
    idx = np.searchsorted(samples["time_s"].to_numpy(), steps["start_s"].to_numpy(),
                          side="right") - 1
    clocks = samples["sm_clock_mhz"].to_numpy()[np.maximum(idx, 0)]
    out["sm_clock_mhz"] = np.where(idx >= 0, clocks, np.nan)
    return out


def clock_summary(samples: pd.DataFrame) -> dict | None:
    """Median / min / max SM clock over the samples, the share of samples below 90 % of
    the highest sampled, and the median utilisation; None without samples."""
    if samples.empty:
        return None
    mhz = samples["sm_clock_mhz"].to_numpy()
    return {"samples": int(len(mhz)), "median_mhz": float(np.median(mhz)),
            "min_mhz": float(mhz.min()), "max_mhz": float(mhz.max()),
            "share_below_90pct": float(np.mean(mhz < 0.9 * mhz.max())),
            "median_utilization_pct": float(np.median(samples["utilization_pct"]))}

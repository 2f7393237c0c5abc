"""Measure a grid and write the profile: prune, checkpoint each point, resume, write atomically.

`run_profile` is the library entry point behind `sim profile`; `on_point` lets a caller (or
a test simulating an interrupt) observe every measured point as it is checkpointed.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch

from chunksim.decoder.attention import SDPA_BACKENDS
from chunksim.decoder.config import ModelConfig
from chunksim.decoder.device import (
    device_memory_bytes,
    device_name,
    free_cached,
    pin_host_allocator,
    synchronizer,
)
from chunksim.decoder.gpu_clock import ClockSampler, clock_summary, nvml_reader
from chunksim.decoder.model import build_model
from chunksim.decoder.step import ATTENTION_BACKEND
from chunksim.profiler.component_write import _model_entry
from chunksim.profiler.grid import GridPoint, GridSpec, prune
from chunksim.profiler.passes import cold_look, combine, fast_points, pass_order
from chunksim.profiler.store import Checkpoint, row_of, write_profile
from chunksim.profiler.synthetic import PointStepper
from chunksim.profiler.timing import Timing, measure
from chunksim.progress import ProgressBar

FIRST_CALL_KV = 1301
"""KV length the first-call probe starts at (off the grid's round numbers)."""
FIRST_CALL_COUNT = 12
"""New shapes per kind in the first-call probe."""
MIN_REPEATS = 3
"""Timed repeats every point gets even when its time budget is spent."""
REPASS_BELOW_S = 0.3
"""Default `repass_below_s`: the fidelity suite's setting, which covers every point of
`tiny`'s validation grid on the CPU but its largest prefills."""


@dataclass(frozen=True)
class ProfileSettings:
    """Everything that defines one profile run."""

    model: ModelConfig
    """Shapes of the profiled model."""
    device: str
    """`cpu` or `cuda` (already resolved from `auto`)."""
    dtype: str
    """`float32`, `bfloat16` or `float16`."""
    grid: GridSpec
    """Axes and timing settings."""
    out_csv: Path
    """Final table path; the JSON goes next to it with a `.json` suffix."""
    threads: int | None = 1
    """torch intra-op threads on CPU; None on CUDA (not recorded there)."""
    seed: int = 0
    """Seed of the random weights, KV contents and tokens."""
    resume: bool = False
    """Continue the checkpoint next to `out_csv` instead of refusing to overwrite it."""
    memory_fraction: float = 0.9
    """Share of device memory that weights + a point's KV may take before it is pruned."""
    passes: int = 1
    """Looks at each fast point: pass 1 measures the grid; passes 2..N look at the points
    under `repass_below_s` once more each, in a fresh order (`profiler.passes`)."""
    repass_below_s: float = REPASS_BELOW_S
    """Pass-1 median under which a point is looked at again in passes 2..N, seconds."""
    cold_looks: bool = True
    """Passes 2..N time a point with a prefill once, cold (as serving runs a new chunk);
    False: every look is warm-up + repeats, as pass 1."""

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"--dtype {self.dtype!r}: use float32, bfloat16 or float16")
        if self.device == "cpu" and (self.threads is None or self.threads < 1):
            raise ValueError(f"--threads {self.threads}: CPU profiling needs threads >= 1")
        if self.out_csv.suffix != ".csv":
            raise ValueError(f"--out {str(self.out_csv)!r}: give the CSV path, ending in "
                             f".csv (the JSON is written next to it)")
        if self.passes < 1:
            raise ValueError(f"--passes {self.passes}: use 1 or more")
        if not self.repass_below_s > 0:
            raise ValueError(f"--repass-below-ms {self.repass_below_s * 1e3:g}: use a "
                             f"positive time")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction={self.memory_fraction} must be in (0, 1]")


def point_stepper(s: ProfileSettings, model) -> PointStepper:
    """A `PointStepper` for `model` on `s`'s device, with the KV memory `s` leaves it:
    `memory_fraction` of the device minus the weights."""
    budget = s.memory_fraction * device_memory_bytes(s.device) - s.model.weights_bytes(s.dtype)
    return PointStepper(model, s.device, getattr(torch, s.dtype), budget, seed=s.seed)


@dataclass
class ProfileResult:
    """What a finished run wrote."""

    csv_path: Path
    json_path: Path
    meta: dict
    measured_now: list[GridPoint] = field(default_factory=list)
    """Points measured by this invocation (excludes those resumed from the checkpoint)."""
    relooked_now: list[tuple[int, GridPoint]] = field(default_factory=list)
    """(pass, point) of the later passes' looks taken by this invocation."""


def _identity(s: ProfileSettings, dev_name: str) -> dict:
    """What must match for a checkpoint to be resumed."""
    return {"model": s.model.as_dict(), "device": s.device, "device_name": dev_name,
            "dtype": s.dtype, "threads": s.threads, "grid": s.grid.as_dict(), "seed": s.seed,
            "torch_version": torch.__version__, "memory_fraction": s.memory_fraction,
            "sdpa_backends": _sdpa_backends(s.device), "passes": s.passes,
            "repass_below_s": s.repass_below_s, "cold_looks": s.cold_looks}


def _sdpa_backends(device: str) -> list[str] | None:
    """The SDPA kernels the model may use (attention.SDPA_BACKENDS; CUDA only)."""
    return list(SDPA_BACKENDS) if device == "cuda" else None


def run_profile(s: ProfileSettings,
                on_point: Callable[[GridPoint, Timing], None] | None = None,
                show_progress: bool = True) -> ProfileResult:
    """Measure every unpruned grid point of `s` (skipping checkpointed ones on resume) and
    write `s.out_csv` + its JSON. Raises ValueError on a checkpoint conflict."""
    threads_before = torch.get_num_threads()
    if s.device == "cpu":
        torch.set_num_threads(s.threads)
        pin_host_allocator()
    try:
        return _run(s, on_point, show_progress)
    finally:
        torch.set_num_threads(threads_before)  # leave the caller's process as it was


def _run(s: ProfileSettings, on_point: Callable[[GridPoint, Timing], None] | None,
         show_progress: bool) -> ProfileResult:
    started = time.perf_counter()
    dev_name, mem_bytes = device_name(s.device), device_memory_bytes(s.device)
    pruned = prune(s.grid.points(), s.model, s.dtype, mem_bytes, s.memory_fraction)
    identity = _identity(s, dev_name)

    ckpt = Checkpoint(s.out_csv)
    rows: dict[tuple, tuple] = {}  # pass 1, by point key
    looks: dict[tuple, dict[int, tuple]] = {}  # later passes: key -> {pass: row}
    elapsed_before = 0.0
    if s.resume and ckpt.exists():
        loaded, elapsed_before = ckpt.load(identity)
        for row, pass_no in loaded:
            if pass_no == 1:
                rows[row[:4]] = row
            else:
                looks.setdefault(row[:4], {})[pass_no] = row
    elif ckpt.exists():
        raise ValueError(f"a checkpoint of an unfinished run exists at {ckpt.csv_path}; pass "
                         f"--resume to continue it, or delete it to start over")
    else:
        ckpt.start(identity)
    todo = [p for p in pruned.kept if p.key() not in rows]
    # Seeded random order: a burst of interference (another process, a clock change) then
    # adds scattered noise across the table instead of skewing one contiguous region of it,
    # which interpolation would take for a real feature. It also makes the ETA honest.
    random.Random(s.seed).shuffle(todo)

    def save(point: GridPoint, timing: Timing, pass_no: int) -> tuple:
        row = row_of(point, timing)
        ckpt.append(row, pass_no)
        ckpt.save_meta(identity, elapsed_before + time.perf_counter() - started)
        if on_point is not None:
            on_point(point, timing)
        return row

    measured: list[GridPoint] = []
    relooked: list[tuple[int, GridPoint]] = []
    bench: _Bench | None = None
    with torch.inference_mode():
        if todo:
            bench = _Bench(s)
            with ProgressBar("profiling", total=len(pruned.kept), enabled=show_progress,
                             completed=len(pruned.kept) - len(todo)) as bar:
                for p in todo:
                    bar.describe(f"c={p.chunk_len} p={p.prior_len} d={p.decode_count} "
                                 f"k={p.kv_len}")
                    rows[p.key()] = save(p, bench.warm(p), 1)
                    measured.append(p)
                    bar.advance()
        fast = fast_points(rows, pruned.kept, s.repass_below_s)
        work = [(k, p) for k in range(2, s.passes + 1) for p in pass_order(fast, s.seed, k)
                if k not in looks.get(p.key(), {})]
        if work:
            bench = bench or _Bench(s)
            total = (s.passes - 1) * len(fast)
            with ProgressBar(f"passes 2-{s.passes}", total=total, enabled=show_progress,
                             completed=total - len(work)) as bar:
                for k, p in work:
                    bar.describe(f"pass {k}: c={p.chunk_len} p={p.prior_len} "
                                 f"d={p.decode_count} k={p.kv_len}")
                    cold = s.cold_looks and p.chunk_len > 0
                    looks.setdefault(p.key(), {})[k] = save(
                        p, bench.cold(p) if cold else bench.warm(p), k)
                    relooked.append((k, p))
                    bar.advance()
    gpu_clock = bench.close() if bench is not None else None

    # the grid's bar is done; these take seconds more (a live session, idle waits)
    with ProgressBar("after the grid", total=2, enabled=show_progress) as bar:
        bar.describe("step overhead (live loop)")
        overhead = _measure_overhead(s)
        bar.advance()
        bar.describe("wake-up and first-call costs")
        wake_up, first_call = _measure_cold_costs(s)
        bar.advance()
    final_rows = [combine(rows[p.key()], [looks[p.key()][k] for k in range(2, s.passes + 1)
                                          if k in looks.get(p.key(), {})])
                  for p in pruned.kept]
    meta = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": s.device,
        "device_name": dev_name,
        "device_memory_bytes": mem_bytes,
        "dtype": s.dtype,
        "threads": s.threads if s.device == "cpu" else None,
        "host_allocator": pin_host_allocator() if s.device == "cpu" else None,
        "torch_version": torch.__version__,
        "attention_backend": ATTENTION_BACKEND,
        "sdpa_backends": _sdpa_backends(s.device),
        "model": _model_entry(s.model),
        "weights_bytes": s.model.weights_bytes(s.dtype),
        "kv_bytes_per_token": s.model.kv_bytes_per_token(s.dtype),
        "step_overhead_s": overhead["median_s"],
        "step_overhead": overhead,
        "gpu_clock": gpu_clock,
        "wake_up": wake_up,
        "first_call": first_call,
        "grid": s.grid.as_dict(),
        "passes": s.passes,
        "repass_below_s": s.repass_below_s if s.passes > 1 else None,
        "repassed_points": len(fast) if s.passes > 1 else 0,
        "cold_looks": ("prefill points" if s.cold_looks else None) if s.passes > 1 else None,
        "elapsed_s": round(elapsed_before + time.perf_counter() - started, 3),
        "seed": s.seed,
        "pruned_points": {"memory": pruned.memory, "max_position": pruned.max_position},
        "memory_fraction": s.memory_fraction,
    }
    meta = write_profile(s.out_csv, final_rows, meta)
    ckpt.remove()
    return ProfileResult(s.out_csv, s.out_csv.with_suffix(".json"), meta, measured, relooked)


class _Bench:
    """The model, its pools and the GPU clock sampler while points are being timed."""

    def __init__(self, s: ProfileSettings) -> None:
        self.s = s
        self.model = build_model(s.model, s.device, getattr(torch, s.dtype), seed=s.seed)
        self.stepper = point_stepper(s, self.model)
        self.sync = synchronizer(s.device)
        reader = nvml_reader(s.device)
        self.sampler = ClockSampler(reader) if reader else None
        if self.sampler:
            self.sampler.start(time.perf_counter())

    def warm(self, p: GridPoint) -> Timing:
        """The profiler's look: warm-up, then repeats until the point's time budget."""
        g = self.s.grid
        # no reference to the closure outlives its point: it holds the pools, and the
        # next point may need them rebuilt (old + new would not fit on a GPU)
        return measure(self.stepper.step_fn(p), g.warmup, g.repeats, self.sync,
                       min_repeats=MIN_REPEATS, budget_s=g.point_budget_s,
                       min_timed_s=g.point_min_s)

    def cold(self, p: GridPoint) -> Timing:
        """One run, timed as it comes, right after whatever ran before."""
        return cold_look(self.stepper.step_fn(p), self.sync)

    def close(self) -> dict | None:
        """Free the model and pools (the overhead session builds its own: on an 8B GPU
        run, this one and its pools, up to ~100 GB, must be gone first); the SM clock
        summary over the measurements (CUDA with NVML) or None."""
        clock = clock_summary(self.sampler.stop()) if self.sampler else None
        del self.model, self.stepper
        gc.collect()
        free_cached(self.s.device)
        return clock


def _measure_overhead(s: ProfileSettings) -> dict:
    """The live serving loop's per-step cost outside the forward pass (scheduling, input
    preparation, sampling), on a short synthetic session with this model and device: the
    simulator adds it to every step so predictions compare with real serving."""
    from chunksim.live.overhead import measure_step_overhead
    from chunksim.live.settings import LiveSettings

    return measure_step_overhead(LiveSettings(model=s.model, device=s.device, dtype=s.dtype,
                                              threads=s.threads, seed=s.seed))


def _measure_cold_costs(s: ProfileSettings) -> tuple[dict, dict | None]:
    """What the table's warm timing leaves out, on this model and device: the first steps
    after an idle wait over the same steps warm (`profiler.wake`; the simulator applies
    it after idling), and the first call of a new step shape over its repeat
    (`profiler.first_call`; recorded, and `sim profile` warns when it is large)."""
    from chunksim.profiler.first_call import first_call_ratios
    from chunksim.profiler.wake import STEPS, measure_wake_up

    cap = s.model.max_position
    points = [GridPoint(p, min(c, cap - 1), d, min(k, cap - 2)) for c, p, d, k in STEPS]
    dtype = getattr(torch, s.dtype)
    sync = synchronizer(s.device)
    with torch.inference_mode():
        model = build_model(s.model, s.device, dtype, seed=s.seed)
        stepper = point_stepper(s, model)
        wake = measure_wake_up([stepper.step_fn(p) for p in points], sync)
        del stepper
        gc.collect()
        # shapes off the grid's round numbers; within the model's positions
        kv_start = min(FIRST_CALL_KV, cap - 64 - FIRST_CALL_COUNT - 1)
        first = None
        if kv_start >= 1:
            first = {"sdpa_backends": _sdpa_backends(s.device), "kv_start": kv_start,
                     **first_call_ratios(model, s.device, dtype, sync, FIRST_CALL_COUNT,
                                         kv_start)}
    del model
    gc.collect()
    free_cached(s.device)
    return wake, first




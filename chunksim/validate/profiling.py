"""Profile on the fly for `sim validate` and the fidelity suite: the table is then
measured minutes before the live run, on the same machine in the same state.

`passes > 1` re-measures the fast points (median below `repass_below_s`) in further
passes, each in a fresh random order, and keeps the median of the pass medians. A fast
point is timed within a fraction of a second, so one burst of activity elsewhere on the
machine can move its median by tens of % (here: bimodal 0.8 / 1.25 ms for one decode);
several short looks spread over minutes are robust to that, one long look is not.

With `look_repeats=1` each extra pass times every point with a prefill once, cold: right
after a different point, as a serving loop runs a new prompt's chunk once after different
work (a step run again at once is ~10-15 % faster on this CPU: warm caches); decode-only
points are timed warm in every pass, as serving runs decode steps back to back (timed
cold they read 16-85 %, median 62 %, above the same decode steps re-timed alone). The
table keeps the median of the looks. The provenance records `passes`, `repass_below_s`
and `look_repeats`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np

from chunksim.sim.profile import Profile, load_profile


def profile_now(out_csv: Path, model: str = "tiny", device: str = "auto",
                dtype: str | None = None, threads: int = 1, grid: str = "quick",
                seed: int = 0, show_progress: bool = False, passes: int = 1,
                repass_below_s: float = 0.05, look_repeats: int | None = None,
                **axes: str | None) -> Profile:
    """Run `sim profile` into `out_csv` (overwriting a finished profile there), re-measure
    fast points `passes - 1` more times, and load it. `axes` may override chunk_lens /
    decode_counts / kv_lens / prior_lens ("0,64,256")."""
    from chunksim.profiler.command import build_settings
    from chunksim.profiler.run import run_profile

    if passes < 1:
        raise ValueError(f"passes={passes} must be >= 1")
    settings = build_settings(model=model, device=device, dtype=dtype, threads=threads,
                              grid=grid, out=out_csv, seed=seed, **axes)
    result = run_profile(settings, show_progress=show_progress)
    if passes > 1:
        _repass(settings, result.meta, passes - 1, repass_below_s, look_repeats)
    return load_profile(str(out_csv))


def _cold_look(fn, sync) -> tuple[float, float, float, float, int]:
    """One synchronized run, timed as it comes (no warm-up): a (median, p10, p90, mean,
    repeats) look of 1 sample."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    t = time.perf_counter() - t0
    return (t, t, t, t, 1)


def _repass(s, meta: dict, extra: int, below_s: float, look_repeats: int | None) -> None:
    """Measure the fast points `extra` more times and rewrite the profile with the median
    of the looks (p10/p90 likewise, means averaged, repeats summed). `look_repeats=1`:
    each look at a point with a prefill is one cold run (`_cold_look`), decode-only points
    get the profiler's warm-up + repeats; else every look is warm-up + repeats."""
    import pandas as pd
    import torch

    from chunksim.live.runtime import pinned_threads
    from chunksim.profiler.device import synchronizer
    from chunksim.profiler.model import build_model
    from chunksim.profiler.run import point_stepper
    from chunksim.profiler.store import point_of, write_profile
    from chunksim.profiler.timing import measure

    started = time.perf_counter()
    table = pd.read_csv(s.out_csv)
    fast = table[table["median_s"] < below_s]
    looks: dict[int, list[tuple[float, float, float, float, int]]] = {
        i: [(r.median_s, r.p10_s, r.p90_s, r.mean_s, r.repeats)]
        for i, r in zip(fast.index, fast.itertuples(index=False), strict=True)}
    points = {i: point_of({k: str(v) for k, v in r._asdict().items()})
              for i, r in zip(fast.index, fast.itertuples(index=False), strict=True)}
    dtype = getattr(torch, s.dtype)
    with pinned_threads(s.threads), torch.inference_mode():
        model = build_model(s.model, s.device, dtype, seed=s.seed)
        stepper = point_stepper(s, model)
        sync = synchronizer(s.device)
        warm_repeats = s.grid.repeats if look_repeats in (None, 1) else look_repeats
        for k in range(extra):
            order = list(points)
            random.Random(s.seed + 1 + k).shuffle(order)
            for i in order:
                fn = None  # drop the last point's pools before building this one's
                fn = stepper.step_fn(points[i])
                # cold looks for steps with a prefill (a new prompt's chunk runs once,
                # after other work); decode-only steps run back to back while serving, so
                # they are looked at warm (cold: up to +85 % over the same steps alone)
                if look_repeats == 1 and points[i].chunk_len > 0:
                    looks[i].append(_cold_look(fn, sync))
                    continue
                t = measure(fn, s.grid.warmup, warm_repeats, sync,
                            min_repeats=3, budget_s=s.grid.point_budget_s,
                            min_timed_s=s.grid.point_min_s)
                looks[i].append((t.median_s, t.p10_s, t.p90_s, t.mean_s, t.repeats))
    for i, seen in looks.items():
        a = np.asarray(seen)
        table.loc[i, ["median_s", "p10_s", "p90_s"]] = np.median(a[:, :3], axis=0)
        table.loc[i, "mean_s"] = a[:, 3].mean()
        table.loc[i, "repeats"] = int(a[:, 4].sum())
    rows = [(int(r.chunk_len), int(r.prior_len), int(r.decode_count), int(r.kv_len),
             repr(float(r.median_s)), repr(float(r.p10_s)), repr(float(r.p90_s)),
             repr(float(r.mean_s)), int(r.repeats)) for r in table.itertuples(index=False)]
    keep = {k: v for k, v in meta.items() if k not in ("format", "content_sha256", "points")}
    keep["elapsed_s"] = round(meta["elapsed_s"] + time.perf_counter() - started, 3)
    keep["passes"] = 1 + extra
    keep["repass_below_s"] = below_s
    keep["look_repeats"] = look_repeats
    keep["cold_looks"] = "prefill points" if look_repeats == 1 else None
    write_profile(s.out_csv, rows, keep)

"""Profile on the fly for `sim validate` and the fidelity suite: the table is then
measured minutes before the live run, on the same machine in the same state.

`passes > 1` re-measures the fast points in further passes and keeps the median of the
looks, cold at points with a prefill (`chunksim.profiler.passes`, as `sim profile
--passes`).
"""

from __future__ import annotations

from pathlib import Path

from chunksim.latency.profile import Profile, load_profile


def profile_now(out_csv: Path, model: str = "tiny", device: str = "auto",
                dtype: str | None = None, threads: int = 1, grid: str = "quick",
                seed: int = 0, show_progress: bool = False, passes: int = 1,
                repass_below_s: float | None = None, cold_looks: bool = True,
                **axes: str | None) -> Profile:
    """Run `sim profile` into `out_csv` (overwriting a finished profile there) with
    `passes` looks at the fast points, and load it. `axes` may override chunk_lens /
    decode_counts / kv_lens / prior_lens ("0,64,256")."""
    from chunksim.profiler.run import run_profile
    from chunksim.profiler.settings import build_settings

    settings = build_settings(model=model, device=device, dtype=dtype, threads=threads,
                              grid=grid, out=out_csv, seed=seed, passes=passes,
                              repass_below_s=repass_below_s, cold_looks=cold_looks, **axes)
    run_profile(settings, show_progress=show_progress)
    return load_profile(str(out_csv))

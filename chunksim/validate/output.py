"""Write a validation's files atomically into one directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chunksim import atomic

FILES = ("validation.json", "live_requests.csv", "sim_requests.csv", "live_steps.csv",
         "sim_steps.csv", "live_tokens.csv", "live_summary.json", "sim_summary.json")


def write_validation(out_dir: str | Path, v,
                     plot: Callable[[object, Path], Path] | None = None) -> list[Path]:
    """validation.json, both runs' request/step CSVs and summaries, every live token's
    time, and validation.png drawn by `plot(v, path)` when given (the reports layer's
    `plot_validation`). Returns the paths written."""
    out = Path(out_dir)
    atomic.write_csv(out / "live_requests.csv", v.live.requests)
    atomic.write_csv(out / "sim_requests.csv", v.sim.requests)
    atomic.write_csv(out / "live_steps.csv", v.live.steps)
    atomic.write_csv(out / "sim_steps.csv", v.sim.steps)
    atomic.write_csv(out / "live_tokens.csv", v.live.tokens)
    atomic.write_json(out / "live_summary.json", v.live_summary)
    atomic.write_json(out / "sim_summary.json", v.sim_summary)
    written = [out / f for f in FILES[1:]]
    if plot is not None:
        written.append(plot(v, out / "validation.png"))
    atomic.write_json(out / "validation.json", v.report)  # last: its presence = complete
    return [out / "validation.json", *written]

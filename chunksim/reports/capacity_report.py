"""`sim capacity`'s figures: the latency–throughput knee and the capacity bars."""

from __future__ import annotations

import re
from pathlib import Path

from chunksim.latency.profile import Profile
from chunksim.reports import style
from chunksim.sweep.capacity import CapacityEntry


def write_capacity_plots(out_dir: str | Path, entries: list[CapacityEntry],
                         best: CapacityEntry | None, slos: dict[str, float], profile: Profile,
                         formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    from chunksim.reports.capacity_plot import capacity_bars_figure, knee_figure

    workload = next((p.summary.get("workload") for e in entries for p in e.probes), "?")
    # the probe workloads differ only in rate: name the family, not one rate's name
    name = re.sub(r"-[0-9.e+]+rps", "", str(workload)) + " (rate varied)"
    title = style.title(name, profile.label)
    paths = style.save(knee_figure(entries, slos, title), Path(out_dir), "capacity_knee",
                       formats)
    paths += style.save(capacity_bars_figure(entries, best, title), Path(out_dir),
                        "capacity_bars", formats)
    return paths

"""The file set of `sim compare` and `sim capacity` --out: written into a staging
directory and swapped in whole (`atomic.swap_in`), as `sim run` does, so a folder never
mixes two runs (no `replica_load.png` of an earlier fleet compare beside a new report)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chunksim import atomic

_DATA = ("comparison.csv", "comparison.json", "capacity.json", "capacity_probes.csv",
         "splits.csv", "gpus.json", "gpu_probes.csv", "report.md", "report.html",
         "capacity_resume.pkl")  # an interrupted search's runs (`sweep.probe_store`)
_FIGURES = ("capacity_knee", "capacity_bars")


def answer_files() -> frozenset[str]:
    """Every name either command may write into --out (one replaces the other's set)."""
    from chunksim.reports.compare_report import FIGURE_STEMS

    stems = (*FIGURE_STEMS, *_FIGURES)
    return frozenset(_DATA) | {f"{s}.{ext}" for s in stems for ext in ("png", "svg")}


def refuse_foreign(out: Path) -> None:
    """Before any work: --out may hold only files of these commands' sets (they are
    replaced whole), so a folder of other files is refused now, not after the run."""
    foreign = atomic.foreign_entries(out, answer_files())
    if foreign:
        raise ValueError(f"--out {out} holds {', '.join(foreign[:5])}"
                         f"{' ...' if len(foreign) > 5 else ''}, which the answer's file set "
                         "would replace; give a new or empty directory")


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """The staging directory of --out `out`: what the block writes there is swapped in
    whole when it ends (an exception leaves it staged, removed by the next run)."""
    stage = atomic.staging_dir(out)
    yield stage
    atomic.swap_in(stage, out, answer_files())

"""`sim sweep`'s grid: workloads x policies x chunks x rates x seeds, each point keyed so a
table can be resumed (points already present are skipped).

The key includes `options_hash`, a digest of every other flag and of the profile's
content, so rerunning into the same table with a different --kv-blocks (say) adds rows
instead of silently reusing results simulated under other settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass

from chunksim.progress import ProgressBar
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config, PolicySpec
from chunksim.sweep.job import SimJob
from chunksim.sweep.runner import Runner
from chunksim.sweep.table import ResultTable, Row, cell, flatten
from chunksim.workloads.options import WorkloadKind, WorkloadOptions

KEY_COLUMNS = ("workload_kind", "policy", "chunk", "rate", "seed", "options_hash")
_AXES_WORKLOAD = {"workload", "rate", "seed", "trace"}
_AXES_RUN = {"policy", "chunk"}


def options_hash(workload: WorkloadOptions, run: RunConfig, profile_sha256: str) -> str:
    """12 hex digits identifying every setting that is not a grid axis."""
    w = {k: v for k, v in dataclasses.asdict(workload).items() if k not in _AXES_WORKLOAD}
    w["trace"] = workload.trace  # a trace file is a setting (its kind is the axis)
    r = {k: v for k, v in dataclasses.asdict(run).items() if k not in _AXES_RUN}
    r["knobs"] = [kv for kv in run.knobs if kv[0] != "variant"]  # the variant is an axis
    r["engine"].pop("seed")  # so is the seed
    # features that are off leave the digest they always had, so a sweep table written
    # before they existed resumes
    if not run.engine.speculative.enabled:
        r["engine"].pop("speculative")
    if not run.offload.active:
        r.pop("offload")
    if run.expert_skew is None:
        r.pop("expert_skew")
    blob = json.dumps({"workload": w, "run": r, "profile": profile_sha256}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def parse_workloads(text: str | None, default: WorkloadOptions) -> list[WorkloadKind]:
    """`poisson,long-prompt` -> kinds; None -> the --workload flag's (or trace)."""
    if text is None:
        return [WorkloadKind.TRACE if default.trace is not None else default.workload]
    kinds: list[WorkloadKind] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            kind = WorkloadKind(part)
        except ValueError:
            raise ValueError(
                f"--workloads: unknown workload {part!r}; choose from "
                f"{', '.join(k.value for k in WorkloadKind)}") from None
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        raise ValueError("--workloads: empty list (e.g. --workloads poisson,long-prompt)")
    return kinds


@dataclass(frozen=True)
class GridPoint:
    """One row of the sweep: its key and the job that fills it."""

    key: dict[str, str]
    job: SimJob


def grid_points(workload: WorkloadOptions, run: RunConfig, profile_sha256: str,
                kinds: list[WorkloadKind], configs: list[Config], rates: list[float | None],
                seeds: list[int]) -> list[GridPoint]:
    """Every point, in table order."""
    digest = options_hash(workload, run, profile_sha256)
    points = []
    for kind in kinds:
        for cfg in configs:
            for rate in rates:
                for seed in seeds:
                    opts = dataclasses.replace(workload, workload=kind, rate=rate, seed=seed)
                    key = {"workload_kind": kind.value, "policy": cfg.policy.label,
                           "chunk": cell(cfg.chunk), "rate": cell(rate), "seed": str(seed),
                           "options_hash": digest}
                    points.append(GridPoint(key, SimJob(opts, run, cfg)))
    points.sort(key=lambda p: row_sort_key(p.key))
    return points


def row_sort_key(row: Row) -> tuple:
    """Order rows by configuration (numbers as numbers), never by completion time."""
    try:
        cfg = Config(PolicySpec.parse(row["policy"]), int(row["chunk"]) if row["chunk"]
                     else None).sort_key
    except ValueError:  # a row from a newer/older chunksim: sort it by its text
        cfg = (99, 0, 0)
    return (row["workload_kind"], cfg, float(row["rate"] or 0.0), int(row["seed"] or 0),
            row["options_hash"], row["policy"])


def run_sweep(points: list[GridPoint], table: ResultTable, runner: Runner,
              progress: ProgressBar | None = None, flush_every_s: float = 2.0) -> int:
    """Run the points not yet in `table`; checkpoint atomically as results arrive.
    Returns how many ran."""
    todo = [p for p in points if table.key(p.key) not in table]
    if progress is not None:
        progress.add(len(todo))
    last = time.monotonic()

    def on_result(i: int, res) -> None:
        nonlocal last
        table.add(flatten(res.summary, todo[i].key))
        if time.monotonic() - last >= flush_every_s:
            table.flush()
            last = time.monotonic()

    try:
        runner.map([p.job for p in todo], on_result=on_result, progress=progress)
    finally:  # interrupted too: keep every result that arrived
        table.flush()
    return len(todo)

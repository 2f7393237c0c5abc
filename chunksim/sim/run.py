"""One simulation run from config to records and summary: the library entry point that
`sim run`, `sim compare`, `sim capacity` and `sim sweep` share. `simulate` runs one
engine (`sim.build`) or a fleet (`sim.fleet.fleet_run`); `RunConfig` is defined in `sim.build`
and re-exported here for callers of `simulate`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from chunksim import atomic
from chunksim.core.spec import Workload
from chunksim.latency.coverage import describe_ranges, profile_ranges
from chunksim.latency.profile import Profile
from chunksim.sim.build import RunConfig, build_engine, engine_parts
from chunksim.sim.engine.engine import SimResult
from chunksim.sim.engine.settle import SloWatch
from chunksim.sim.engine.spread_guard import SpreadGuard, widest_sigma
from chunksim.sim.fleet.records import no_steps
from chunksim.sim.fleet_run import simulate_fleet
from chunksim.sim.records.outputs import OutputFormat, table_bytes, table_names
from chunksim.sim.records.records import StepLog
from chunksim.sim.run_summary import summarize_run

__all__ = ["RunConfig", "simulate", "nothing_completed", "write_outputs", "OUTPUT_FILES",
           "refuse_unknown_classes"]


def refuse_unknown_classes(workload: Workload, cfg: RunConfig) -> None:
    """--class-chunk / --class-slo naming a class the workload lacks would be ignored
    without a word: refuse it, listing the classes there are."""
    reqs = workload.requests
    classes = (set(reqs.request_classes()) if hasattr(reqs, "request_classes")
               else {r.request_class for r in reqs})
    named = {"--class-chunk": {c for c, _ in dict(cfg.knobs).get("class_chunk_caps") or ()},
             "--class-slo": set(cfg.class_slos_s or {})}
    for flag, want in named.items():
        unknown = sorted(want - classes)
        if unknown:
            raise ValueError(f"{flag} names class(es) {unknown} that workload "
                             f"{workload.name!r} lacks; its classes: {sorted(classes)}")


def simulate(workload: Workload, profile: Profile, cfg: RunConfig,
             schedule_log: bool = False,
             progress: Callable[..., None] | None = None,
             steps_keep: int = 1, steps_sink=None,
             settle_slos_ms: Mapping[str, float] | None = None) -> tuple[SimResult, dict]:
    """Run one configuration (one engine, or a fleet: `cfg.fleet`); returns the records and
    the summary dict. With `schedule_log`, the records include every scheduling decision
    (`SimResult.schedule`; one engine only).

    Requests longer than --max-model-len (default: the profile model's maximum position)
    are rejected, as vLLM rejects them. A jittered step beyond what the profile's spread
    allows raises ValueError (`spread_guard`). The summary's `warnings` says when more
    than 5 % of the steps were priced outside the profile's grid (`latency.coverage`). `progress`
    is called as progress(requests done, requests, sim_s=...) now and then (`Engine`).

    `SimResult.steps` keeps every `steps_keep`-th step (1: all, 0: none), or none when
    `steps_sink(columns)` takes them as they are recorded (a streaming writer); the
    summary counts every step either way. A fleet keeps every step.

    With `settle_slos_ms` ({summary key: bound, ms}), the run stops as soon as one of
    those bounds has certainly failed, raising `settle.Settled` (`settle.SloWatch`)."""
    refuse_unknown_classes(workload, cfg)
    if cfg.fleet.active:
        if schedule_log:
            raise ValueError("--schedule-log logs one engine's decisions; drop it with "
                             "--replicas / --pd")
        result, summary = simulate_fleet(workload, profile, cfg, settle_slos_ms)
        if steps_keep == 1 and steps_sink is None:
            return result, summary  # every step, merged when first read
        if steps_keep == 0 and steps_sink is None:  # none kept: nothing to merge
            result.steps = no_steps()
            return result, summary
        merged = result.steps_data()  # the merged steps' columns, or a frame of them
        steps = {k: np.asarray(merged[k]) for k in merged}
        if steps_keep != 1:
            steps = {k: v[::steps_keep] if steps_keep else v[:0] for k, v in steps.items()}
        if steps_sink is not None:
            if len(steps["start_s"]):
                steps_sink(steps)
            steps = {k: v[:0] for k, v in steps.items()}
        result.steps = steps
        return result, summary
    parts = engine_parts(workload, profile, cfg)
    ranges = profile_ranges(profile)
    guard = (SpreadGuard(widest_sigma(profile.columns), describe_ranges(ranges))
             if parts.engine.jitter else None)
    engine = build_engine(workload, cfg, parts, schedule_log=schedule_log,
                          spread_guard=guard, progress=progress,
                          step_log=lambda: StepLog(keep=steps_keep, sink=steps_sink,
                                                   ranges=ranges))
    if settle_slos_ms:
        SloWatch(settle_slos_ms, workload).attach([engine], lone=True)
    result = engine.run()
    return result, summarize_run(result, profile, cfg, parts)


def nothing_completed(result: SimResult, summary: dict) -> str | None:
    """When no request completed: why, per kind of rejection with the first example of
    each (None when some request completed)."""
    if summary["completed"]:
        return None
    parts = [f"{count} by {kind} (e.g. {result.rejected_examples.get(kind, '?')})"
             for kind, count in summary.get("rejected_reasons", {}).items()]
    n = len(result.request_columns["request_id"])
    return (f"all {n} requests were rejected, so there is no latency to report"
            f": {'; '.join(parts) or 'no reason recorded'}")


BOARD_FILES = ("report.html", "board_queue.png", "board_kv.png", "board_busy.png",
               "board_tokens.png", "board_ttft.png", "board_itl.png")
"""What `sim run --out D --report` adds to D."""

OUTPUT_FILES = ("summary.json", *(name for fmt in OutputFormat for name in table_names(fmt)),
                *BOARD_FILES)
"""What `write_outputs` may write: the run's whole output directory (with --report, the
run board, `reports.run_board`)."""


def write_outputs(out_dir: str | Path, result: SimResult, summary: dict,
                  fmt: OutputFormat | str = OutputFormat.PARQUET, steps: bool = True,
                  steps_file: Path | None = None,
                  extra: dict[str, bytes] | None = None) -> list[str]:
    """summary.json, requests and steps tables in `fmt` (parquet or csv; and the schedule
    when the run logged it), written as one set (`atomic.write_dir`): a reader of
    `out_dir` sees one run's files, never a mix of two. The steps table holds
    `result.steps` (as `simulate` kept them), or is `steps_file` (streamed there while the
    run went: moved in), or is left out (`steps` False: `--steps none`). Returns the
    names written."""
    req_name, steps_name, sched_name = table_names(fmt)
    files: dict[str, bytes | Path] = {req_name: table_bytes(result.requests, fmt)}
    if steps_file is not None:
        files[steps_name] = Path(steps_file)
    elif steps:
        files[steps_name] = table_bytes(result.steps, fmt)
    if result.schedule is not None:
        files[sched_name] = table_bytes(result.schedule, fmt)
    files["summary.json"] = atomic.json_bytes(summary)
    files.update(extra or {})  # the run board (report.html and its figures)
    atomic.write_dir(out_dir, files, owned=OUTPUT_FILES)
    return ["summary.json", *(n for n in files if n != "summary.json")]

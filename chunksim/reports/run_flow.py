"""`sim run` below the command line: the rules of its output flags (`check_run_flags`,
`refuse_foreign_run`), one simulation with its tables streamed to --out and, with
--report, the run board (`simulate_to`), and what the run warns about or refuses to
call an answer (`run_warnings`). The command parses, calls these, and prints."""

from __future__ import annotations

from pathlib import Path

from chunksim.sim.records.outputs import OutputConfig
from chunksim.sim.run import RunConfig


def check_run_flags(out: Path | None, output_cfg: OutputConfig, schedule_log: bool,
                    report: bool) -> None:
    """Refuse output flags that would be ignored: each writes into --out, and the board
    reads every step."""
    if schedule_log and out is None:
        raise ValueError("--schedule-log writes the schedule table into the --out directory; "
                         "give --out DIR")
    if out is None and output_cfg.given():
        given = output_cfg.given()
        raise ValueError(f"{' and '.join(given)} only {'shape' if len(given) > 1 else 'shapes'}"
                         " what --out writes; "
                         "give --out DIR (a run without --out writes no tables)")
    if report and out is None:
        raise ValueError("--report writes report.html into the --out directory; give --out "
                         "DIR")
    if report and output_cfg.keep != 1:
        from chunksim.sim.records.records import steps_keep_label

        raise ValueError(f"--report reads every step; drop --steps "
                         f"{steps_keep_label(output_cfg.keep)}")


def refuse_foreign_run(out: Path | None) -> None:
    """--out may hold only a run's own files (they are replaced whole)."""
    from chunksim import atomic
    from chunksim.sim.run import OUTPUT_FILES

    foreign = atomic.foreign_entries(out, OUTPUT_FILES) if out is not None else []
    if foreign:
        raise ValueError(f"--out {out} holds {', '.join(foreign[:5])}, which a run's output "
                         "(summary.json, requests, steps, schedule tables) would replace; "
                         "give a new or empty directory")


def simulate_to(out: Path | None, workload, profile, run_cfg: RunConfig,
                output_cfg: OutputConfig, schedule_log: bool, report: bool):
    """Simulate `workload`; with `out`, write its summary and tables there as one set (the
    steps stream to a staged file as they are recorded) and, with `report`, the run board.
    (result, summary, names written)."""
    from chunksim import atomic
    from chunksim.progress import DelayedProgress
    from chunksim.sim.records.outputs import StepFileWriter
    from chunksim.sim.run import simulate, write_outputs

    # steps stream to --out as they are recorded; without --out nothing reads them
    keep = output_cfg.keep if out is not None else 0
    staged = (atomic.staging_file(out, "steps") if out is not None and keep else None)
    written: list[str] = []
    try:
        writer = StepFileWriter(staged, output_cfg.table_format) if staged is not None else None
        with DelayedProgress("simulating") as progress:
            result, summary = simulate(workload, profile, run_cfg, schedule_log,
                                       progress=progress, steps_keep=keep, steps_sink=writer)
        if writer is not None:
            writer.close()
        board = (_board(result, summary, run_cfg, staged, output_cfg)
                 if report and summary["completed"] and not too_long(summary) else None)
        if out is not None:
            written = write_outputs(out, result, summary, output_cfg.table_format,
                                    steps=bool(keep), steps_file=staged, extra=board)
    finally:
        if staged is not None:
            staged.unlink(missing_ok=True)
    return result, summary, written


def run_warnings(result, summary: dict, out: Path | None, output_cfg: OutputConfig,
                 report: bool) -> list[str]:
    """What the run warns about (rejections, then the summary's warnings); raises
    ValueError when there is no answer to print (nothing completed, or a board asked of
    a run too long to draw)."""
    from chunksim.sim.records.outputs import table_names
    from chunksim.sim.records.rejections import rejection_text
    from chunksim.sim.run import nothing_completed

    if report and too_long(summary):
        raise ValueError(too_long(summary) + (f"; the run's files are in {out}"))
    failed = nothing_completed(result, summary)
    if failed:
        where = (f" (records in {out}/{table_names(output_cfg.table_format)[0]})"
                 if out is not None else "")
        raise ValueError(failed + where)
    rejected = rejection_text(summary, result.rejected_examples)
    # the latencies cover only the requests that completed
    return ([rejected] if rejected else []) + list(summary["warnings"])


def _board(result, summary: dict, run_cfg: RunConfig, staged, output_cfg) -> dict[str, bytes]:
    """report.html and its figures: the run board (`reports.board`, `reports.run_board`)."""
    from chunksim.reports.board import STEP_FIELDS, build_board
    from chunksim.reports.run_board import render_board
    from chunksim.sim.records.outputs import OutputFormat
    from chunksim.sweep.slos import DEFAULT_SLOS

    steps = result.steps
    if staged is not None:  # streamed to the staged file while the run went
        import pandas as pd

        if output_cfg.table_format is OutputFormat.CSV:
            steps = pd.read_csv(staged, usecols=lambda c: c in STEP_FIELDS)
        else:
            import pyarrow.parquet as pq

            names = pq.read_schema(staged).names
            steps = pd.read_parquet(staged, columns=[c for c in STEP_FIELDS if c in names])
    slos = dict(run_cfg.slos_s) or {"ttft": DEFAULT_SLOS["p99_ttft_ms"] / 1000.0,
                                    "itl": DEFAULT_SLOS["p99_itl_ms"] / 1000.0}
    return render_board(build_board(result.requests, steps, summary, slos), summary)


def too_long(summary: dict) -> str | None:
    """Why the board cannot be drawn for this run (None: it can)."""
    from chunksim.reports.board import MAX_STEPS

    n = int(summary.get("steps") or 0)
    if n <= MAX_STEPS:
        return None
    return (f"--report reads every step into memory and this run has {n:,} (most "
            f"{MAX_STEPS:,}); shorten it (--duration, --num-requests) for the board")

"""Console table of one validation: predicted vs measured vs error, then the step check."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from chunksim.reports.console import make_console


def _fmt(x) -> str:
    return "—" if x is None else f"{x:,.3f}" if abs(x) < 100 else f"{x:,.1f}"


def print_validation(report: dict, console: Console | None = None) -> None:
    """Print `report` (validation.json) as a table."""
    console = console or make_console()
    t = Table(title=f"{report['policy']} · {report['workload']} · {report['profile_label']}")
    t.add_column("metric")
    t.add_column("predicted", justify="right")
    t.add_column("measured", justify="right")
    t.add_column("error %", justify="right")
    targets = set(report["target_keys"])
    for key, row in report["metrics"].items():
        err = row["error_pct"]
        shown = "—" if err is None else f"{err:+.1f}"
        if key in targets and err is not None and abs(err) > 5:
            shown = f"[bold red]{shown}[/]"
        t.add_row(key + (" *" if key in targets else ""), _fmt(row["predicted"]),
                  _fmt(row["measured"]), shown)
    console.print(t)
    se, oh = report["step_error"], report["live_overhead"]
    console.print(
        f"* target metrics: worst |error| {report['worst_abs_error_pct']:.1f} % "
        f"({report['worst_metric']})\n"
        f"step-level (table vs measured forward, {se.get('steps', 0)} steps): median "
        f"{se.get('median_pct', float('nan')):+.1f} %, P99 |error| "
        f"{se.get('p99_pct', float('nan')):.1f} %\n"
        f"per-step overhead used by the simulator: {report['step_overhead_s'] * 1e3:.3f} ms "
        f"({report['step_overhead_source']}; live P90 {oh.get('p90_ms', float('nan')):.3f} ms)")
    c = report["counts"]
    console.print("steps sim/live: {}/{} · preemptions: {}/{} · busy: {:.0%}/{:.0%}".format(
        c["steps"]["predicted"], c["steps"]["measured"], c["preemptions"]["predicted"],
        c["preemptions"]["measured"], c["busy_fraction"]["predicted"],
        c["busy_fraction"]["measured"]))
    ap = report.get("live_after_prefill") or {}
    if ap.get("pairs"):
        console.print(
            f"decode step right after a prefill (not in the table): "
            f"{ap['median_ratio']:.2f}x the decode steps after it "
            f"(+{ap['median_extra_forward_ms']:.3f} ms forward, "
            f"+{ap['median_extra_overhead_ms']:.3f} ms overhead; {ap['pairs']} pairs, "
            f"control {_fmt(ap['control_ratio'])}x)")
    rep = report.get("live_repeatability")
    if rep and rep["median_spread_pct"] is not None:
        console.print(
            f"live run-to-run ({rep['runs']} runs of the same workload): spread over the "
            f"targets median {rep['median_spread_pct']:.1f} %, worst "
            f"{rep['worst_spread_pct']:.1f} % ({rep['worst_spread_metric']}); the prediction "
            f"lies within the live runs' range for {len(rep['targets_in_range'])} of "
            f"{len(report['target_keys'])} targets", markup=False, highlight=False)
    for note in report.get("notes", []):
        console.print(f"note: {note}", markup=False, highlight=False)

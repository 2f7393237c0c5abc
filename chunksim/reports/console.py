"""Terminal output: a run summary as a rich table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

_METRICS = (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2EL", "e2el"),
            ("sched delay", "sched_delay"))


def summary_table(summary: dict, title: str | None = None) -> Table:
    """Latency percentiles (ms) and throughput of one run."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("metric (ms)")
    for col in ("mean", "median", "p90", "p99"):
        t.add_column(col, justify="right")
    for label, key in _METRICS:
        t.add_row(label, *(f"{summary[f'{c}_{key}_ms']:.2f}"
                           for c in ("mean", "median", "p90", "p99")))
    return t


def print_summary(summary: dict, console: Console | None = None) -> None:
    con = console or Console()
    params = ", ".join(f"{k}={v}" for k, v in summary.get("policy_params", {}).items())
    title = (f"{summary.get('policy')} ({params}) · workload {summary.get('workload')} · "
             f"profile {summary.get('profile_label', summary.get('profile', '?'))}")
    con.print(summary_table(summary, title))
    good = summary.get("request_goodput")
    good_s = f"  goodput {good:.2f} req/s" if good is not None else ""
    con.print(
        f"completed {summary['completed']}  rejected {summary['rejected']}  "
        f"duration {summary['duration']:.1f} s  throughput {summary['request_throughput']:.2f}"
        f" req/s, {summary['output_throughput']:.0f} out tok/s{good_s}\n"
        f"steps {summary['steps']}  busy {summary['busy_fraction']:.0%}  "
        f"max decode stall {summary['max_decode_stall_ms']:.1f} ms  preemptions "
        f"{summary['preemptions']}  extrapolated steps {summary['extrapolated_steps']}")
    for note in summary.get("workload_notes", []):
        con.print(f"[dim]note: {note}[/dim]")

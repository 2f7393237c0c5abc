"""Terminal output: a run summary as a rich table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from chunksim.sim.metrics.metric_registry import FAMILIES, shown
from chunksim.sim.records.rejections import reject_pct, worst

UNBOUNDED_WIDTH = 10_000
"""Console width off a terminal: wide enough that no table cell is cut to `…`."""


def make_console() -> Console:
    """rich's console on a terminal; off one (a pipe, a log file, CI) no width limit and
    no wrapping, so a phrase is never broken across lines and a table keeps every digit
    (it is as wide as its widest row)."""
    import sys

    # emoji off: a name like `:zap:` in a workload or class prints as written
    if sys.stdout.isatty():
        return Console(emoji=False)
    return Console(width=UNBOUNDED_WIDTH, soft_wrap=True, emoji=False)


def _natural(column) -> int:
    """Columns a table column needs so that no cell is cut: its widest cell, and its
    header's longest word (headers wrap between words)."""
    from rich.cells import cell_len

    cells = [cell_len(str(c)) for c in column._cells]
    header = max((cell_len(w) for w in str(column.header).split()), default=0)
    return max([header, *cells])


def fit_table(table: Table, width: int) -> list[Table]:
    """`table` as one or more tables no wider than `width` columns, none with a cell cut
    to `…`: when every column does not fit, its columns are split into consecutive groups,
    each repeating the first (the row's name); the title heads the first, the caption ends
    the last."""
    cols = table.columns
    need = [_natural(c) for c in cols]
    for c, n in zip(cols, need, strict=True):  # rich shrinks by ratio, past a cell's width
        c.min_width = max(c.min_width or 0, n)
    # 3 columns between cells (" ┃ "), and two rich keeps at the edges
    if sum(need) + 3 * (len(cols) - 1) + 2 <= width or len(cols) < 3:
        return [table]
    groups: list[list[int]] = [[]]
    used = need[0] + 2
    for i in range(1, len(cols)):
        if groups[-1] and used + 3 + need[i] > width:
            groups.append([])
            used = need[0] + 2
        groups[-1].append(i)
        used += 3 + need[i]
    out = []
    rows = table.row_count
    for g, idx in enumerate(groups):
        t = Table(title=table.title if g == 0 else None, title_justify=table.title_justify,
                  show_edge=table.show_edge, pad_edge=table.pad_edge,
                  caption=table.caption if g == len(groups) - 1 else None,
                  caption_justify=table.caption_justify, show_header=table.show_header)
        for i in (0, *idx):
            t.add_column(cols[i].header, justify=cols[i].justify, no_wrap=i == 0,
                         min_width=need[i])
        for r in range(rows):
            t.add_row(*(cols[i]._cells[r] for i in (0, *idx)))
        out.append(t)
    return out


def print_table(con: Console, table: Table) -> None:
    """Print `table` whole at the console's width (`fit_table`)."""
    for t in fit_table(table, con.width):
        con.print(t)


def summary_table(summary: dict, title: str | None = None) -> Table:
    """Latency percentiles (ms) and throughput of one run."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("metric (ms)")
    for col in ("mean", "median", "p90", "p99"):
        t.add_column(col, justify="right")
    for family in FAMILIES:
        t.add_row(family.label, *(f"{summary[family.key(c)]:.2f}"
                                  for c in ("mean", "median", "p90", "p99")))
    return t


def print_summary(summary: dict, console: Console | None = None) -> None:
    con = console or make_console()
    params = " ".join(f"{k}={v}" for k, v in summary.get("policy_params", {}).items()
                      if v not in (None, 0, {}, False) or k == "variant")
    con.print(f"[bold]{summary.get('policy')}[/bold] [dim]{params}[/dim]")
    defaults = summary.get("policy_defaults") or {}
    if defaults:
        chosen = ", ".join(f"{k}={d['value']}" for k, d in defaults.items())
        whys = sorted({d["why"] for d in defaults.values()})
        con.print(f"[dim]defaults chosen: {chosen} ({'; '.join(whys)})[/dim]")
    con.print(f"workload [bold]{summary.get('workload')}[/bold] · profile "
              f"{summary.get('profile_label', summary.get('profile', '?'))} "
              f"[dim]({str(summary.get('profile_sha256', ''))[:12]})[/dim]")
    print_table(con, summary_table(summary))
    con.print(run_lines(summary))
    hit = summary.get("prefix_cache_hit_rate")
    if hit is not None:
        host = summary.get("host_cache_hit_rate")
        tier = ""
        if host is not None:  # a CPU KV tier (--kv-offload-gib)
            wait = summary.get("mean_kv_load_wait_ms")
            tier = (f" (GPU), {host:.1%} from the CPU tier: {summary['kv_loads']} loads, "
                    f"{summary['kv_loaded_bytes'] / 2**30:.1f} GiB"
                    + (f", mean wait {wait:.1f} ms" if wait is not None else ""))
        con.print(f"prefix cache hit rate {hit:.1%}{tier}")
    mal = summary.get("spec_mean_acceptance_length")
    if mal is not None:  # vLLM's names and units (`vllm bench serve`)
        per = ", ".join(f"{r:.1%}" for r in summary.get("spec_position_acceptance", []))
        con.print(f"speculative decoding: acceptance rate {summary['spec_acceptance_rate']:.1%}"
                  f" (accepted / drafted tokens), acceptance length {mal:.2f} (tokens per "
                  "verified decode: its accepted drafts + the token sampled after them)"
                  + (f", per-position acceptance {per}" if per else ""))
    by_class = summary.get("by_class")
    if by_class:
        print_table(con, class_table(by_class))
    for note in summary.get("workload_notes", []):
        con.print(f"[dim]note: {note}[/dim]")


def run_lines(summary: dict) -> str:
    """The two lines of prose under `sim run`'s table: the run's counts, rates and steps
    (the `run_line` view of `sim.metrics.metric_registry`, each in its declared format; the worst
    stall to 0.1 ms, finer than the comparison table's column)."""
    (done, rejected, duration, reqs, toks, good, steps, busy, stall, preempt,
     extrapolated) = shown("run_line")

    def v(m) -> str:
        return m.fmt.format(summary[m.key])

    good_s = f"  goodput {v(good)} req/s" if summary.get(good.key) is not None else ""
    return (f"completed {v(done)}  rejected {v(rejected)}  duration {v(duration)} "
            f"{duration.unit}  throughput {v(reqs)} req/s, {v(toks)} out tok/s{good_s}\n"
            f"steps {v(steps)}  busy {v(busy)}  max decode stall "
            f"{summary[stall.key]:.1f} {stall.unit}  preemptions {v(preempt)}  "
            f"extrapolated steps {v(extrapolated)}")


def class_table(by_class: dict) -> Table:
    """Per request-class latency and goodput (the `console_classes` view of
    `sim.metrics.metric_registry`)."""
    t = Table(title="per request class", title_justify="left", show_edge=False,
              pad_edge=False)
    columns = shown("console_classes")
    t.add_column("class", justify="left")
    for m in columns:
        t.add_column(m.label, justify="right")
    for cls, s in by_class.items():  # None: the class completed nothing
        t.add_row(cls, *("-" if s.get(m.key) is None else m.fmt.format(s[m.key])
                         for m in columns))
    return t


def comparison_table(labels: list[str], summaries: list[dict], title: str | None = None,
                     stats: list | None = None) -> Table:
    """One row per configuration: headline latencies (ms) and throughput, 80 columns wide
    (with several seeds, the medians; the report has the ranges)."""
    from chunksim.reports.tables import fmt

    multi = stats is not None and stats[0].n > 1
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False,
              caption="latencies in ms; worst stall = longest ITL gap; goodput needs "
              "--goodput"
              + (f"; medians over {stats[0].n} seeds (ranges: report, comparison.json)"
                 if multi else ""),
              caption_justify="left")
    t.add_column("configuration", no_wrap=True)
    columns = shown("console")  # `sim.metrics.metric_registry`
    for m in columns:
        t.add_column(m.label, justify="right")
    for label, s in zip(labels, summaries, strict=True):
        t.add_row(label, *(fmt(s.get(m.key), m.fmt) for m in columns))
    return t


def print_comparison(configs: list, summaries: list[dict], console: Console | None = None,
                     stats: list | None = None) -> None:
    con = console or make_console()
    s0 = summaries[0]
    print_table(con, comparison_table(
        [c.label for c in configs], summaries,
        f"workload {s0.get('workload')} · profile {s0.get('profile_label', '?')}", stats))


def print_verdict(verdict, capacity_searched: bool, trace: bool = False,
                  console: Console | None = None) -> None:
    """The page's verdict box as plain lines."""
    from chunksim.reports.verdict_text import verdict_lines

    con = console or make_console()
    for line in verdict_lines(verdict, capacity_searched, trace):
        con.print(line.replace("**", "").replace("`", ""), markup=False, highlight=False)


def print_capacity(entries: list, recommended, slos: dict[str, float],
                   console: Console | None = None) -> None:
    """Max sustainable rate per configuration and the metrics at that rate."""
    con = console or make_console()
    slo_txt = ", ".join(f"{k} ≤ {v:g}" for k, v in slos.items())
    t = Table(title=f"capacity under {slo_txt}", title_justify="left", show_edge=False,
              pad_edge=False)
    offered = any(e.served_at_max for e in entries)  # rejections at a capacity
    for col in ("configuration", "max rate req/s" + (" offered" if offered else ""),
                *(("served req/s",) if offered else ()), "P99 ITL ms", "P99 TTFT ms",
                "med sched ms", "rejected %", "probes"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for e in entries:
        s = e.at_max
        star = " ★" if recommended is not None and e.config == recommended.config else ""
        rate = ("≥" if e.capped else "") + f"{e.max_rate:.3g}"
        served = ([f"{e.served_at_max[0]:.3g}" if e.served_at_max else rate]
                  if offered else [])
        cells = ([f"{s['p99_itl_ms']:.1f}", f"{s['p99_ttft_ms']:.1f}",
                  f"{s['median_sched_delay_ms']:.1f}"] if s else ["–", "–", "–"])
        # at the capacity, or (none met) the lowest probe: why it failed there
        shown = e.probe_at_max or (e.probes[0] if e.probes else None)
        rej = (f"{reject_pct(worst(shown.runs)):.3g}" if shown and shown.runs
               else "–")
        t.add_row(e.config.label + star, rate, *served, *cells, rej, str(len(e.probes)))
    print_table(con, t)
    if recommended is None:
        con.print("[red]no configuration met the SLOs at any probed rate[/red]")
    else:
        sv = recommended.served_at_max
        con.print(f"recommended: [bold]{recommended.config.label}[/bold] "
                  f"({recommended.max_rate:.3g} req/s"
                  + (f" offered, {sv[0]:.3g} served, {sv[1]:.3g} % rejected)" if sv else ")"))


def print_splits(rows: list[dict], gpus: int, console: Console | None = None) -> None:
    """`sim capacity --gpus G`: every split of the G GPUs, best first (`gpus_io.split_rows`)."""
    con = console or make_console()
    t = Table(title=f"{gpus} GPUs: splits ranked by capacity", title_justify="left",
              show_edge=False, pad_edge=False)
    for col in ("#", "configuration", "max rate req/s", "req/s per GPU", "P99 TTFT ms",
                "P99 ITL ms"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for r in rows:
        rate = ("≥" if r["capped"] else "") + f"{r['max_rate']:.3g}" + (
            f" offered ({r['served_rate']:.3g} served)"
            if r.get("served_rate") is not None else "")
        cells = ([f"{r['p99_ttft_ms']:.1f}", f"{r['p99_itl_ms']:.1f}"]
                 if r["p99_ttft_ms"] is not None else ["–", "–"])
        t.add_row(str(r["rank"]), r["config"], rate, f"{r['max_rate_per_gpu']:.3g}", *cells)
    print_table(con, t)
    if rows and rows[0]["max_rate"] > 0:
        con.print(f"best split of {gpus} GPUs: [bold]{rows[0]['config']}[/bold] "
                  f"({rows[0]['max_rate']:.3g} req/s)")
    else:
        con.print(f"[red]no split of {gpus} GPUs met the SLOs at any probed rate[/red]")


def print_gpu_search(search, slos: dict[str, float], console: Console | None = None) -> None:
    """`sim capacity --target-rate R`: each GPU count judged, and the fewest that meet R."""
    con = console or make_console()
    slo_txt = ", ".join(f"{k} ≤ {v:g}" for k, v in slos.items())
    t = Table(title=f"GPUs for {search.target:g} req/s under {slo_txt}", title_justify="left",
              show_edge=False, pad_edge=False)
    for col in ("GPUs", "meets", "configurations meeting", "best", "P99 TTFT ms",
                "P99 ITL ms"):
        t.add_column(col, justify="left" if col in ("best", "meets") else "right")
    for g, trial in sorted(search.trials.items()):
        best = trial.meeting[0] if trial.meeting else None
        s = best.at_max if best else None
        t.add_row(str(g), "yes" if trial.met else "no",
                  f"{len(trial.meeting)}/{len(trial.entries)}",
                  best.config.label if best else "–",
                  f"{s['p99_ttft_ms']:.1f}" if s else "–", f"{s['p99_itl_ms']:.1f}" if s else "–")
    print_table(con, t)
    if search.answer is None:
        con.print(f"[red]no split of up to {search.max_gpus} GPUs meets {search.target:g} "
                  "req/s under the SLOs[/red] (raise --max-gpus, or relax --slo)")
    else:
        best = search.trials[search.answer].meeting[0]
        miss = search.answer - 1
        con.print(f"fewest GPUs: [bold]{search.answer}[/bold], as {best.config.label}"
                  + (f" ({miss} GPU{'s' if miss > 1 else ''} missed the target)" if miss
                     else ""))

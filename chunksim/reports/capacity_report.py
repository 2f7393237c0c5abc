"""`sim capacity`'s page: the verdict, the capacities over seeds, the latency-vs-rate knee
with the SLO lines, the capacity bars, and every probe. `sim compare --slo` reuses the
table and figures."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from chunksim import atomic
from chunksim.latency.profile import Profile
from chunksim.reports import style
from chunksim.reports.capacity_plot import metric_name
from chunksim.reports.document import Document
from chunksim.reports.provenance import (
    closing_sections,
    profile_banner,
    run_facts,
)
from chunksim.reports.tables import fmt
from chunksim.reports.verdict_text import num, ranged, verdict_lines
from chunksim.sim.records.rejections import reject_pct, worst
from chunksim.sweep.capacity import CapacityEntry
from chunksim.sweep.verdict import Verdict

CAPACITY_STEMS = ("capacity_knee", "capacity_bars")


def write_capacity_plots(out_dir: str | Path, entries: list[CapacityEntry],
                         best: CapacityEntry | None, slos: dict[str, float], profile: Profile,
                         formats: tuple[str, ...] = ("png", "svg"),
                         left_out: dict[str, str] | None = None) -> list[Path]:
    """The knee (SLO metrics vs rate, SLO lines) and the capacity bars (one that cannot
    be drawn is left out, its reason in `left_out`)."""
    from chunksim.reports.capacity_plot import capacity_bars_figure, knee_figure

    workload = next((p.summary.get("workload") for e in entries for p in e.probes), "?")
    # the probe workloads differ only in rate: name the family, not one rate's name
    name = re.sub(r"-[0-9.e+]+rps", "", str(workload)) + " (rate varied)"
    title = style.title(name, profile.label)
    left_out = {} if left_out is None else left_out
    return style.save_all({
        "capacity_knee": lambda: knee_figure(entries, slos, title),
        "capacity_bars": lambda: capacity_bars_figure(entries, best, title),
    }, Path(out_dir), formats, left_out)


def capacity_rows(entries: Sequence[CapacityEntry], slos: dict[str, float],
                  n_seeds: int) -> tuple[list[str], list[list[str]]]:
    """One row per configuration: capacity on the median seed, its range over seeds, the
    SLO'd metrics at that rate, and how many rates were probed."""
    keys = list(slos)
    offered = any(e.served_at_max for e in entries)  # a capacity with rejections at it
    headers = (["configuration", "capacity req/s" + (" (offered)" if offered else "")]
               + (["served req/s"] if offered else []) + ["per seed req/s"]
               + [f"{metric_name(k)} ms at cap." for k in keys]
               + ["rejected %", "probes", "note"])
    rows = []
    for e in entries:
        lo, hi = e.capacity_range
        cap = ("≥" if e.capped else "") + num(e.max_rate)
        p = e.probe_at_max
        cells = []
        for k in keys:
            if p is None:
                cells.append("–")
                continue
            vals = [s.get(k) for s in p.runs if isinstance(s.get(k), (int, float))]
            cells.append(ranged(p.summary.get(k, float("nan")), min(vals), max(vals), "",
                                n_seeds) if vals else fmt(p.summary.get(k), "{:.1f}"))
        note = ("rates below it missed: " + ", ".join(num(r) for r in e.non_monotone)
                if e.non_monotone else "")
        if e.rejected_below is not None:
            note = (f"not probed below {num(e.rejected_below)} req/s: a seed rejects "
                    "requests on arrival at every rate")
        per_seed = ", ".join(num(c) for c in e.seed_capacities())
        # the worst seed at the capacity, or (none met) at the lowest rate probed
        shown = p or (e.probes[0] if e.probes else None)
        rej = num(reject_pct(worst(shown.runs))) if shown and shown.runs else "–"
        served = ([num(e.served_at_max[0]) if e.served_at_max else cap] if offered else [])
        rows.append([e.config.label, cap, *served,
                     per_seed if n_seeds > 1 else num(lo if lo else hi)]
                    + cells + [rej, str(len(e.probes)), note])
    return headers, rows


def probe_rows(entries: Sequence[CapacityEntry], slos: dict[str, float]) -> list:
    """Every probe, grouped by configuration: rate, verdict, seeds met, the SLO'd metrics."""
    rows: list = []
    for e in entries:
        rows.append(f"{e.config.label}")
        for p in e.probes:
            ran = [ok for ok in p.seeds_met if ok is not None]
            seeds = f"{sum(ran)}/{len(ran)}" if ran else "–"
            verdict = "met" if p.met else (
                "missed (stopped early)" if p.summary.get("stopped") else "missed")
            rows.append([num(p.rate), verdict, seeds]
                        + [fmt(p.summary.get(k), "{:.1f}") for k in slos]
                        + [num(max((reject_pct(s) for s in p.runs), default=0.0))])
    return rows


def capacity_section(doc: Document, entries: Sequence[CapacityEntry], slos: dict[str, float],
                     n_seeds: int, window: str | None, probes: bool = True) -> None:
    """The capacity table, its explanation, both figures and (optionally) every probe."""
    doc.heading("Capacity under the SLOs")
    headers, rows = capacity_rows(entries, slos, n_seeds)
    doc.table(headers, rows)
    doc.para("Capacity = the highest probed rate at which every SLO holds for the median "
             "seed (per bound, the median over seeds of its metric); where requests were "
             "rejected at it (--max-reject-pct), it is the rate offered, and the rate served "
             "(requests completed per second) is beside it. Per seed = the highest "
             "probed rate that seed alone met. The search doubles, bisects, then probes 1.15× "
             "and 1.4× above its bracket: a pass there resumes the search."
             + (f" Probe window: {window}." if window else ""))
    doc.figure("capacity_knee.png", "Latency vs request rate per configuration (median seed), "
               "with the SLO bounds dashed: filled = met every SLO, hollow = missed one, "
               "★ = capacity.")
    doc.figure("capacity_bars.png", "Capacity per configuration (★ = recommended).")
    if probes:
        doc.heading("Every probe")
        doc.table(["rate req/s", "median seed", "seeds met"]
                  + [f"{metric_name(k)} ms" for k in slos] + ["rejected %"],
                  probe_rows(entries, slos))


def write_capacity_report(out_dir: str | Path, entries: list[CapacityEntry],
                          verdict: Verdict, profile: Profile, window: str | None,
                          workload_name: str, command: str | None = None,
                          formats: tuple[str, ...] = ("png", "svg"),
                          trace: bool = False,
                          splits: list[dict] | None = None, tail=None) -> list[Path]:
    """The figures and report.{md,html} of `sim capacity`; returns the paths written.
    `splits` (`sweep.gpus_io.split_rows`, `--gpus`) adds the ranked splits; `tail(doc)`
    adds the deployment and cost after the verdict."""
    out = Path(out_dir)
    by_label = {e.config.label: e for e in entries}
    best = by_label.get(verdict.recommended.label) if verdict.recommended else None
    left_out: dict[str, str] = {}
    paths = write_capacity_plots(out, entries, best, verdict.slos, profile, formats, left_out)
    doc = Document(f"chunksim capacity — {style.title(workload_name, profile.label)}",
                   left_out=left_out)
    banner = profile_banner(profile.path, profile.provenance)
    if banner:
        doc.banner(banner)
    doc.verdict("Verdict: which configuration to run",
                verdict_lines(verdict, capacity_searched=True, trace=trace))
    doc.meta(run_facts())
    doc.para("How many requests per second can each prefill policy and chunk size sustain "
             "under the SLOs? Each configuration's rate is searched separately; every probe "
             "replays the workload at that rate under every seed.")
    if splits:
        _splits_section(doc, splits)
    capacity_section(doc, entries, verdict.slos, len(verdict.seeds), window)
    closing_sections(doc, profile, command)
    if tail is not None:
        from chunksim.reports.deploy_text import insert_after_verdict

        insert_after_verdict(doc, tail)
    md, page = out / "report.md", out / "report.html"
    atomic.write_text(md, doc.to_markdown())
    atomic.write_text(page, doc.to_html(out))
    return paths + [md, page]


def _splits_section(doc: Document, rows: list[dict]) -> None:
    """`--gpus`: every split of the GPUs, best first."""
    gpus = rows[0]["gpus"]
    doc.heading(f"Splits of {gpus} GPUs, ranked")

    def ms(v):
        return "–" if v is None else f"{v:.1f}"

    doc.table(["configuration (best first)", "max rate req/s", "req/s per GPU",
               "P99 TTFT ms", "P99 ITL ms"],
              [[r["config"], ("≥" if r["capped"] else "") + f"{r['max_rate']:.3g}"
                + (f" offered ({r['served_rate']:.3g} served)"
                   if r.get("served_rate") is not None else ""),
                f"{r['max_rate_per_gpu']:.3g}", ms(r["p99_ttft_ms"]), ms(r["p99_itl_ms"])]
               for r in rows])
    doc.para(f"{gpus} colocated replicas against every prefill:decode split of the same "
             "GPUs, each under every policy and chunk size of the grid; ranked by capacity, "
             "ties by P99 TTFT at capacity. Metrics are the median seed's at the capacity. "
             "Also in `splits.csv`.")

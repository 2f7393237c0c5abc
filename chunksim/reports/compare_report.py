"""`sim compare`'s report: every figure (PNG, optionally SVG), report.md and a
self-contained report.html. A pure function of the runs (every configuration under every
seed), the verdict and the profile.

The page opens with the verdict (recommendation, runner-up, what each gives up, and
whether the seeds can tell them apart), then the tables as median [min–max] over seeds,
a row group per request class, and the figures that show something at this load."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunksim import atomic
from chunksim.latency.profile import Profile
from chunksim.reports import style
from chunksim.reports.document import Document
from chunksim.reports.provenance import (
    closing_sections,
    profile_banner,
    run_facts,
)
from chunksim.reports.tables import SEED_COLUMNS, class_rows, seed_rows
from chunksim.reports.verdict_text import verdict_lines
from chunksim.sweep.capacity import CapacityEntry
from chunksim.sweep.compare import Comparison
from chunksim.sweep.configs import Config
from chunksim.sweep.verdict import Verdict, swamped

FIGURE_STEMS = ("latency_cdf", "tradeoff", "step_timeline", "throughput", "replica_load",
                "latency_table")
DRAW_ORDER = ("latency_table", "step_timeline", "tradeoff", "replica_load", "throughput",
              "latency_cdf")
"""The order the figures are taken in to be drawn (`style.save_all`): those with the most
artists first (the heatmap's annotated cells, the timeline's panels of bars), so that the
processes drawing them finish together."""
SATURATION_SPREAD = 0.02
"""Throughputs within 2 % of each other: every configuration kept up with the load."""


def timeline_configs(configs: Sequence[Config], chunk: int | None = None) -> list[Config]:
    """Unchunked configurations, plus each chunked policy at `chunk` (default: the median
    chunk size compared), side by side in the step timeline."""
    chunks = sorted({c.chunk for c in configs if c.chunk is not None})
    if chunk is None and chunks:
        chunk = chunks[(len(chunks) - 1) // 2]
    elif chunk is not None and chunk not in chunks:
        raise ValueError(f"--timeline-chunk {chunk} is not among --chunks {chunks}")
    return [c for c in configs if c.chunk is None or c.chunk == chunk]


def served_steps(requests, steps):
    """The steps of the replica that served the longest prompt (its prefill instance under
    P/D): a fleet's timeline shows that engine, not every replica's steps overlaid."""
    from chunksim.reports.timeline import longest_request

    col = next((c for c in ("replica", "prefill_replica") if c in requests.columns), None)
    if col is None or "replica" not in steps.columns:
        return steps
    r = int(requests[col].iloc[longest_request(requests)])
    return steps[steps["replica"].to_numpy() == r]


def saturated(summaries: Sequence[dict]) -> bool:
    """Whether some configuration fell behind the offered load (request throughputs differ
    by more than `SATURATION_SPREAD`); below saturation they all equal the arrival rate."""
    tp = [s.get("request_throughput") or 0.0 for s in summaries]
    if not tp or max(tp) == 0:
        return False
    return min(tp) == 0 or max(tp) / min(tp) > 1 + SATURATION_SPREAD


def write_compare_report(out_dir: str | Path, comp: Comparison, profile: Profile,
                         verdict: Verdict, capacity: list[CapacityEntry] | None = None,
                         command: str | None = None, timeline_chunk: int | None = None,
                         formats: tuple[str, ...] = ("png", "svg"), window: str | None = None,
                         trace: bool = False, tail=None) -> list[Path]:
    """Write the figures and report.{md,html} into `out_dir`; returns the paths written."""
    import pandas as pd

    from chunksim.reports.cdf import cdf_figure
    from chunksim.reports.heatmap import heatmap_figure, step_table
    from chunksim.reports.throughput import throughput_figure
    from chunksim.reports.timeline import timeline_figure
    from chunksim.reports.tradeoff import tradeoff_figure

    out = Path(out_dir)
    configs, summaries = comp.configs, comp.summaries
    workload = str(summaries[0].get("workload", "?"))
    title = style.title(workload, profile.label)
    shown = timeline_configs(configs, timeline_chunk)
    pick = [list(configs).index(c) for c in shown]
    records = comp.records
    # the CDFs pool every seed: more samples, a deeper tail the axis may claim
    pooled_req = [pd.concat([r.requests for r in runs if r is not None], ignore_index=True)
                  for runs in comp.run_records]
    pooled_itl = [np.concatenate([r.itl_s for r in runs if r is not None])
                  for runs in comp.run_records]
    steps_all = [pd.concat([r.steps for r in runs if r is not None], ignore_index=True)
                 for runs in comp.run_records]
    figs = {
        "latency_cdf": lambda: cdf_figure(configs, pooled_req, pooled_itl, title),
        "tradeoff": lambda: tradeoff_figure(configs, summaries, title, stats=comp.stats),
        "step_timeline": lambda: timeline_figure(
            shown, [records[i].requests for i in pick],
            [served_steps(records[i].requests, records[i].steps) for i in pick], title),
        "latency_table": lambda: heatmap_figure(step_table(profile), profile.label,
                                                steps=steps_all),
    }
    sat = saturated(summaries)
    if sat:
        figs["throughput"] = lambda: throughput_figure(configs, summaries, title)
    fleets = any(c.fleet is not None for c in configs)
    if fleets:
        from chunksim.reports.replica_load import replica_load, replica_load_figure

        figs["replica_load"] = lambda: replica_load_figure(
            configs, [replica_load(r) for r in records], title)
    paths: list[Path] = []
    left_out: dict[str, str] = {}
    paths += style.save_all({stem: figs[stem] for stem in FIGURE_STEMS if stem in figs},
                            out, formats, left_out, order=DRAW_ORDER)
    if capacity:
        from chunksim.reports.capacity_report import write_capacity_plots

        by_label = {e.config.label: e for e in capacity}
        best = by_label.get(verdict.recommended.label) if verdict.recommended else None
        paths += write_capacity_plots(out, capacity, best, verdict.slos, profile, formats,
                                      left_out)
    doc = _document(comp, verdict, capacity, profile, title, shown, command, sat, window,
                    trace, fleets)
    if tail is not None:  # the deployment and cost that end the verdict
        from chunksim.reports.deploy_text import insert_after_verdict

        insert_after_verdict(doc, tail)
    doc.left_out.update(left_out)
    md, page = out / "report.md", out / "report.html"
    atomic.write_text(md, doc.to_markdown())
    atomic.write_text(page, doc.to_html(out))
    return paths + [md, page]


def _findings(configs: Sequence[Config], summaries: Sequence[dict], shown) -> list[str]:
    by_label = {c.label: s for c, s in zip(configs, summaries, strict=True)}
    stalls = ", ".join(f"{c.label} {by_label[c.label]['max_decode_stall_ms']:.0f} ms"
                       for c in shown)
    items = [f"Longest decode stall (the longest gap any request saw between two tokens; "
             f"median seed): {stalls}."]
    extrap = sum(s.get("extrapolated_steps", 0) for s in summaries)
    if extrap:
        items.append(f"{extrap:.0f} steps (median seed, over all configurations) were looked "
                     "up outside the measured grid (extrapolated; marked on the latency "
                     "table): treat those configurations' numbers with care.")
    rejected = max(s.get("rejected", 0) for s in summaries)
    if rejected:
        items.append(f"Up to {rejected:.0f} requests were rejected in a run (see `rejected` in "
                     "comparison.csv): they are excluded from latency metrics.")
    return items


def _document(comp: Comparison, verdict: Verdict, capacity, profile: Profile, title: str,
              shown, command: str | None, sat: bool, window: str | None,
              trace: bool, fleets: bool = False) -> Document:
    configs, summaries, stats = comp.configs, comp.summaries, comp.stats
    labels = [c.label for c in configs]
    n = len(comp.seeds)
    s0 = summaries[0]
    doc = Document(f"chunksim comparison — {title}")
    banner = profile_banner(profile.path, profile.provenance)
    if banner:
        doc.banner(banner)
    doc.verdict("Verdict: which configuration to run",
                verdict_lines(verdict, capacity_searched=bool(capacity), trace=trace))
    doc.meta(run_facts())
    doc.para("Which prefill scheduling policy and chunk size should I run? One workload "
             "replayed under every configuration below (the same requests for each, per "
             "seed), on a measured latency table. `chunk` = prefill tokens per request per "
             "step (Sarathi 2023); `budget` = tokens per step including decodes (vLLM V1 / "
             "Sarathi-Serve); `whole` = unchunked prefill (vLLM V0).")
    doc.heading("Results" + (f" (median [min–max] over {n} seeds)" if n > 1 else " (one seed)"))
    marked = [k for k, _, _ in SEED_COLUMNS if n > 1 and swamped(stats, k)]
    headers, rows = seed_rows(labels, stats, marked=marked)
    doc.table(headers, rows)
    note = ("Every summary metric of every configuration and seed is in `comparison.csv` / "
            "`comparison.json`.")
    if marked:
        note = ("† The seed-to-seed spread swamps the differences between configurations on "
                "this metric (the ranges of most pairs overlap): do not rank on it. " + note)
    doc.para(note)
    cheaders, crows = class_rows(labels, stats)
    if crows:
        doc.heading("By request class")
        doc.table(cheaders, crows)
        doc.para("One row group per request class: a class with one request (the long prompt) "
                 "shows that request's own TTFT, the cost of chunking it.")
    if capacity:
        from chunksim.reports.capacity_report import capacity_section

        capacity_section(doc, capacity, verdict.slos, n, window, probes=False)
    doc.heading("Findings")
    doc.bullets(_findings(configs, summaries, shown))
    doc.heading("Figures")
    shown_txt = ", ".join(c.label for c in shown)
    doc.figure("step_timeline.png",
               f"Steps around the longest prompt's arrival ({shown_txt}; seed {comp.seeds[0]}):"
               " bar width = step duration; grey = decode tokens, colour = prefill tokens. A "
               "tall, wide step is a decode stall: every running request waits for it."
               + (" A fleet shows the replica that served the longest prompt (its prefill "
                  "instance under P/D)." if fleets else ""))
    doc.figure("latency_cdf.png", "CDFs of TTFT (per request) and ITL (pooled gaps), every "
               f"seed pooled ({n} run{'s' if n > 1 else ''} per configuration); log x, logit "
               "y down to what the sample supports; the curves run to the slowest request.")
    doc.figure("tradeoff.png", "P99 ITL (left) and the worst single stall (right) vs P99 "
               "TTFT across chunk sizes, one colour per policy, one marker per chunk size; "
               "points are medians, whiskers the range over seeds; labels give the chunk "
               "size and the change vs `whole`. Down-left is better.")
    if fleets:
        doc.figure("replica_load.png", "Per replica (seed "
                   f"{comp.seeds[0]}): the fraction of the run it spent in steps, and the "
                   "requests routed to it; colour = pool (colocated replica, P/D prefill, "
                   "P/D decode). An uneven row is a router that herds or a pool that is "
                   "the bottleneck.")
    if sat:
        doc.figure("throughput.png", "Request throughput (and goodput, if SLOs were given) "
                   "and token throughput per configuration.")
    else:
        tp = [s["request_throughput"] for s in summaries]
        doc.para(f"No throughput chart: every configuration completed {min(tp):.2f}–"
                 f"{max(tp):.2f} req/s (within {SATURATION_SPREAD:.0%}), so at this load none "
                 "is saturated" + (" (the capacity search above finds where each one is)."
                                   if capacity else "; `--slo` adds a capacity search that "
                                   "finds where each one saturates."))
    doc.figure("latency_table.png", "The measured latency table: median step time over "
               "chunk_len × decode_count at a few kv_len (blank = not measured; ○ = a cell "
               "the runs used, × = a step looked up beyond the measured grid).")
    doc.heading("Workload")
    doc.table(["field", "value"], [["name", str(s0.get("workload"))],
                                   ["params", json.dumps(s0.get("workload_params", {}))],
                                   ["seeds", ", ".join(map(str, comp.seeds))],
                                   ["completed / rejected (median seed)",
                                    f"{s0.get('completed')} / {s0.get('rejected')}"]]
              + [["note", n_] for n_ in s0.get("workload_notes", [])], numeric=False)
    closing_sections(doc, profile, command)
    return doc

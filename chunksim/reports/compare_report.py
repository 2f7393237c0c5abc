"""`sim compare`'s report: every figure (PNG, optionally SVG), report.md and a
self-contained report.html. A pure function of the records, summaries and profile."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from chunksim import atomic
from chunksim.latency.profile import Profile
from chunksim.reports import style
from chunksim.reports.definitions import DEFINITIONS
from chunksim.reports.document import Document
from chunksim.reports.provenance import provenance_rows
from chunksim.reports.tables import headline_rows
from chunksim.sim.engine import SimResult
from chunksim.sweep.configs import Config

FIGURE_STEMS = ("latency_cdf", "tradeoff", "step_timeline", "throughput", "latency_table")


def timeline_configs(configs: Sequence[Config], chunk: int | None = None) -> list[Config]:
    """Unchunked configurations, plus each chunked policy at `chunk` (default: the median
    chunk size compared), side by side in the step timeline."""
    chunks = sorted({c.chunk for c in configs if c.chunk is not None})
    if chunk is None and chunks:
        chunk = chunks[(len(chunks) - 1) // 2]
    elif chunk is not None and chunk not in chunks:
        raise ValueError(f"--timeline-chunk {chunk} is not among --chunks {chunks}")
    return [c for c in configs if c.chunk is None or c.chunk == chunk]


def write_compare_report(out_dir: str | Path, configs: Sequence[Config],
                         summaries: Sequence[dict], records: Sequence[SimResult],
                         profile: Profile, command: str | None = None,
                         timeline_chunk: int | None = None,
                         formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """Write the figures and report.{md,html} into `out_dir`; returns the paths written."""
    from chunksim.reports.cdf import cdf_figure
    from chunksim.reports.heatmap import heatmap_figure, step_table
    from chunksim.reports.throughput import throughput_figure
    from chunksim.reports.timeline import timeline_figure
    from chunksim.reports.tradeoff import tradeoff_figure

    out = Path(out_dir)
    workload = str(summaries[0].get("workload", "?"))
    title = style.title(workload, profile.label)
    shown = timeline_configs(configs, timeline_chunk)
    pick = [list(configs).index(c) for c in shown]
    figs = {
        "latency_cdf": cdf_figure(configs, [r.requests for r in records],
                                  [r.itl_s for r in records], title),
        "tradeoff": tradeoff_figure(configs, summaries, title),
        "step_timeline": timeline_figure(shown, [records[i].requests for i in pick],
                                         [records[i].steps for i in pick], title),
        "throughput": throughput_figure(configs, summaries, title),
        "latency_table": heatmap_figure(step_table(profile), profile.label),
    }
    paths: list[Path] = []
    for stem in FIGURE_STEMS:
        paths += style.save(figs[stem], out, stem, formats)
    doc = _document(configs, summaries, records, profile, title, shown, command)
    md, page = out / "report.md", out / "report.html"
    atomic.write_text(md, doc.to_markdown())
    atomic.write_text(page, doc.to_html(out))
    return paths + [md, page]


def _best(configs: Sequence[Config], summaries: Sequence[dict], key: str,
          high: bool = False) -> str:
    """The best configuration(s) on `key`; values within 0.2 % of the best count as tied."""
    vals = [(s[key], c) for c, s in zip(configs, summaries, strict=True)
            if s.get(key) is not None]
    if not vals:
        return "–"
    v = (max if high else min)(x for x, _ in vals)
    tied = [c.label for x, c in vals if abs(x - v) <= 0.002 * abs(v)]
    num = f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    if len(tied) == len(vals) > 1:
        return f"all configurations alike ({num})"
    return ", ".join(f"**{t}**" for t in tied) + f" ({num})"


def _findings(configs: Sequence[Config], summaries: Sequence[dict], shown) -> list[str]:
    best = lambda key, high=False: _best(configs, summaries, key, high)  # noqa: E731
    by_label = {c.label: s for c, s in zip(configs, summaries, strict=True)}
    stalls = ", ".join(f"{c.label} {by_label[c.label]['max_decode_stall_ms']:.0f} ms"
                       for c in shown)
    items = [f"Longest decode stall (the longest gap any request saw between two tokens): "
             f"{stalls}.",
             f"Lowest P99 ITL (ms): {best('p99_itl_ms')}; lowest P99 TTFT (ms): "
             f"{best('p99_ttft_ms')}; shortest worst stall (ms): "
             f"{best('max_decode_stall_ms')}.",
             f"Highest output throughput (tok/s): {best('output_throughput', True)}."]
    if any(s.get("request_goodput") is not None for s in summaries):
        slos = summaries[0].get("goodput_slos_ms") or {}
        slo_txt = ", ".join(f"{k} ≤ {v:g} ms" for k, v in slos.items())
        items.append(f"Highest goodput ({slo_txt}; req/s): {best('request_goodput', True)}.")
    extrap = sum(s.get("extrapolated_steps", 0) for s in summaries)
    if extrap:
        items.append(f"{extrap} steps over all runs looked up outside the measured grid "
                     "(extrapolated): treat those configurations' numbers with care.")
    rejected = max(s.get("rejected", 0) for s in summaries)
    if rejected:
        items.append(f"Up to {rejected} requests were rejected in a run (see `rejected` in "
                     "comparison.csv): they are excluded from latency metrics.")
    return items


def _document(configs, summaries, records, profile: Profile, title: str, shown,
              command: str | None) -> Document:
    s0 = summaries[0]
    doc = Document(f"chunksim comparison — {title}")
    doc.para("Which prefill scheduling policy and chunk size should I run? One workload "
             "replayed under every configuration below (the same requests for each), on a "
             "measured latency table. `chunk` = prefill tokens per request per step "
             "(Sarathi 2023); `budget` = tokens per step including decodes (vLLM V1 / "
             "Sarathi-Serve); `whole` = unchunked prefill (vLLM V0).")
    doc.heading("Findings")
    doc.bullets(_findings(configs, summaries, shown))
    doc.heading("Results")
    headers, rows = headline_rows([c.label for c in configs], summaries)
    doc.table(headers, rows)
    doc.para("Every summary metric of every configuration is in `comparison.csv` / "
             "`comparison.json`.")
    doc.heading("Figures")
    shown_txt = ", ".join(c.label for c in shown)
    doc.figure("step_timeline.png",
               f"Steps around the longest prompt's arrival ({shown_txt}): bar width = step "
               "duration; grey = decode tokens, colour = prefill tokens. A tall, wide step "
               "is a decode stall: every running request waits for it.")
    doc.figure("latency_cdf.png", "CDFs of TTFT (per request) and ITL (pooled gaps); log "
               "x, logit y so the tail is visible; the dotted line is P99.")
    doc.figure("tradeoff.png", "P99 ITL (left) and the worst single stall (right) vs P99 "
               "TTFT across chunk sizes, one line per policy (points labelled with the chunk "
               "size). Down-left is better. A pooled P99 can hide one long stall that hits "
               "few gaps; the right panel shows it.")
    doc.figure("throughput.png", "Request throughput (and goodput, if SLOs were given) "
               "and token throughput per configuration.")
    doc.figure("latency_table.png", "The measured latency table: median step time over "
               "chunk_len × decode_count at a few kv_len (blank = not measured).")
    doc.heading("Workload")
    doc.table(["field", "value"], [["name", str(s0.get("workload"))],
                                   ["params", json.dumps(s0.get("workload_params", {}))],
                                   ["completed / rejected",
                                    f"{s0.get('completed')} / {s0.get('rejected')}"]]
              + [["note", n] for n in s0.get("workload_notes", [])], numeric=False)
    doc.heading("Profile provenance")
    doc.table(["field", "value"], provenance_rows(profile.label, profile.path, profile.sha256,
                                                  profile.provenance), numeric=False)
    doc.heading("Metric definitions")
    doc.definitions(list(DEFINITIONS))
    if command:
        doc.heading("Reproduce")
        doc.code(command)
    return doc

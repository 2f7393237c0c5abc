"""Human tables for reports: the headline columns of a comparison, as Markdown or HTML.

With several seeds a cell is the median with the range, `124 [98–151]`. A row that is a
plain string is a group heading (one per request class) spanning the table."""

from __future__ import annotations

import html
from collections.abc import Sequence

from chunksim.sim.metrics.metric_registry import shown


def fmt(value: object, spec: str = "{}") -> str:
    if value is None:
        return "–"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def ranged_cell(med: object, lo: object, hi: object, spec: str) -> str:
    """`median [min–max]` (just the median when the seeds agree at this precision)."""
    m = fmt(med, spec)
    a, b = fmt(lo, spec), fmt(hi, spec)
    return m if a == b or lo is None else f"{m} [{a}–{b}]"


SEED_COLUMNS: tuple[tuple[str, str, str], ...] = tuple(
    (m.key, m.header, m.fmt) for m in shown("seeds"))
"""(summary key, header, format) of the table over seeds (`sim.metrics.metric_registry`)."""
CLASS_COLUMNS: tuple[tuple[str, str, str], ...] = tuple(
    (m.key, m.header, m.fmt) for m in shown("classes"))
"""The same, of its per-class rows."""


def seed_rows(labels: Sequence[str], stats: Sequence, columns=SEED_COLUMNS,
              marked: Sequence[str] = ()) -> tuple[list[str], list[list[str]]]:
    """One row per configuration, each cell `median [min–max]` over the seeds
    (`stats`: `sweep.seeds.SeedStats`). Columns in `marked` get a † in the header."""
    headers = ["configuration"] + [h + (" †" if k in marked else "") for k, h, _ in columns]
    rows = [[lab] + [ranged_cell(st.median.get(k), st.lo.get(k), st.hi.get(k), f)
                     for k, _, f in columns]
            for lab, st in zip(labels, stats, strict=True)]
    return headers, rows


def class_rows(labels: Sequence[str], stats: Sequence) -> tuple[list[str], list]:
    """A row group per request class (the classes every configuration has), one row per
    configuration in each; [] rows when the workload has a single class."""
    classes = [c for c in (stats[0].median.get("by_class") or {})
               if all(c in (st.median.get("by_class") or {}) for st in stats)]
    headers = ["configuration"] + [h for _, h, _ in CLASS_COLUMNS]
    if len(classes) < 2:
        return headers, []
    rows: list = []
    for cls in classes:
        n = stats[0].median["by_class"][cls].get("completed", 0)
        rows.append(f"class {cls} ({n} request{'s' if n != 1 else ''} per run)")
        for lab, st in zip(labels, stats, strict=True):
            m, lo, hi = (st.median["by_class"][cls], st.lo["by_class"][cls],
                         st.hi["by_class"][cls])
            rows.append([lab] + [ranged_cell(m.get(k), lo.get(k), hi.get(k), f)
                                 for k, _, f in CLASS_COLUMNS])
    return headers, rows


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]],
             numeric: bool = True) -> str:
    """A Markdown table; `numeric` right-aligns every column but the first."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    align = ["---"] + ["---:" if numeric else "---"] * (len(headers) - 1)
    body = [line([f"**{r}**"] + [""] * (len(headers) - 1)) if isinstance(r, str) else line(r)
            for r in rows]
    return "\n".join([line(headers), line(align), *body]) + "\n"


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
               numeric: bool = True) -> str:
    cls = "" if numeric else " class='text'"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        f"<tr class='group'><th colspan='{len(headers)}'>{html.escape(r)}</th></tr>"
        if isinstance(r, str) else
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
        for r in rows)
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

"""Human tables for reports: the headline columns of a comparison, as Markdown or HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence

# (summary key, header, format)
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("median_ttft_ms", "P50 TTFT ms", "{:.1f}"),
    ("p99_ttft_ms", "P99 TTFT ms", "{:.1f}"),
    ("median_itl_ms", "P50 ITL ms", "{:.1f}"),
    ("p99_itl_ms", "P99 ITL ms", "{:.1f}"),
    ("max_decode_stall_ms", "max stall ms", "{:.0f}"),
    ("p99_tpot_ms", "P99 TPOT ms", "{:.1f}"),
    ("request_throughput", "req/s", "{:.2f}"),
    ("output_throughput", "out tok/s", "{:.0f}"),
    ("request_goodput", "goodput req/s", "{:.2f}"),
    ("preemptions", "preempt", "{:d}"),
    ("extrapolated_steps", "extrap. steps", "{:d}"),
)


def fmt(value: object, spec: str = "{}") -> str:
    if value is None:
        return "–"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def headline_rows(labels: Sequence[str], summaries: Sequence[dict]) -> tuple[list[str],
                                                                            list[list[str]]]:
    headers = ["configuration"] + [h for _, h, _ in HEADLINE]
    rows = [[lab] + [fmt(s.get(k), f) for k, _, f in HEADLINE]
            for lab, s in zip(labels, summaries, strict=True)]
    return headers, rows


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]],
             numeric: bool = True) -> str:
    """A Markdown table; `numeric` right-aligns every column but the first."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    align = ["---"] + ["---:" if numeric else "---"] * (len(headers) - 1)
    return "\n".join([line(headers), line(align), *(line(r) for r in rows)]) + "\n"


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
               numeric: bool = True) -> str:
    cls = "" if numeric else " class='text'"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

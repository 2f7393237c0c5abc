"""Rejections are part of every answer. A request the engine refuses at arrival (longer
than the token budget, the KV cache or --max-model-len) is an error its client sees, so a
run's latencies, which cover only the requests that completed, say nothing about it. These
helpers count a run's rejections and phrase them; the capacity search and the verdict fail
a configuration that rejects more than `MAX_REJECT_PCT_DEFAULT` % of its requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MAX_REJECT_PCT_DEFAULT = 0.0
"""Most requests a probe or compared run may reject, % of those that arrived, before it
fails the SLOs: 0, as a served deployment would return each one as an error."""


def reject_pct(summary: Mapping) -> float:
    """Rejected requests as % of all that arrived (0 when none arrived)."""
    rejected = int(summary.get("rejected") or 0)
    total = rejected + int(summary.get("completed") or 0)
    return 100.0 * rejected / total if total else 0.0


def within(summary: Mapping, max_pct: float) -> bool:
    """Whether the run rejected at most `max_pct` % of its requests."""
    return reject_pct(summary) <= max_pct


def worst(runs: Sequence[Mapping]) -> Mapping | None:
    """The seed's summary that rejected the largest share (None without runs)."""
    return max(runs, key=reject_pct, default=None)


def all_within(runs: Sequence[Mapping], max_pct: float) -> bool:
    """Every seed rejected at most `max_pct` %: a rejection is an error returned to a
    client, not a tail that one lucky seed may hide, so the worst seed decides."""
    return all(within(s, max_pct) for s in runs)


def reasons_text(summary: Mapping, examples: Mapping[str, str] | None = None) -> str:
    """`148 by budget (e.g. ...)` per kind of rejection, `; `-joined."""
    parts = []
    for kind, count in (summary.get("rejected_reasons") or {}).items():
        eg = (examples or {}).get(kind)
        parts.append(f"{count:g} by {kind}" + (f" (e.g. {eg})" if eg else ""))
    return "; ".join(parts) or "no reason recorded"


def rejection_text(summary: Mapping, examples: Mapping[str, str] | None = None) -> str | None:
    """`148 of 200 requests rejected (74 %): 148 by budget ...`, or None when none was."""
    rejected = summary.get("rejected") or 0
    if not rejected:
        return None
    total = rejected + (summary.get("completed") or 0)
    return (f"{rejected:g} of {total:g} requests rejected ({reject_pct(summary):.3g} %): "
            f"{reasons_text(summary, examples)}")

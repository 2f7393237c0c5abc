"""Replay transforms on a RawTrace: order, tick jitter, window, cap, and time rescaling.

Applied in that order by `load_trace`; each returns a new RawTrace plus the notes that
say what it did.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from chunksim.workloads.traces.config import TraceOptions
from chunksim.workloads.traces.raw import RawTrace

QUANTIZED_ZERO_GAP_FRACTION = 0.5
"""Above this share of zero inter-arrival gaps a trace is called tick-quantized."""


def ordered(raw: RawTrace, strict: bool) -> RawTrace:
    """Rows sorted by time (stable, so ties keep file order); refuse instead if `strict`."""
    back = np.flatnonzero(np.diff(raw.time_s) < 0)
    if not len(back):
        return raw
    first = int(back[0]) + 1
    where = (
        f"line {raw.line[first]} ({raw.time_s[first]:.6g} s, after line "
        f"{raw.line[first - 1]} at {raw.time_s[first - 1]:.6g} s)"
    )
    if strict:
        raise ValueError(
            f"{raw.path}: timestamps go backwards {len(back)} time(s), first at {where}; "
            "drop --strict-order to sort them"
        )
    out = raw.take(np.argsort(raw.time_s, kind="stable"))
    return out.with_notes(f"sorted {len(back)} out-of-order timestamp(s), first at {where}")


def quantization_note(raw: RawTrace) -> str | None:
    """A hint when most gaps are exactly 0 (timestamps rounded to coarse ticks)."""
    gaps = np.diff(raw.time_s)
    if len(gaps) < 10:
        return None
    zero = float((gaps == 0).mean())
    if zero <= QUANTIZED_ZERO_GAP_FRACTION:
        return None
    distinct = len(np.unique(raw.time_s))
    return (
        f"timestamps look quantized: {zero:.0%} of gaps are 0 ({distinct} distinct values); "
        "replayed literally they arrive in bursts; --jitter-ticks spreads them"
    )


def jittered(raw: RawTrace, seed: int) -> RawTrace:
    """Spread each tick's requests uniformly over [tick, next tick), keeping their order.

    Offsets are drawn i.i.d. uniform and then sorted within the tick, so requests keep
    their file order (turn order matters for prefix reuse). The last tick uses the median
    tick width. Assumes `raw` is sorted.
    """
    t = raw.time_s
    ticks, group = np.unique(t, return_inverse=True)
    if len(ticks) < 2:
        return raw.with_notes("--jitter-ticks: a single timestamp, nothing to jitter")
    width = np.diff(ticks)
    width = np.append(width, np.median(width))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7ACE]))
    offsets = rng.random(len(t)) * width[group]
    # Sort offsets within each tick; ticks are contiguous and ascending in a sorted trace,
    # so position k of the (group, offset) lexsort belongs to the same tick as row k.
    offsets = offsets[np.lexsort((offsets, group))]
    out = replace(raw, time_s=ticks[group] + offsets)
    return out.with_notes(
        f"timestamps jittered uniformly inside their tick ({len(ticks)} ticks, median "
        f"{np.median(width):.3g} s, seed {seed}), order kept"
    )


def from_zero(raw: RawTrace) -> RawTrace:
    """Times measured from the first row (call on a sorted trace, before jitter)."""
    return replace(raw, time_s=raw.time_s - raw.time_s[0])


def windowed(raw: RawTrace, opts: TraceOptions) -> RawTrace:
    """Rows in [start, start + duration) of trace time, then the first `max_requests`;
    times become relative to the window start (which keeps jittered times in their tick)."""
    t = raw.time_s
    keep = t >= opts.start_s
    if opts.duration_s is not None:
        keep &= t < opts.start_s + opts.duration_s
    notes = []
    if opts.start_s > 0 or opts.duration_s is not None:
        end = "end" if opts.duration_s is None else f"{opts.start_s + opts.duration_s:g} s"
        notes.append(
            f"window [{opts.start_s:g} s, {end}) of a {t[-1]:.6g} s trace: kept "
            f"{int(keep.sum())} of {len(t)} requests"
        )
    idx = np.flatnonzero(keep)
    if not len(idx):
        raise ValueError(
            f"{raw.path}: no request in the window start_s={opts.start_s:g}"
            + (f", duration_s={opts.duration_s:g}" if opts.duration_s is not None else "")
            + f" (seconds); the trace spans {t[-1]:.6g} s: move --start or widen --duration"
        )
    if opts.max_requests is not None and len(idx) > opts.max_requests:
        notes.append(f"kept the first {opts.max_requests} of {len(idx)} requests (--max-requests)")
        idx = idx[: opts.max_requests]
    out = raw.take(idx)
    return replace(out, time_s=out.time_s - opts.start_s).with_notes(*notes)


def rescaled(raw: RawTrace, opts: TraceOptions) -> RawTrace:
    """Arrivals divided by `speedup` or scaled to mean rate `rate_per_s`.

    Scaling every gap by one factor keeps the inter-arrival CV (burstiness) and the
    relative shape; mean rate is count / (last - first arrival), as `describe_workload`
    reports it.
    """
    t = raw.time_s
    if opts.speedup is not None:
        out = replace(raw, time_s=t / opts.speedup)
        return out.with_notes(f"time compressed {opts.speedup:g}x (--speedup)")
    if opts.rate_per_s is not None:
        span = float(t[-1] - t[0])
        if span <= 0:
            raise ValueError(
                f"{raw.path}: the selected {len(t)} request(s) all arrive at once, so they "
                "have no rate to rescale; widen the window or drop --rate"
            )
        rate = len(t) / span
        factor = rate / opts.rate_per_s
        out = replace(raw, time_s=t * factor)
        return out.with_notes(
            f"gaps scaled by {factor:.4g}: mean rate {rate:.4g} -> {opts.rate_per_s:g} req/s "
            "(burstiness kept)"
        )
    return raw

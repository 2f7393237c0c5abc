"""`load_trace`: read a trace file in any supported format and replay-transform it."""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from pathlib import Path

import numpy as np

from chunksim.core.errors import InputError, reading
from chunksim.core.spec import Workload
from chunksim.workloads.build import workload_from_arrays
from chunksim.workloads.traces import azure, burstgpt, mooncake
from chunksim.workloads.traces.columns import MAX_SPAN_S, csv_header, open_text
from chunksim.workloads.traces.config import TraceFormat, TraceOptions
from chunksim.workloads.traces.generic import is_jsonl, read_generic
from chunksim.workloads.traces.raw import RawTrace
from chunksim.workloads.traces.transform import (
    from_zero,
    jittered,
    ordered,
    quantization_note,
    rescaled,
    windowed,
)


def detect_format(path: Path) -> TraceFormat:
    """Azure, BurstGPT or Mooncake from the header / first object; generic otherwise
    only if unambiguous, else a ValueError asking for --trace-format."""
    # Detection looks for a format's distinctive names, not all of them, so a file that
    # lacks one column gets the reader's precise "column X not found" error instead.
    if is_jsonl(path):
        import json

        with open_text(path) as f:
            n, first = next(((n, t) for n, t in enumerate(f, 1) if t.strip()), (1, "{}"))
        try:
            obj = json.loads(first)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: line {n}: not valid JSON ({exc.msg}): {first[:80].strip()!r}"
            ) from exc
        keys = set(obj) if isinstance(obj, dict) else set()
        if keys & {"input_length", "output_length", "hash_ids"}:
            return TraceFormat.MOONCAKE
        present = sorted(keys)
    else:
        header = set(csv_header(path))
        if len(header & set(azure.HEADER)) >= 2:
            return TraceFormat.AZURE
        if header & {burstgpt.PROMPT, burstgpt.OUTPUT}:
            return TraceFormat.BURSTGPT
        present = sorted(header)
    raise ValueError(
        f"{path}: cannot tell the trace format from its columns {present}; give "
        "--trace-format generic with --time-column/--prompt-column/--output-column and "
        "--time-unit (or azure, mooncake, burstgpt)"
    )


_NEW_OPTIONAL = ("hash_column", "hash_block_tokens", "conversation_column")
"""Trace options echoed into the workload's params only when given (summaries written
before they existed stay as they were)."""


def read_trace(path: Path, opts: TraceOptions) -> RawTrace:
    """The rows of `path` as read, in file order (no transforms)."""
    if not path.is_file():
        raise ValueError(f"trace file {path} " + ("is a directory; give the trace file in it"
                                              if path.is_dir() else "does not exist")
                    + "; check --trace")
    fmt = opts.format if opts.format is not TraceFormat.AUTO else detect_format(path)
    if opts.hash_column is not None and fmt is not TraceFormat.GENERIC:
        raise ValueError(f"--hash-column applies to --trace-format generic only ({path} is "
                         f"read as {fmt.value}); drop --hash-column/--hash-block-tokens")
    match fmt:
        case TraceFormat.AZURE:
            return azure.read_azure(path)
        case TraceFormat.MOONCAKE:
            return mooncake.read_mooncake(path)
        case TraceFormat.BURSTGPT:
            return burstgpt.read_burstgpt(path, opts.model)
        case TraceFormat.GENERIC:
            return read_generic(path, opts)
    raise AssertionError(fmt)  # unreachable


def load_trace(path: str | Path, opts: TraceOptions | None = None) -> Workload:
    """Read, order, (jitter), window, cap and rescale a trace into a Workload.

    Every row not replayed is counted in `Workload.notes`. Arrival 0 is the window start
    (`start_s` after the trace's first request): the first request of the whole trace
    arrives at 0, a window's first request at or shortly after 0. A malformed file raises
    InputError naming it (`core.errors.reading`).
    """
    opts = opts or TraceOptions()
    path = Path(path)
    if not path.is_file():
        raise InputError(f"trace file {path} " + ("is a directory; give the trace file in it"
                                              if path.is_dir() else "does not exist")
                    + "; check --trace")
    with reading(path, "trace"):
        return _load(path, opts)


def check_span(raw, opts: TraceOptions) -> None:
    """Refuse a replay longer than `MAX_SPAN_S`, naming the rows at both ends."""
    t = raw.time_s
    if not len(t):
        return
    i, j = int(np.argmin(t)), int(np.argmax(t))
    span = float(t[j] - t[i])
    if span <= MAX_SPAN_S:
        return
    unit = (f"--time-unit {opts.time_unit.value}" if raw.format == "generic"
            and opts.time_unit is not None else f"the {raw.format} clock")
    raise ValueError(
        f"{raw.path}: the requests to replay span {span:.4g} s ({span / 86400:.3g} days, "
        f"line {raw.line[i]} to line {raw.line[j]}) as read with {unit}, more than "
        f"{MAX_SPAN_S / 86400:.0f} days: check --time-unit (a ms, us or ns clock read as "
        "s?) and that row's time, or replay a window with --start/--duration")


def _load(path: Path, opts: TraceOptions) -> Workload:
    raw = read_trace(path, opts)
    n_read = raw.rows_read
    read_note = f"read {n_read} rows from {path.name} as {raw.format}"
    raw = replace(raw, notes=(read_note, *raw.notes))
    if not len(raw):
        raise ValueError(f"{path}: no requests left to replay: {'; '.join(raw.notes)}")
    raw = from_zero(ordered(raw, opts.strict_order))
    if opts.jitter_ticks:
        raw = jittered(raw, opts.seed)
    else:
        hint = quantization_note(raw)
        raw = raw.with_notes(hint) if hint else raw
    raw = windowed(raw, opts)
    check_span(raw, opts)
    raw = rescaled(raw, opts)
    params = {
        "generator": "trace",
        "path": str(path),
        "rows_read": n_read,
        **{k: (v.value if isinstance(v, Enum) else v) for k, v in opts.__dict__.items()
           if v is not None or k not in _NEW_OPTIONAL},
        "format": raw.format,  # the format actually read, also when auto-detected
    }
    return workload_from_arrays(
        f"{raw.format}:{path.name.split('.')[0]}",
        raw.time_s,
        raw.prompt_tokens,
        raw.output_tokens,
        prefix_hashes=raw.prefix_hashes,
        request_class=raw.request_class,
        priority=raw.priority,
        conversation_id=raw.conversation_id,
        prefix_block_tokens=raw.prefix_block_tokens,
        notes=raw.notes,
        params=params,
    )

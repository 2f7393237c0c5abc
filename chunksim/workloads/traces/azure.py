"""Azure LLM inference traces (2023 Splitwise and 2024 week-long): CSV
`TIMESTAMP,ContextTokens,GeneratedTokens` with absolute datetimes.

2023 has 7 fractional digits (100 ns) and no zone; 2024 adds `+00:00` and drops trailing
zeros (mixed precision). Arrival = seconds since the first row.
"""

from __future__ import annotations

from pathlib import Path

from chunksim.workloads.traces.columns import (
    drop_blank_rows,
    drop_zero_tokens,
    read_csv,
    require_columns,
    time_column_s,
    token_column,
)
from chunksim.workloads.traces.raw import RawTrace

TIME, PROMPT, OUTPUT = "TIMESTAMP", "ContextTokens", "GeneratedTokens"
HEADER = (TIME, PROMPT, OUTPUT)


def read_azure(path: Path) -> RawTrace:
    """Read an Azure LLM inference CSV (2023 or 2024 layout)."""
    df = read_csv(path)
    require_columns(path, list(df.columns), {c: "Azure trace column" for c in HEADER})
    df, lines, blanks = drop_blank_rows(df[list(HEADER)])
    time_s = time_column_s(path, df[TIME], lines, TIME, "datetime")
    prompt = token_column(path, df[PROMPT], lines, PROMPT)
    output = token_column(path, df[OUTPUT], lines, OUTPUT)
    raw = RawTrace(str(path), "azure", time_s, prompt, output, lines, rows_read=len(lines))
    notes = [f"{blanks} blank line(s) skipped"] if blanks else []
    keep, note = drop_zero_tokens(prompt, output)
    if note:
        raw = raw.take(keep.nonzero()[0])
        notes.append(note)
    return raw.with_notes(*notes)

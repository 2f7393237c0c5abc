"""BurstGPT (Azure OpenAI GPT-3.5/GPT-4 usage) CSV, read by header name.

v1: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`;
v3 inserts `Session ID,Elapsed time` as columns 2-3, so columns are never read by position;
`Session ID` becomes the conversation id.
`Timestamp` is seconds from 0:00 of the first day. Failed requests have 0 response tokens;
they are dropped and counted. `Log Type` becomes the request class (conversation / api).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chunksim.workloads.traces.columns import (
    csv_header,
    drop_blank_rows,
    drop_zero_tokens,
    read_csv,
    require_columns,
    time_column_s,
    token_column,
)
from chunksim.workloads.traces.raw import RawTrace

TIME, MODEL, PROMPT, OUTPUT, LOG_TYPE, SESSION = (
    "Timestamp",
    "Model",
    "Request tokens",
    "Response tokens",
    "Log Type",
    "Session ID",
)
REQUIRED = (TIME, PROMPT, OUTPUT)
_CLASS = {"Conversation log": "conversation", "API log": "api"}


def read_burstgpt(path: Path, model: str | None = None) -> RawTrace:
    """Read a BurstGPT CSV (v1 or v3 layout); `model` keeps only that model's rows."""
    header = csv_header(path)
    require_columns(path, header, {c: "BurstGPT column" for c in REQUIRED})
    wanted = [c for c in (TIME, MODEL, PROMPT, OUTPUT, LOG_TYPE, SESSION) if c in header]
    df, lines, blanks = drop_blank_rows(read_csv(path, usecols=wanted))
    rows_read = len(lines)
    notes = [f"{blanks} blank line(s) skipped"] if blanks else []
    if model is not None:
        require_columns(path, header, {MODEL: "needed by --trace-model"})
        keep = (df[MODEL] == model).to_numpy()
        if not keep.any():
            raise ValueError(
                f"{path}: no row has Model == {model!r}; models present: "
                f"{sorted(df[MODEL].unique().tolist())[:10]}"
            )
        notes.append(f"kept {int(keep.sum())} of {len(keep)} rows with Model == {model!r}")
        df, lines = df[keep], lines[keep]
    time_s = time_column_s(path, df[TIME], lines, TIME, "s")
    prompt = token_column(path, df[PROMPT], lines, PROMPT)
    output = token_column(path, df[OUTPUT], lines, OUTPUT)
    classes = (
        [_CLASS.get(v, v or "default") for v in df[LOG_TYPE].tolist()]
        if LOG_TYPE in df.columns
        else None
    )
    sessions = (
        [str(v) if v != "" else None for v in df[SESSION].tolist()]
        if SESSION in df.columns
        else None
    )
    raw = RawTrace(
        str(path),
        "burstgpt",
        time_s,
        prompt,
        output,
        lines,
        request_class=classes,
        conversation_id=sessions,
        rows_read=rows_read,
    )
    keep_tok, note = drop_zero_tokens(prompt, output)
    if note:
        raw = raw.take(np.flatnonzero(keep_tok))
        notes.append(note + " (BurstGPT marks failed requests with 0 response tokens)")
    return raw.with_notes(*notes)

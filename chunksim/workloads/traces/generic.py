"""Any CSV or JSONL trace with user-named columns and an explicit time unit.

An optional hash column gives each prompt's block hashes (`--hash-column`, each covering
`--hash-block-tokens` tokens): a JSON list of integers (in JSONL, or as a CSV cell), or
integers separated by spaces in a CSV cell. A hash names a block's own tokens; chunksim
chains them as vLLM does (a block's identity is its tokens and every block before it),
so equal blocks after different prefixes never match. Hashes that are chained already
(Mooncake's) keep their meaning.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from chunksim.workloads.traces.columns import (
    csv_header,
    drop_blank_rows,
    drop_zero_tokens,
    jsonl_column,
    read_csv,
    read_jsonl,
    refuse_booleans,
    require_columns,
    time_column_s,
    token_column,
)
from chunksim.workloads.traces.config import TraceOptions
from chunksim.workloads.traces.raw import RawTrace

DEFAULT_TIME, DEFAULT_PROMPT, DEFAULT_OUTPUT = "timestamp", "prompt_tokens", "output_tokens"


def is_jsonl(path: Path) -> bool:
    """JSON lines by extension, or by a first non-blank character of `{`."""
    name = path.name.removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return True
    if name.endswith((".csv", ".tsv")):
        return False
    from chunksim.workloads.traces.columns import open_text

    with open_text(path) as f:
        for text in f:
            if text.strip():
                return text.lstrip().startswith("{")
    return False


def read_generic(path: Path, opts: TraceOptions) -> RawTrace:
    """Read `path` with the columns and time unit `opts` names."""
    if opts.time_unit is None:
        raise ValueError(
            f"{path}: a generic trace needs --time-unit (s, ms, us, ns or datetime) "
            "to know what its time column means"
        )
    cols = {
        opts.time_column or DEFAULT_TIME: "--time-column",
        opts.prompt_column or DEFAULT_PROMPT: "--prompt-column",
        opts.output_column or DEFAULT_OUTPUT: "--output-column",
    }
    flags = ((opts.class_column, "--class-column"), (opts.priority_column, "--priority-column"),
             (opts.hash_column, "--hash-column"),
             (opts.conversation_column, "--conversation-column"))
    optional = {c: flag for c, flag in flags if c is not None}
    wanted = {**cols, **optional}
    tcol, pcol, ocol = list(cols)
    if is_jsonl(path):
        rows, lines = read_jsonl(path)
        get = {c: jsonl_column(path, rows, lines, c, flag) for c, flag in wanted.items()}
        blanks = 0
    else:
        header = csv_header(path)
        require_columns(path, header, wanted)
        df, lines, blanks = drop_blank_rows(read_csv(path, usecols=list(wanted)))
        get = {c: df[c] for c in wanted}
    time_s = time_column_s(path, get[tcol], lines, tcol, opts.time_unit.value)
    prompt = token_column(path, get[pcol], lines, pcol)
    output = token_column(path, get[ocol], lines, ocol)
    classes = None
    if opts.class_column is not None:
        classes = [str(v) if v not in ("", None) else "default" for v in get[opts.class_column]]
    priority = None
    if opts.priority_column is not None:
        priority = _int_column(path, get[opts.priority_column], lines, opts.priority_column)
    hashes = None
    if opts.hash_column is not None:
        hashes = chained_hashes(path, get[opts.hash_column], lines, opts.hash_column, prompt,
                                opts.hash_block_tokens)
    conversations = None
    if opts.conversation_column is not None:
        conversations = [str(v) if v not in ("", None) else None
                         for v in get[opts.conversation_column]]
    raw = RawTrace(
        str(path),
        "generic",
        time_s,
        prompt,
        output,
        lines,
        prefix_hashes=hashes,
        request_class=classes,
        priority=priority,
        prefix_block_tokens=opts.hash_block_tokens or 0,
        conversation_id=conversations,
        rows_read=len(lines),
    )
    notes = [f"{blanks} blank line(s) skipped"] if blanks else []
    keep, note = drop_zero_tokens(prompt, output)
    if note:
        raw = raw.take(np.flatnonzero(keep))
        notes.append(note)
    return raw.with_notes(*notes)


def _int_column(path: Path, values, lines: np.ndarray, col: str) -> np.ndarray:
    import pandas as pd

    s = pd.Series(list(values), dtype=object)
    refuse_booleans(path, s, lines, col, "an integer")
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(x) | (x != np.round(x))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{path}: line {lines[i]}: column {col!r} = {s.iloc[i]!r} is not an integer"
        )
    return x.astype(np.int64)


def _hash_list(path: Path, value, line: int, col: str) -> list[int]:
    given = value  # what the file holds, for the message
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            value = json.loads(text) if text.startswith("[") else [int(x) for x in text.split()]
        except ValueError:
            value = None
    if not isinstance(value, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ValueError(
            f"{path}: line {line}: column {col!r} = {str(given)[:60]!r} is not a list of "
            "integer hashes (a JSON list, or integers separated by spaces)")
    return value


def chained_hashes(path: Path, values, lines: np.ndarray, col: str, prompt: np.ndarray,
                   block_tokens: int) -> list[tuple[int, ...]]:
    """Each row's block hashes, chained: equal ids mean equal tokens up to the block's end.
    A row may hash fewer blocks than its prompt has, never more."""
    ids: dict[tuple[int, int], int] = {}
    out = []
    for v, line, p in zip(values, lines.tolist(), prompt.tolist(), strict=True):
        hs = _hash_list(path, v, line, col)
        most = -(-int(p) // block_tokens)
        if len(hs) > most:
            raise ValueError(
                f"{path}: line {line}: {len(hs)} hashes of {block_tokens} tokens cover more "
                f"than the {p}-token prompt ({most} at most); check --hash-block-tokens")
        prev, chain = -1, []
        for h in hs:
            prev = ids.setdefault((prev, h), len(ids))
            chain.append(prev)
        out.append(tuple(chain))
    return out

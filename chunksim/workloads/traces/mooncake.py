"""Mooncake FAST'25 traces (Kimi): JSONL with `timestamp` (ms from start),
`input_length`, `output_length` and `hash_ids` (one remapped id per 512-token block)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chunksim.workloads.traces.columns import (
    drop_zero_tokens,
    jsonl_column,
    read_jsonl,
    time_column_s,
    token_column,
)
from chunksim.workloads.traces.raw import RawTrace

KEYS = ("timestamp", "input_length", "output_length")
BLOCK_TOKENS = 512
"""Tokens per `hash_ids` entry in Mooncake's traces."""


def read_mooncake(path: Path) -> RawTrace:
    """Read a Mooncake JSONL trace; hashes become `prefix_hashes` on 512-token blocks."""
    rows, lines = read_jsonl(path)
    hint = "Mooncake trace key"
    t, p, o = (jsonl_column(path, rows, lines, k, hint) for k in KEYS)
    time_s = time_column_s(path, t, lines, KEYS[0], "ms")
    prompt = token_column(path, p, lines, KEYS[1])
    output = token_column(path, o, lines, KEYS[2])
    hashes: list[tuple[int, ...]] | None = None
    if any("hash_ids" in r for r in rows):
        hashes = []
        for r, n in zip(rows, lines, strict=True):
            h = r.get("hash_ids", [])
            if not isinstance(h, list) or not all(
                    isinstance(x, int) and not isinstance(x, bool) for x in h):
                raise ValueError(f"{path}: line {n}: hash_ids must be a list of integers")
            hashes.append(tuple(h))
    raw = RawTrace(
        str(path),
        "mooncake",
        time_s,
        prompt,
        output,
        lines,
        prefix_hashes=hashes,
        prefix_block_tokens=BLOCK_TOKENS if hashes is not None else 0,
        rows_read=len(lines),
    )
    keep, note = drop_zero_tokens(prompt, output)
    if note:
        raw = raw.take(np.flatnonzero(keep)).with_notes(note)
    return raw

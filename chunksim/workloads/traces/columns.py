"""Column parsing shared by every trace reader: one error style, one drop-accounting rule.

Errors name the file, the 1-based line, the column and the offending value, so a bad row
in a 20k-line trace can be found with `sed -n LINEp`.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: the CLI starts without pandas
    import pandas as pd

MAX_TOKENS = 10_000_000
"""Lengths above this are data errors, not long prompts (the longest public trace
prompt, Mooncake synthetic, is ~191k tokens)."""


def open_text(path: Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping `*.gz`."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")  # type: ignore[return-value]
    return open(path, encoding="utf-8")  # noqa: SIM115 - the caller closes it


def require_columns(path: Path, present: Sequence[str], needed: dict[str, str]) -> None:
    """Raise naming the file, each missing column, the columns present and the flag to fix.

    `needed` maps column name -> the flag (or hint) that selects it.
    """
    missing = [(col, hint) for col, hint in needed.items() if col not in present]
    if missing:
        what = ", ".join(f"{c!r} ({h})" for c, h in missing)
        raise ValueError(f"{path}: column {what} not found; columns present: {list(present)}")


def read_csv(path: Path, usecols: Sequence[str] | None = None) -> pd.DataFrame:
    """Read a CSV keeping blank lines as rows so `index + 2` is the file line."""
    import pandas as pd

    try:
        return pd.read_csv(
            path,
            usecols=list(usecols) if usecols is not None else None,
            skip_blank_lines=False,
            dtype=str,  # parse each column ourselves, to report the bad value and line
            keep_default_na=False,
        )
    except pd.errors.ParserError as exc:  # e.g. "Expected 3 fields in line 7, saw 4"
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if m:
            raise ValueError(f"{path}: line {m[2]}: {m[3]} fields, but the header has "
                             f"{m[1]}; fix or remove that row") from None
        raise ValueError(f"{path}: malformed CSV: {exc}") from exc
    except pd.errors.EmptyDataError as exc:
        raise ValueError(f"{path}: file is empty; a trace needs a header and rows") from exc


def csv_header(path: Path) -> list[str]:
    """The CSV's column names."""
    import pandas as pd

    try:
        return list(pd.read_csv(path, nrows=0).columns)
    except pd.errors.EmptyDataError as exc:
        raise ValueError(f"{path}: file is empty; a trace needs a header and rows") from exc


def read_jsonl(path: Path) -> tuple[list[dict], np.ndarray]:
    """Parse a JSON-lines file: (objects, their 1-based lines); blank lines are skipped."""
    rows: list[dict] = []
    lines: list[int] = []
    with open_text(path) as f:
        for n, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{path}: line {n}: not valid JSON ({exc.msg}): {text[:80].strip()!r}"
                ) from exc
            if not isinstance(obj, dict):
                raise ValueError(f"{path}: line {n}: expected a JSON object, got {text[:80]!r}")
            rows.append(obj)
            lines.append(n)
    if not rows:
        raise ValueError(f"{path}: no JSON objects found; the trace is empty")
    return rows, np.asarray(lines, dtype=np.int64)


def jsonl_column(path: Path, rows: list[dict], lines: np.ndarray, key: str, hint: str) -> list:
    """One key of every JSONL object; raises naming the first line that lacks it."""
    try:
        return [r[key] for r in rows]
    except KeyError:
        i = next(i for i, r in enumerate(rows) if key not in r)
        raise ValueError(
            f"{path}: line {lines[i]}: key {key!r} ({hint}) not found; keys present: "
            f"{sorted(rows[i])}"
        ) from None


def refuse_booleans(path: Path, s: pd.Series, lines: np.ndarray, col: str, what: str) -> None:
    """A JSON `true`/`false` is not a number (pandas would read it as 1/0): name the line."""
    flags = np.fromiter((isinstance(v, (bool, np.bool_)) for v in s), dtype=bool, count=len(s))
    if flags.any():
        i = int(np.flatnonzero(flags)[0])
        raise ValueError(f"{path}: line {lines[i]}: column {col!r} = {s.iloc[i]!r} is a "
                         f"boolean, not {what}; {int(flags.sum())} such row(s)")


def token_column(
    path: Path, values: Sequence | pd.Series, lines: np.ndarray, col: str
) -> np.ndarray:
    """Integer token counts; raises on a missing, non-integer, negative or absurd value.

    Zeros pass through (readers drop them and count the drop in notes).
    """
    import pandas as pd

    s = pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values
    refuse_booleans(path, s, lines, col, "a token count")
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(x) | (x < 0) | (x > MAX_TOKENS) | (x != np.round(x))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{path}: line {lines[i]}: column {col!r} = {s.iloc[i]!r} is not a token count "
            f"(need an integer in [0, {MAX_TOKENS:,}]); {int(bad.sum())} such row(s)"
        )
    return x.astype(np.int64)


_NUMERIC_UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
MAX_SPAN_S = 30 * 86400.0
"""Longest plausible replay, s (30 days): a longer one is almost always a clock read in
the wrong unit (nanoseconds as seconds) or a stray timestamp, and would replay as one
request lost in months of idle time, its latencies rounded away (`load.check_span`)."""
MAX_TIME_STEP_S = 1e-3
"""Coarsest time resolution accepted, s: a float64 clock that large (1e13 s, or a
ns epoch read as s) cannot tell arrivals a millisecond apart."""


def time_column_s(
    path: Path, values: Sequence | pd.Series, lines: np.ndarray, col: str, unit: str
) -> np.ndarray:
    """Times in seconds (any origin) from numbers in `unit` or datetime strings.

    Datetimes: ISO 8601 with any fractional precision (Azure 2023's 7 digits, Azure 2024's
    mixed precision with `+00:00`); a mix of zone-aware and naive values is read as UTC.
    """
    import pandas as pd

    s = pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values
    if len(s) == 0:  # a header and no rows: nothing to time (the caller says so)
        return np.zeros(0)
    refuse_booleans(path, s, lines, col, f"a time in {unit}")
    if unit == "datetime":
        try:
            t = pd.to_datetime(s, format="ISO8601", errors="coerce")
        except (ValueError, TypeError):  # mixed offsets: normalise to UTC
            t = pd.to_datetime(s, format="ISO8601", errors="coerce", utc=True)
        bad = t.isna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{path}: line {lines[i]}: column {col!r} = {s.iloc[i]!r} is not a "
                f"datetime (expected e.g. 2023-11-16 18:17:03.9799600); "
                f"{int(bad.sum())} such row(s)"
            )
        # int64 offsets from the first row keep full precision (float epoch-ns would not).
        delta = (t - t.iloc[0]).to_numpy()
        return delta.astype("timedelta64[ns]").astype(np.int64) / 1e9
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{path}: line {lines[i]}: column {col!r} = {s.iloc[i]!r} is not a number "
            f"of {unit}; {int(bad.sum())} such row(s)"
        )
    step_s = float(np.spacing(np.abs(x).max())) * _NUMERIC_UNIT_S[unit]
    span_s = float(x.max() - x.min()) * _NUMERIC_UNIT_S[unit]
    if step_s > MAX_TIME_STEP_S and span_s <= MAX_SPAN_S:  # a longer span: `check_span`
        i = int(np.argmax(np.abs(x)))
        raise ValueError(
            f"{path}: line {lines[i]}: column {col!r} = {s.iloc[i]!r} {unit}: at that size "
            f"a time is only known to {step_s:.3g} s (a 64-bit float), so nearby arrivals "
            f"would merge; check --time-unit (read as {unit}) or subtract the trace's start")
    return x * _NUMERIC_UNIT_S[unit]


def drop_blank_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, int]:
    """Remove all-empty CSV rows; return (frame, file lines of kept rows, blanks removed)."""
    lines = np.arange(len(df), dtype=np.int64) + 2  # line 1 is the header
    blank = (df.isna() | (df == "")).all(axis=1).to_numpy()
    return df[~blank], lines[~blank], int(blank.sum())


def drop_zero_tokens(
    prompt: np.ndarray, output: np.ndarray, what: str = "rows"
) -> tuple[np.ndarray, str | None]:
    """Mask of rows with both lengths >= 1, and a note counting the others (None if 0)."""
    keep = (prompt >= 1) & (output >= 1)
    dropped = int((~keep).sum())
    if not dropped:
        return keep, None
    zp, zo = int((prompt < 1).sum()), int((output < 1).sum())
    return keep, (
        f"dropped {dropped} of {len(keep)} {what} with zero tokens "
        f"({zp} zero prompt, {zo} zero output)"
    )

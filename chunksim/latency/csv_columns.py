"""A CSV table read into one numpy array per column, without pandas.

A profile is read by every run, and importing pandas alone costs more than the rest of a
short run (`sim run`'s fixed cost); the standard library's csv reader and numpy read the
small tables of docs/profile-format.md in a few milliseconds. Columns are typed as
`pandas.read_csv` types them: whole numbers -> int64, numbers (with blanks or NA markers
as NaN) -> float64, true/false -> bool, anything else -> object (its cells as written,
NA cells as NaN). Numbers are parsed by Python's `float`, which rounds correctly.
"""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np

NA_CELLS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                      "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None",
                      "n/a", "nan", "null"})
"""Cells read as missing (pandas.read_csv's default NA markers)."""

_BOOLS = {"True": True, "TRUE": True, "true": True, "False": False, "FALSE": False,
          "false": False}
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class CsvError(ValueError):
    """The bytes are not a CSV table (the message names the line)."""


def read_columns(raw: bytes) -> dict[str, np.ndarray]:
    """The table in `raw` (UTF-8, a header line first), column by column. Blank lines are
    skipped; a row shorter than the header is padded with missing cells; a longer one,
    or no header at all, raises CsvError."""
    text = raw.decode("utf-8-sig")
    try:
        lines = [(n, row) for n, row in enumerate(csv.reader(io.StringIO(text, newline="")),
                                                  start=1) if row]
    except csv.Error as exc:
        raise CsvError(str(exc)) from None
    if not lines:
        raise CsvError("no header line (the file is empty)")
    header = _names([h.strip() for h in lines[0][1]])
    width = len(header)
    cells: list[list[str]] = [[] for _ in header]
    for n, row in lines[1:]:
        if len(row) > width:
            raise CsvError(f"line {n} has {len(row)} fields, the header {width}")
        row = row + [""] * (width - len(row))
        for col, cell in zip(cells, row, strict=True):
            col.append(cell)
    return {name: typed(col) for name, col in zip(header, cells, strict=True)}


def _names(header: list[str]) -> list[str]:
    """Column names as pandas gives them: an empty one is `Unnamed: i` (a table written
    with its index), a repeated one gets `.1`, `.2`, ..."""
    out: list[str] = []
    for i, name in enumerate(header):
        name = name or f"Unnamed: {i}"
        base, k = name, 0
        while name in out:
            k += 1
            name = f"{base}.{k}"
        out.append(name)
    return out


def typed(cells: list[str]) -> np.ndarray:
    """One column's cells as int64, float64 or object (see the module's docstring)."""
    if not cells:
        return np.zeros(0, dtype=object)
    ints = [int(c) for c in cells if _INT.fullmatch(c.strip())]
    if len(ints) == len(cells) and all(_INT64[0] <= i <= _INT64[1] for i in ints):
        return np.array(ints, dtype=np.int64)
    if all(c.strip() in _BOOLS for c in cells):
        return np.array([_BOOLS[c.strip()] for c in cells], dtype=bool)
    floats = [_float(c) for c in cells]
    if all(f is not None for f in floats):
        return np.array(floats, dtype=np.float64)
    return np.array([math.nan if c.strip() in NA_CELLS else c for c in cells], dtype=object)


def _float(cell: str) -> float | None:
    s = cell.strip()
    if s in NA_CELLS:
        return math.nan
    if "_" in s:  # Python's float reads 1_000; a CSV reader does not
        return None
    try:
        return float(s)
    except ValueError:
        return None


def numeric(col: np.ndarray) -> np.ndarray:
    """A column as float64, NaN where a cell is not a number (`pd.to_numeric(...,
    errors="coerce")` of a read column)."""
    if col.dtype != object:
        return col.astype(np.float64)
    out = np.empty(len(col))
    for i, v in enumerate(col):
        f = _float(v) if isinstance(v, str) else _any_float(v)
        out[i] = math.nan if f is None else f
    return out


def _any_float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def row_count(columns: dict[str, np.ndarray]) -> int:
    """Rows of a table read by `read_columns` (0 for a header alone)."""
    return len(next(iter(columns.values()))) if columns else 0

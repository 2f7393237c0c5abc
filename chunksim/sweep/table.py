"""Result tables as text: flat rows, deterministic CSV, and the resumable sweep table.

Every cell is formatted once, here (floats by repr, so they round-trip exactly; nested
values as compact sorted JSON), and rows are kept as strings. A table rebuilt from a
checkpoint and new results is therefore byte-identical to one computed in a single go.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from chunksim import atomic

Row = dict[str, str]


def cell(value: object) -> str:
    """One value as CSV text: '' for None, repr for floats, JSON for dicts and lists."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    if hasattr(value, "item"):  # numpy scalar
        return cell(value.item())
    return str(getattr(value, "value", value))  # str Enums by value


def flatten(summary: Mapping[str, object], first: Mapping[str, object] | None = None) -> Row:
    """A row: `first`'s columns (configuration keys) then the summary's, all as text.
    Keys in `first` win over same-named summary keys."""
    row = {k: cell(v) for k, v in (first or {}).items()}
    for k, v in summary.items():
        row.setdefault(k, cell(v))
    return row


def columns_of(rows: Iterable[Row], lead: Sequence[str] = ()) -> list[str]:
    """Union of the rows' columns, `lead` first, then in first-seen order."""
    cols = list(lead)
    seen = set(cols)
    for row in rows:
        for k in row:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


def csv_text(rows: Sequence[Row], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n", restval="",
                       extrasaction="raise")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def read_rows(path: Path) -> tuple[list[Row], list[str]]:
    """Rows (all text) and columns of a CSV written by `csv_text`."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = [dict(r) for r in reader]
        return rows, list(reader.fieldnames or [])


def complete_rows(path: Path, rows: list[Row], table: ResultTable) -> list[Row]:
    """The rows every field of which was written: a row with fewer or more fields than the
    header, or a last row without its line end (a file cut short: by hand, or a full
    disk), is not a finished grid point, so it is dropped (its line kept in
    `table.dropped`) and run again."""
    unended = not path.read_bytes().endswith(b"\n")
    out = []
    for i, r in enumerate(rows):
        cut = None in r or any(v is None for v in r.values())
        if cut or (unended and i == len(rows) - 1):
            table.dropped.append(i + 2)
            continue
        out.append(r)
    return out


class ResultTable:
    """A CSV table keyed by configuration: skip what is there, add rows, write atomically.

    `key_columns` identify a row; `sort_key(row)` orders rows (by configuration, never by
    completion time). `flush()` rewrites the whole file via temp + rename, so a crash
    leaves the last complete checkpoint.
    """

    def __init__(self, path: str | Path, key_columns: Sequence[str],
                 sort_key: Callable[[Row], tuple]) -> None:
        self.path = Path(path)
        self.key_columns = tuple(key_columns)
        self.sort_key = sort_key
        self.rows: dict[tuple[str, ...], Row] = {}
        self.columns: list[str] = list(self.key_columns)
        self.dropped: list[int] = []
        """File lines of rows left out as incomplete (run again): see `complete_rows`."""
        if self.path.exists():
            try:
                rows, cols = read_rows(self.path)
            except (OSError, csv.Error, UnicodeDecodeError) as exc:
                raise ValueError(f"--out {self.path}: cannot read the existing table ({exc}); "
                                 "move it away or pick another --out") from None
            missing = [c for c in self.key_columns if c not in cols]
            if missing:
                raise ValueError(
                    f"--out {self.path} exists but lacks key column(s) {missing}: it is not a "
                    "sweep table; pick another --out")
            self.columns = columns_of([], cols)
            for r in complete_rows(self.path, rows, self):
                self.rows[self.key(r)] = r

    def key(self, row: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(row.get(k, "") for k in self.key_columns)

    def __contains__(self, key: tuple[str, ...]) -> bool:
        return key in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, row: Row) -> None:
        self.rows[self.key(row)] = row
        self.columns = columns_of([row], self.columns)

    def sorted_rows(self) -> list[Row]:
        return sorted(self.rows.values(), key=self.sort_key)

    def text(self) -> str:
        return csv_text(self.sorted_rows(), self.columns)

    def flush(self) -> None:
        atomic.write_text(self.path, self.text())

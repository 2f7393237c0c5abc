"""A run's output files: how `sim run --out` writes its records (Parquet by default, CSV
on request) and how many step rows it keeps.

Parquet is the default because runs reach millions of rows: it is typed, compressed,
and read by pandas (`pd.read_parquet`), pyarrow, polars, DuckDB and every notebook. CSV
keeps repr-exact floats for tools that want text. Step rows can be streamed to a file as
they are recorded (`StepFileWriter`), so a long run's steps never sit in memory; they can
also be thinned (`--steps sample:N`) or left out (`--steps none`). summary.json is the
same whatever the format or the rows kept: it counts every step.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from chunksim import atomic
from chunksim.core.knobs import knob
from chunksim.sim.records.records import STEP_COLUMNS, parse_steps_keep

_O = "Outputs"


class OutputFormat(str, Enum):
    """Table format of requests, steps and schedule files."""

    PARQUET = "parquet"
    CSV = "csv"


@dataclass(frozen=True)
class OutputConfig:
    """What `--out` writes besides summary.json (None: the default, not given)."""

    format: OutputFormat | None = knob(None, "--format", panel=_O)
    """Format of requests, steps (and schedule) files in --out: parquet (default; typed,
    compact, pd.read_parquet reads it) or csv."""
    steps_keep: int | None = knob(None, "--steps", panel=_O, cli_type=str,
                                  parse=parse_steps_keep)
    """Step rows written to --out: all (default), none, or sample:N (every N-th step,
    the first included). The summary counts every step either way; steps stream to disk
    as they are recorded."""

    def __post_init__(self) -> None:
        if self.format is not None:
            object.__setattr__(self, "format", OutputFormat(self.format))
        if self.steps_keep is not None:
            object.__setattr__(self, "steps_keep", parse_steps_keep(self.steps_keep))

    @property
    def table_format(self) -> OutputFormat:
        return self.format or OutputFormat.PARQUET

    @property
    def keep(self) -> int:
        """Keep every k-th step (1: all, 0: none)."""
        return 1 if self.steps_keep is None else self.steps_keep

    def given(self) -> list[str]:
        """The flags set on the command line."""
        return [f for f, v in (("--format", self.format), ("--steps", self.steps_keep))
                if v is not None]


def table_names(fmt: OutputFormat | str) -> tuple[str, str, str]:
    """(requests, steps, schedule) file names in `fmt`."""
    ext = OutputFormat(fmt).value
    return f"requests.{ext}", f"steps.{ext}", f"schedule.{ext}"


def table_bytes(frame, fmt: OutputFormat | str) -> bytes:
    """A DataFrame as the bytes of one file in `fmt` (deterministic for equal frames)."""
    if OutputFormat(fmt) is OutputFormat.CSV:
        return atomic.csv_bytes(frame)
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
    return buf.getvalue()


def _step_schema():
    import pyarrow as pa

    types = {float: pa.float64(), int: pa.int64(), bool: pa.bool_()}
    return pa.schema([(k, types[t]) for k, t in STEP_COLUMNS.items()])


class StepFileWriter:
    """Streams step rows (dicts of equal-length column arrays, as `records.StepLog` hands
    them on: STEP_COLUMNS, plus `replica` for a fleet) into one file at `path`, in `fmt`;
    `close()` finishes it. The file holds what writing the whole steps frame at once
    would (CSV byte for byte; Parquet the same table, in row groups)."""

    def __init__(self, path: str | Path, fmt: OutputFormat | str) -> None:
        self.path = Path(path)
        self.fmt = OutputFormat(fmt)
        self.rows = 0
        self._csv = None
        self._pq = None
        self.closed = False
        if self.fmt is OutputFormat.CSV:
            self._csv = open(self.path, "w", newline="")  # noqa: SIM115 (closed in close)
            self._header = True

    def __call__(self, cols: dict[str, np.ndarray]) -> None:
        n = len(cols["start_s"])
        if self._csv is not None:
            import pandas as pd

            pd.DataFrame(cols).to_csv(
                self._csv, index=False, header=self._header, float_format=None,
                lineterminator="\n")
            self._header = False
        elif n:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table({k: np.asarray(v) for k, v in cols.items()})
            if self._pq is None:
                self._pq = pq.ParquetWriter(str(self.path), table.schema)
            self._pq.write_table(table)
        self.rows += n

    def close(self) -> Path:
        """Finish the file (an empty run still gets its header / schema)."""
        if self._csv is not None:
            if self._header:  # nothing written: the header alone
                import pandas as pd

                pd.DataFrame({k: np.zeros(0, t) for k, t in STEP_COLUMNS.items()}).to_csv(
                    self._csv, index=False, lineterminator="\n")
                self._header = False
            self._csv.close()
            self._csv = None
        if self.fmt is OutputFormat.PARQUET and not self.closed:
            if self._pq is None:  # nothing written: the schema alone
                import pyarrow.parquet as pq

                self._pq = pq.ParquetWriter(str(self.path), _step_schema())
            self._pq.close()
            self._pq = None
        self.closed = True
        return self.path


def read_table(path: str | Path):
    """A requests / steps / schedule file of a run, Parquet or CSV (by its suffix)."""
    import pandas as pd

    path = Path(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path)

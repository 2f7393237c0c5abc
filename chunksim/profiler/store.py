"""Profile files: the append-as-you-go checkpoint and the atomic final CSV + JSON.

Checkpoint = `NAME.partial.csv` (one row appended and flushed per measured point and, with
`--passes`, per later look at a point, the pass number in a last `pass` column; a line cut
short by a kill is dropped on reading) + `NAME.partial.json` (the run's identity, checked on
`--resume`, and the wall time spent so far). The final pair is written to temp files in
the same directory and `os.replace`d, CSV first, so a reader never sees a half-written
table or a JSON whose `content_sha256` belongs to another CSV.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

from chunksim.atomic import write_bytes
from chunksim.profiler.grid import GridPoint
from chunksim.profiler.timing import Timing

COLUMNS = ("chunk_len", "prior_len", "decode_count", "kv_len",
           "median_s", "p10_s", "p90_s", "mean_s", "repeats")
"""CSV header, in docs/profile-format.md's order."""
CHECKPOINT_COLUMNS = (*COLUMNS, "pass")
"""The checkpoint's header: a row is pass 1's measurement or a later pass's look."""


def row_of(point: GridPoint, timing: Timing) -> tuple:
    """One CSV row (floats at full precision)."""
    return (*point.key(), repr(timing.median_s), repr(timing.p10_s), repr(timing.p90_s),
            repr(timing.mean_s), timing.repeats)


def point_of(row: dict[str, str]) -> GridPoint:
    return GridPoint(prior_len=int(row["prior_len"]), chunk_len=int(row["chunk_len"]),
                     decode_count=int(row["decode_count"]), kv_len=int(row["kv_len"]))


def csv_bytes(rows: list[tuple]) -> bytes:
    """The table's bytes: header plus rows sorted by (prior, chunk, decode, kv)."""
    def sort_key(r: tuple) -> tuple:
        return (r[1], r[0], r[2], r[3])

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(sorted(rows, key=sort_key))
    return buf.getvalue().encode()


def write_profile(out_csv: Path, rows: list[tuple], meta: dict) -> dict:
    """Write `NAME.csv` and `NAME.json` atomically; returns the JSON object written (meta +
    `content_sha256` + `points`)."""
    data = csv_bytes(rows)
    meta = {"format": "chunksim-profile/1", "content_sha256": hashlib.sha256(data).hexdigest(),
            **meta, "points": len(rows)}
    write_bytes(out_csv, data)
    write_bytes(out_csv.with_suffix(".json"), (json.dumps(meta, indent=2) + "\n").encode())
    return meta


class Checkpoint:
    """The partial table of a run in progress, next to its final CSV. `columns` and
    `parse` (a CSV row dict -> (row, pass), raising KeyError / TypeError / ValueError on
    a malformed one) default to the whole-step table's; a component profile passes its
    own (`profiler.component_run`)."""

    def __init__(self, out_csv: Path, columns: tuple[str, ...] = CHECKPOINT_COLUMNS,
                 parse: Callable[[dict[str, str]], tuple[object, int]] | None = None):
        self.csv_path = out_csv.with_name(out_csv.stem + ".partial.csv")
        self.meta_path = out_csv.with_name(out_csv.stem + ".partial.json")
        self.columns = columns
        self.parse = parse or _parse_whole_step

    def exists(self) -> bool:
        return self.csv_path.exists() or self.meta_path.exists()

    def start(self, identity: dict) -> None:
        """Begin a fresh checkpoint for a run with this identity."""
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        self.csv_path.write_text(",".join(self.columns) + "\n")
        self.save_meta(identity, elapsed_s=0.0)

    def save_meta(self, identity: dict, elapsed_s: float) -> None:
        write_bytes(self.meta_path, (json.dumps(
            {"identity": identity, "elapsed_s": elapsed_s}, indent=2) + "\n").encode())

    def load(self, identity: dict) -> tuple[list[tuple[object, int]], float]:
        """(row, pass) measured so far and wall time spent; ValueError if the identity
        differs."""
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--resume: cannot read checkpoint {self.meta_path} ({exc}); "
                             f"delete {self.csv_path.name} and {self.meta_path.name} and "
                             f"run without --resume") from None
        saved = meta.get("identity", {})
        diff = sorted(k for k in identity.keys() | saved.keys()
                      if identity.get(k) != saved.get(k))
        if diff:
            detail = "; ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {identity.get(k)!r}"
                               for k in diff)
            raise ValueError(f"--resume: checkpoint {self.csv_path} was made by a different "
                             f"run ({detail}); rerun with the same options, or delete the "
                             f"checkpoint and start over without --resume")
        return self._read_rows(), float(meta.get("elapsed_s", 0.0))

    def _read_rows(self) -> list[tuple[object, int]]:
        if not self.csv_path.exists():
            return []
        text = self.csv_path.read_text()
        if text and not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]  # drop a line cut short by a kill
        rows = []
        for r in csv.DictReader(io.StringIO(text)):
            try:
                rows.append(self.parse(r))
            except (KeyError, TypeError, ValueError):
                continue  # a malformed line (torn write): that point is simply re-measured
        return rows

    def append(self, row: tuple, pass_no: int = 1) -> None:
        """Append one measured row (of pass `pass_no`) and push it to disk before the next
        point starts."""
        with self.csv_path.open("a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow((*row, pass_no))
            f.flush()
            os.fsync(f.fileno())

    def remove(self) -> None:
        self.csv_path.unlink(missing_ok=True)
        self.meta_path.unlink(missing_ok=True)


def _parse_whole_step(r: dict[str, str]) -> tuple[tuple, int]:
    p = point_of(r)
    return ((*p.key(), *(repr(float(r[c])) for c in COLUMNS[4:8]), int(r["repeats"])),
            int(r["pass"]))

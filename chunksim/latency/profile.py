"""Load a latency profile (table + provenance) written by `sim profile`: a whole-step table
(`chunksim-profile/1`) or a component table (`chunksim-components/1`).

Format: docs/profile-format.md. The bundled default lives in chunksim/data/profiles/.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chunksim.core.errors import InputError, reading
from chunksim.latency.component_table import FORMAT as COMPONENT_FORMAT
from chunksim.latency.component_table import KEY_COLUMNS as COMPONENT_KEYS
from chunksim.latency.component_table import Components, kind_of, parse
from chunksim.latency.csv_columns import CsvError, numeric, read_columns, row_count

KEY_COLUMNS = ("chunk_len", "prior_len", "decode_count", "kv_len")
TIME_COLUMNS = ("median_s", "p10_s", "p90_s")
REQUIRED_COLUMNS = KEY_COLUMNS + TIME_COLUMNS
DEFAULT_PROFILE = "tiny-cpu-components"
MAX_KEY = 10_000_000
"""Largest token count or decode count a profile row may hold (a data error beyond)."""
MAX_STEP_S = 1e6
"""Longest step time a profile row may hold, seconds (a data error beyond)."""

if TYPE_CHECKING:  # annotations only: the CLI starts without pandas
    import pandas as pd


def engine_devices(provenance: dict) -> int:
    """GPUs one engine of a profile occupies: its tensor- (and expert-) parallel degree,
    `components.tp` (1 when unrecorded)."""
    tp = (provenance.get("components") or {}).get("tp")
    return tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1


@dataclass(frozen=True)
class Profile:
    """A measured latency table and where it came from."""

    columns: Mapping[str, np.ndarray]
    """One array per column of the table (docs/profile-format.md), one entry per measured
    point: what the latency models read (`table` is the same as a pandas DataFrame)."""
    provenance: dict
    """Device, dtype, model shape, torch version, threads, date, grid, ..."""
    path: str
    """Where the CSV was read from (or the bundled profile's name)."""
    sha256: str
    """sha256 of the CSV bytes: stamped on every result made with this profile."""
    kind: str = "whole-step"
    """`whole-step` (chunksim-profile/1) or `components` (chunksim-components/1)."""

    @classmethod
    def of_frame(cls, table: pd.DataFrame, provenance: dict, path: str, sha256: str,
                 kind: str = "whole-step") -> Profile:
        """A profile of a table held as a DataFrame (measured or edited in memory)."""
        prof = cls({c: table[c].to_numpy() for c in table.columns}, provenance, path,
                   sha256, kind)
        prof.__dict__["table"] = table  # the frame given, not one rebuilt from it
        return prof

    def with_table(self, table: pd.DataFrame, path: str | None = None) -> Profile:
        """This profile with another table (an edited or scaled copy of its own): a new
        profile object, so nothing derived from the old table carries over."""
        return Profile.of_frame(table, self.provenance, self.path if path is None else path,
                                self.sha256, self.kind)

    @cached_property
    def table(self) -> pd.DataFrame:
        """The columns as a pandas DataFrame, built on first use (a run reads `columns`
        and never imports pandas)."""
        import pandas as pd

        return pd.DataFrame(dict(self.columns))

    @cached_property
    def components(self) -> Components:
        """A component profile's grids (`component_table.parse` of `columns`), built once
        per profile object: every engine of a grid or a capacity search reads the same
        grids, so they are parsed once per process, not once per run. Neither `columns`
        nor `table` is to be changed after load (a changed table is a new Profile:
        `with_table`)."""
        return parse(self.columns, self.path)

    @cached_property
    def derived(self) -> dict:
        """What latency models derive from this profile object's grids alone, kept for
        the next model of the same profile (a capacity search builds one a probe),
        keyed by whatever else each depends on (`composed.ComponentModel._lines`)."""
        return {}

    @property
    def max_position(self) -> int | None:
        """The profiled model's maximum position (its RoPE table length), None when the
        provenance does not record one."""
        model = self.provenance.get("model")
        pos = model.get("max_position") if isinstance(model, dict) else None
        return pos if isinstance(pos, int) and not isinstance(pos, bool) and pos >= 2 else None

    @property
    def devices(self) -> int:
        """GPUs one engine of this profile occupies (`engine_devices`)."""
        return engine_devices(self.provenance)

    @property
    def label(self) -> str:
        """Short human label, e.g. 'tiny · cpu float32 · 1 thread'."""
        p = self.provenance
        m = p.get("model")
        model = m.get("name", "?") if isinstance(m, dict) else "?"
        dev = p.get("device_name") or p.get("device", "?")
        threads = p.get("threads")
        t = f" · {threads} thread{'s' if threads != 1 else ''}" if threads else ""
        tp = (p.get("components") or {}).get("tp") or 1
        shards = f" · tp {tp}" if tp > 1 else ""
        kind = " · components" if self.kind == "components" else ""
        return f"{model} · {dev} · {p.get('dtype', '?')}{t}{shards}{kind}"


def bundled_profiles() -> list[str]:
    """Names of the profiles shipped inside the package."""
    root = resources.files("chunksim") / "data" / "profiles"
    return sorted(p.name[:-4] for p in root.iterdir() if p.name.endswith(".csv"))


def _resolve(name_or_path: str | None) -> Path:
    if name_or_path is None:
        name_or_path = DEFAULT_PROFILE
    path = Path(name_or_path)
    if path.suffix == ".csv" or path.exists():
        if path.suffix != ".csv":
            path = path.with_suffix(".csv")
        if not path.is_file():
            raise InputError(f"--profile {name_or_path}: no such file {path}")
        return path
    bundled = resources.files("chunksim") / "data" / "profiles" / f"{name_or_path}.csv"
    if not bundled.is_file():
        raise InputError(
            f"--profile {name_or_path!r} is neither a CSV file nor a bundled profile; "
            f"bundled: {', '.join(bundled_profiles()) or 'none'}"
        )
    return Path(str(bundled))


def load_profile(name_or_path: str | None = None) -> Profile:
    """Read a profile CSV and its JSON provenance; check columns, values and the content
    hash. Anything malformed raises InputError naming the file (and row and column)."""
    path = _resolve(name_or_path)
    with reading(path, "profile"):
        return _load(path)


def _load(path: Path) -> Profile:
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    meta_path = path.with_suffix(".json")
    provenance: dict = {}
    if meta_path.is_file():
        with reading(meta_path, "profile provenance"):
            try:
                provenance = json.loads(meta_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise InputError(f"profile provenance {meta_path} is not valid JSON: "
                                 f"{exc}") from None
        _check_provenance(meta_path, provenance)
        want = provenance.get("content_sha256")
        if want and want != sha:
            raise InputError(
                f"profile {path}: content sha256 {sha[:12]}… differs from {want[:12]}… in "
                f"{meta_path.name}; the table was edited after profiling — re-run sim profile"
            )
    try:
        table = read_columns(raw)
    except CsvError as exc:
        raise InputError(f"profile {path} is not a readable CSV: {exc}") from None
    if kind_of(table, provenance) == "components":
        missing = [c for c in ("component", *COMPONENT_KEYS) if c not in table]
        if not missing:  # (a missing column is parse's to name)
            _refuse_duplicates(path, table, ("component", *COMPONENT_KEYS))
        prof = Profile(columns=table, provenance=provenance, path=str(path), sha256=sha,
                       kind="components")
        prof.components  # noqa: B018 - every fault named by file, line and column, now
        return prof
    missing = [c for c in REQUIRED_COLUMNS if c not in table]
    if missing:
        raise InputError(
            f"profile {path} lacks column(s) {missing}; columns present: {list(table)} "
            "(see docs/profile-format.md)"
        )
    if not row_count(table):
        raise InputError(f"profile {path} has no rows")
    for col in KEY_COLUMNS:
        table[col] = _column(path, table, col, integer=True, low=0, high=MAX_KEY)
    for col in TIME_COLUMNS:
        table[col] = _column(path, table, col, integer=False, low=0, high=MAX_STEP_S)
    _refuse_duplicates(path, table, KEY_COLUMNS)
    wrong = np.flatnonzero(table["p10_s"] > table["p90_s"])
    if len(wrong):
        i = int(wrong[0])
        raise InputError(
            f"profile {path} row {i + 2}: p10_s={table['p10_s'][i]} > "
            f"p90_s={table['p90_s'][i]}; the 10th percentile cannot exceed the 90th "
            f"({len(wrong)} such row(s))")
    if not (table["prior_len"] == 0).any():
        raise InputError(f"profile {path} has no main-grid rows (prior_len 0); see "
                         "docs/profile-format.md")
    return Profile(columns=table, provenance=provenance, path=str(path), sha256=sha)


def _refuse_duplicates(path: Path, table: dict[str, np.ndarray], keys) -> None:
    """Two rows for one grid point: which one prices the step would depend on the row
    order, so neither is taken; name both lines."""
    rows = list(zip(*(map(str, table[k].tolist()) for k in keys), strict=True))
    counts = Counter(rows)
    if len(counts) == len(rows):
        return
    first = next(i for i, row in enumerate(rows) if counts[row] > 1)
    second = rows.index(rows[first], first + 1)
    point = ", ".join(f"{k}={table[k][first]}" for k in keys)
    shared = sum(n for n in counts.values() if n > 1)
    raise InputError(f"profile {path}: lines {first + 2} and {second + 2} both time the grid "
                     f"point {point} ({shared} rows share a point); keep one row per "
                     "point (re-run sim profile, or delete the stale row)")


def _column(path: Path, table: dict[str, np.ndarray], col: str, integer: bool, low: float,
            high: float) -> np.ndarray:
    """`col` as numbers (int64 for keys), or InputError naming the first bad row."""
    x = numeric(table[col])
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(x) | (x > high)
        bad |= (x < low) if integer else (x <= low)
        if integer:
            bad |= x != np.round(x)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        v = table[col][i]
        shown = repr(v) if isinstance(v, str) else str(v)
        need = (f"an integer in [{low:g}, {high:,.0f}]" if integer
                else f"a number of seconds in (0, {high:g}]")
        raise InputError(f"profile {path} row {i + 2}: column {col!r} = {shown} is not "
                         f"{need} ({int(bad.sum())} such row(s))")
    return x.astype(np.int64) if integer else x


_PROVENANCE_TYPES = {"model": dict, "step_overhead": dict, "wake_up": dict,
                     "content_sha256": str, "step_overhead_s": (int, float)}


KNOWN_FORMATS = ("chunksim-profile/1", COMPONENT_FORMAT)
"""The sidecar `format`s this version reads."""


def _check_provenance(meta_path: Path, provenance) -> None:
    if not isinstance(provenance, dict):
        raise InputError(f"profile provenance {meta_path} must hold a JSON object, not "
                         f"{type(provenance).__name__}")
    fmt = provenance.get("format")
    if fmt is not None and fmt not in KNOWN_FORMATS:
        raise InputError(f"profile provenance {meta_path}: format {fmt!r} is not one this "
                         f"version reads ({', '.join(KNOWN_FORMATS)}); re-run sim profile "
                         "with this version, or use the version that wrote it")
    model = provenance.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str) \
            or not model["name"]:
        raise InputError(f"profile provenance {meta_path}: no model name (\"model\": "
                         "{\"name\": ...}); a profile must say which model it timed "
                         "(see docs/profile-format.md)")
    for key, kind in _PROVENANCE_TYPES.items():
        v = provenance.get(key)
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            raise InputError(f"profile provenance {meta_path}: {key!r} = {v!r} has the "
                             "wrong type (see docs/profile-format.md)")

"""Load a latency profile (table + provenance) written by `sim profile`: a whole-step table
(`chunksim-profile/1`) or a component table (`chunksim-components/1`).

Format: docs/profile-format.md. The bundled default lives in chunksim/data/profiles/.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from chunksim.latency.component_table import kind_of, parse

REQUIRED_COLUMNS = ("chunk_len", "prior_len", "decode_count", "kv_len", "median_s", "p10_s",
                    "p90_s")
DEFAULT_PROFILE = "tiny-cpu"


@dataclass(frozen=True)
class Profile:
    """A measured latency table and where it came from."""

    table: pd.DataFrame
    """One row per measured point (columns of docs/profile-format.md)."""
    provenance: dict
    """Device, dtype, model shape, torch version, threads, date, grid, ..."""
    path: str
    """Where the CSV was read from (or the bundled profile's name)."""
    sha256: str
    """sha256 of the CSV bytes: stamped on every result made with this profile."""
    kind: str = "whole-step"
    """`whole-step` (chunksim-profile/1) or `components` (chunksim-components/1)."""

    @property
    def label(self) -> str:
        """Short human label, e.g. 'tiny · cpu float32 · 1 thread'."""
        p = self.provenance
        model = p.get("model", {}).get("name", "?")
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
            raise ValueError(f"--profile {name_or_path}: no such file {path}")
        return path
    bundled = resources.files("chunksim") / "data" / "profiles" / f"{name_or_path}.csv"
    if not bundled.is_file():
        raise ValueError(
            f"--profile {name_or_path!r} is neither a CSV file nor a bundled profile; "
            f"bundled: {', '.join(bundled_profiles()) or 'none'}"
        )
    return Path(str(bundled))


def load_profile(name_or_path: str | None = None) -> Profile:
    """Read a profile CSV and its JSON provenance; check columns and the content hash."""
    path = _resolve(name_or_path)
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    meta_path = path.with_suffix(".json")
    provenance: dict = {}
    if meta_path.is_file():
        try:
            provenance = json.loads(meta_path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"profile provenance {meta_path} is not valid JSON: {exc}") from None
        want = provenance.get("content_sha256")
        if want and want != sha:
            raise ValueError(
                f"profile {path}: content sha256 {sha[:12]}… differs from {want[:12]}… in "
                f"{meta_path.name}; the table was edited after profiling — re-run sim profile"
            )
    try:
        table = pd.read_csv(path)
    except Exception as exc:  # pandas raises several types for malformed CSV
        raise ValueError(f"profile {path} is not a readable CSV: {exc}") from None
    if kind_of(table, provenance) == "components":
        parse(table, str(path))  # every fault named by file, line and column
        return Profile(table=table, provenance=provenance, path=str(path), sha256=sha,
                       kind="components")
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(
            f"profile {path} lacks column(s) {missing}; columns present: {list(table.columns)} "
            "(see docs/profile-format.md)"
        )
    if table.empty:
        raise ValueError(f"profile {path} has no rows")
    bad = table[(table["median_s"] <= 0) | table["median_s"].isna()]
    if len(bad):
        raise ValueError(
            f"profile {path} row {int(bad.index[0]) + 2}: median_s={bad['median_s'].iloc[0]} "
            "must be a positive number of seconds"
        )
    return Profile(table=table, provenance=provenance, path=str(path), sha256=sha)

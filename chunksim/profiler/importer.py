"""`sim profile import`: build a component profile from external per-layer measurements.

Input: a folder with one CSV per component (docs/profile-format.md, "Importing"):

    dense.csv          tokens, time_<unit>
    prefill_attn.csv   chunk_len, prior_len, time_<unit>
    decode_attn.csv    decode_count, kv_len, kv_max, time_<unit>
    embed.csv          tokens, time_<unit>
    head.csv           logits, time_<unit>
    fixed.csv          time_<unit>                     (one row)
    allreduce.csv      tokens, time_<unit>             (optional: tensor parallel)

`<unit>` is `s`, `ms` or `us`; optional `p10_<unit>` and `p90_<unit>` columns give the
spread (else none). Per-layer components are one layer's time. Every fault is reported
with the file, the CSV line and the column.
"""

from __future__ import annotations

import csv
import math
from datetime import datetime, timezone
from pathlib import Path

from chunksim.decoder.config import ModelConfig
from chunksim.latency.component_table import COLUMNS, KEYS, OPTIONAL
from chunksim.latency.profile import load_profile

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def read_component_file(path: Path, component: str) -> list[dict]:
    """Rows of one component file as table rows (seconds); ValueError naming file, line
    and column."""
    keys = KEYS[component]
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = [h.strip() for h in (reader.fieldnames or [])]
            raw = [(i + 2, row) for i, row in enumerate(reader)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path}: cannot read it as CSV ({exc})") from None
    times = [h for h in header if h.startswith("time_")]
    if len(times) != 1 or times[0][5:] not in UNITS:
        raise ValueError(f"{path} line 1: needs one time column named time_s, time_ms or "
                         f"time_us (the unit in the header); has {header}")
    unit = times[0][5:]
    missing = [k for k in keys if k not in header]
    if missing:
        raise ValueError(f"{path} line 1, column {missing[0]}: missing; a {component} file "
                         f"has columns {', '.join(keys) or '(none but time)'} and "
                         f"time_{unit}")
    extra = [h for h in header if h not in (*keys, f"time_{unit}", f"p10_{unit}",
                                            f"p90_{unit}")]
    if extra:
        raise ValueError(f"{path} line 1, column {extra[0]}: not part of a {component} "
                         f"file (columns: {', '.join(keys)}, time_{unit}, optional "
                         f"p10_{unit} / p90_{unit}; all times in one unit)")
    scale = UNITS[unit]
    rows = []
    for line, row in raw:
        row = {(k or "").strip(): v for k, v in row.items()}
        out = dict.fromkeys(COLUMNS[1:8], 0)
        for k in keys:
            v = _num(row.get(k))
            if v is None or v < 0:
                raise ValueError(f"{path} line {line}, column {k}: {row.get(k)!r} is not "
                                 f"a number >= 0")
            out[k] = int(v) if v.is_integer() else v
        t = _num(row.get(f"time_{unit}"))
        if t is None or t < 0:
            raise ValueError(f"{path} line {line}, column time_{unit}: "
                             f"{row.get(f'time_{unit}')!r} is not a time >= 0")
        spread = []
        for col in (f"p10_{unit}", f"p90_{unit}"):
            if col in header:
                v = _num(row.get(col))
                if v is None or v < 0:
                    raise ValueError(f"{path} line {line}, column {col}: {row.get(col)!r} "
                                     f"is not a time >= 0")
                spread.append(v * scale)
            else:
                spread.append(t * scale)
        rows.append({"component": component, **out, "median_s": t * scale,
                     "p10_s": spread[0], "p90_s": spread[1], "mean_s": t * scale,
                     "repeats": 0})
    if not rows:
        raise ValueError(f"{path}: no rows below the header")
    return rows


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def import_components(folder: Path, out_csv: Path, model: ModelConfig, dtype: str,
                      device_name: str, device_memory_bytes: int, tp: int = 1,
                      step_overhead_s: float = 0.0) -> dict:
    """Read `folder`'s component files, write `out_csv` + JSON (format
    chunksim-components/1), check that the result loads; returns the JSON written."""
    from chunksim.profiler.component_run import _model_entry, write_components

    if not folder.is_dir():
        raise ValueError(f"sim profile import {folder}: no such folder")
    if out_csv.suffix != ".csv":
        raise ValueError(f"--out {str(out_csv)!r}: give the CSV path, ending in .csv")
    rows: list[dict] = []
    for component in KEYS:
        path = folder / f"{component}.csv"
        if not path.is_file():
            if component in OPTIONAL:
                continue
            raise ValueError(f"sim profile import {folder}: no {component}.csv; the folder "
                             f"needs {', '.join(k + '.csv' for k in KEYS if k not in OPTIONAL)}")
        rows += read_component_file(path, component)
    known = {f"{k}.csv" for k in KEYS}
    stray = sorted(p.name for p in folder.glob("*.csv") if p.name not in known)
    if stray:
        raise ValueError(f"sim profile import {folder}: {stray[0]} is not a component file "
                         f"(expected {', '.join(sorted(known))})")
    from chunksim.decoder.config import shard_config

    shard = shard_config(model, tp)
    meta = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "imported", "device_name": device_name,
        "device_memory_bytes": device_memory_bytes, "dtype": dtype, "threads": None,
        "model": _model_entry(model),
        "weights_bytes": model.weights_bytes(dtype) // tp,
        "kv_bytes_per_token": shard.kv_bytes_per_token(dtype),
        "step_overhead_s": step_overhead_s,
        "components": {"layers": model.n_layers, "timed_layers": None,
                       "in_sequence_scale": 1.0, "tp": tp, "link": None},
        "calibration": None,
        "imported_from": str(folder),
    }
    try:
        meta = write_components(out_csv, rows, meta)
    except KeyError as exc:  # pragma: no cover - every row has its component's keys
        raise ValueError(f"sim profile import {folder}: {exc}") from None
    try:
        load_profile(str(out_csv))
    except ValueError as exc:
        out_csv.unlink(missing_ok=True)
        out_csv.with_suffix(".json").unlink(missing_ok=True)
        raise ValueError(f"sim profile import {folder}: {exc}") from None
    return meta

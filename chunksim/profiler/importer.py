"""`sim profile import`: build a component profile from external per-layer measurements.

Input: a folder with one CSV per component (docs/profile-format.md, "Importing"):

    dense.csv          tokens, time_<unit>
    prefill_attn.csv   chunk_len, prior_len, time_<unit>
    decode_attn.csv    decode_count, kv_len, kv_max, time_<unit>
    embed.csv          tokens, time_<unit>
    head.csv           logits, time_<unit>
    fixed.csv          time_<unit>                     (one row)
    allreduce.csv      tokens, time_<unit>             (optional: tensor parallel)
    mixed_attn.csv     chunk_len, prior_len, decode_count, kv_len, time_<unit>
                                                       (optional: one call's attention of a
                                                       chunk and decodes together)

`<unit>` is `s`, `ms` or `us`; optional `p10_<unit>` and `p90_<unit>` columns give the
spread (else none). Per-layer components are one layer's time. Every fault is reported
with the input file, its CSV line and the column.

Real profilers measure ragged grids: a component's points need not fill the product of
their key values. A missing point is interpolated linearly along one key axis between the
nearest measured points on it (the first axis that has them on both sides, in key order),
repeatedly until the grid is full; each fill is reported. A point no axis brackets is an
error naming it. A `head.csv` without a logits = 0 row gets one at 0 s (a step whose
chunks all continue their prompts samples nothing), and the import says so. Torch-free.
"""

from __future__ import annotations

import csv
import math
import re
from datetime import datetime, timezone
from pathlib import Path

from chunksim.decoder.config import ModelConfig
from chunksim.latency.component_table import COLUMNS, KEYS, OPTIONAL, RATIO_DIGITS
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
                     "repeats": 0, "origin": (str(path), line)})
    if not rows:
        raise ValueError(f"{path}: no rows below the header")
    return rows


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fill_ragged(rows: list[dict], component: str) -> list[str]:
    """Fill `rows` (one component's, in place) to the full product of their key values by
    linear interpolation along one axis at a time; returns a line per filled point.
    ValueError naming the point when no axis brackets it."""
    keys = list(KEYS[component])
    if len(keys) < 2:
        return []

    def key(r: dict) -> tuple:
        k = [r[c] for c in keys]
        if component == "decode_attn":  # the spread axis is kv_max / kv_len
            k[2] = round(r["kv_max"] / r["kv_len"], RATIO_DIGITS)
        return tuple(k)

    have = {key(r): r for r in rows}
    axes = [sorted({k[a] for k in have}) for a in range(len(keys))]
    from itertools import product

    missing = [k for k in product(*axes) if k not in have
               and not (component == "decode_attn" and k[0] == 1 and k[2] != 1)]
    notes = []
    while missing:
        left = []
        for k in missing:
            got = None
            for a, ax in enumerate(axes):
                line = [(x, have[k[:a] + (x,) + k[a + 1:]]) for x in ax
                        if k[:a] + (x,) + k[a + 1:] in have]
                lo = [(x, r) for x, r in line if x < k[a]]
                hi = [(x, r) for x, r in line if x > k[a]]
                if lo and hi:
                    (x0, r0), (x1, r1) = lo[-1], hi[0]
                    w = (k[a] - x0) / (x1 - x0)
                    got = {c: (1 - w) * r0[c] + w * r1[c]
                           for c in ("median_s", "p10_s", "p90_s", "mean_s")}
                    name = "kv_max/kv_len" if component == "decode_attn" and a == 2 else keys[a]
                    got["via"] = f"{name} {x0:g}..{x1:g}"
                    break
            if got is None:
                left.append(k)
                continue
            r = {**dict.fromkeys(COLUMNS[1:8], 0), "component": component,
                 **dict(zip(keys, k, strict=True)), "repeats": 0, "origin": None}
            if component == "decode_attn":
                r["kv_max"] = k[1] * k[2]
            via = got.pop("via")
            r.update(got)
            rows.append(r)
            have[k] = r
            notes.append(f"{component} at {({c: r[c] for c in keys})}: not measured, "
                         f"interpolated along {via}")
        if len(left) == len(missing):
            k = left[0]
            raise ValueError(f"{component}.csv: no measured points bracket "
                             f"{dict(zip(keys, k, strict=True))} along any key axis; "
                             f"measure it, or a point on each side of it")
        missing = left
    return notes


def _located(exc: ValueError, table_rows: list[dict], folder: Path) -> ValueError:
    """A fault of the assembled table, named by the input file and line it came from."""
    msg = str(exc)
    m = re.search(r"line (\d+), column (\w+): (.*)", msg)
    if m:
        i = int(m.group(1)) - 2
        origin = table_rows[i].get("origin") if 0 <= i < len(table_rows) else None
        if origin:
            col = m.group(2)
            col = {"median_s": "time_<unit>"}.get(col, col)
            return ValueError(f"{origin[0]} line {origin[1]}, column {col}: {m.group(3)}")
    return ValueError(f"sim profile import {folder}: {msg.split(': ', 1)[-1]}")


def import_components(folder: Path, out_csv: Path, model: ModelConfig, dtype: str,
                      device_name: str, device_memory_bytes: int | None, tp: int = 1,
                      step_overhead_s: float = 0.0) -> dict:
    """Read `folder`'s component files, fill ragged grids, check the table, write
    `out_csv` + JSON (format chunksim-components/1); returns the JSON written (with
    `import_notes`: what was filled)."""
    import pandas as pd

    from chunksim.latency.component_table import parse
    from chunksim.profiler.component_write import _model_entry, write_components

    if not folder.is_dir():
        raise ValueError(f"sim profile import {folder}: no such folder")
    if out_csv.suffix != ".csv":
        raise ValueError(f"--out {str(out_csv)!r}: give the CSV path, ending in .csv")
    rows: list[dict] = []
    notes: list[str] = []
    for component in KEYS:
        path = folder / f"{component}.csv"
        if not path.is_file():
            if component in OPTIONAL:
                continue
            raise ValueError(f"sim profile import {folder}: no {component}.csv; the folder "
                             f"needs {', '.join(k + '.csv' for k in KEYS if k not in OPTIONAL)}")
        got = read_component_file(path, component)
        notes += fill_ragged(got, component)
        if component == "head" and not any(r["logits"] == 0 for r in got):
            got.append({**dict.fromkeys(COLUMNS[1:8], 0), "component": "head",
                        "median_s": 0.0, "p10_s": 0.0, "p90_s": 0.0, "mean_s": 0.0,
                        "repeats": 0, "origin": None})
            notes.append(f"{path.name} has no logits = 0 row: added one at 0 s (a step "
                         f"whose chunks all continue their prompts samples nothing)")
        rows += got
    known = {f"{k}.csv" for k in KEYS}
    stray = sorted(p.name for p in folder.glob("*.csv") if p.name not in known)
    if stray:
        raise ValueError(f"sim profile import {folder}: {stray[0]} is not a component file "
                         f"(expected {', '.join(sorted(known))})")
    order = {k: i for i, k in enumerate(KEYS)}
    rows.sort(key=lambda r: (order[r["component"]], *(r[c] for c in COLUMNS[1:8])))
    table = pd.DataFrame([{c: r[c] for c in COLUMNS} for r in rows], columns=list(COLUMNS))
    try:
        parse(table, "(import)")
    except ValueError as exc:
        raise _located(exc, rows, folder) from None
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
        "framework": {"step_s": step_overhead_s,
                      "source": "--framework-ms, given at import" if step_overhead_s
                      else "none given (0)"},
        "components": {"layers": model.n_layers, "timed_layers": None,
                       "in_sequence_scale": 1.0, "tp": tp, "link": None,
                       "mixed_attention": ("joint (mixed_attn.csv)"
                                           if (folder / "mixed_attn.csv").is_file()
                                           else "sum-of-parts")},
        "calibration": None,
        "imported_from": str(folder),
        "source": {"kind": "csv", "folder": str(folder), "filled_points": len(notes)},
    }
    clean = [{k: v for k, v in r.items() if k != "origin"} for r in rows]
    meta = write_components(out_csv, clean, meta)
    try:
        load_profile(str(out_csv))
    except ValueError as exc:  # pragma: no cover - parse() above checked the same table
        out_csv.unlink(missing_ok=True)
        out_csv.with_suffix(".json").unlink(missing_ok=True)
        raise ValueError(f"sim profile import {folder}: {exc}") from None
    return {**meta, "import_notes": notes}

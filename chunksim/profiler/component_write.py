"""Write a component profile (`chunksim-components/1`): its CSV bytes and its JSON.

Torch-free, so that `sim profile import` runs where torch is not installed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

from chunksim.atomic import write_bytes
from chunksim.decoder.config import ModelConfig
from chunksim.latency.component_table import COLUMNS, FORMAT, KEYS


def _model_entry(cfg: ModelConfig) -> dict:
    d = cfg.as_dict()
    head = {k: d.pop(k) for k in ("name", "n_layers", "hidden_size", "n_heads", "n_kv_heads",
                                  "head_dim", "intermediate_size", "vocab_size", "max_position")}
    return {**head, **d}



def csv_bytes(rows: list[dict]) -> bytes:
    """The table: header, rows by component (docs order), then by their keys."""
    order = {k: i for i, k in enumerate(KEYS)}
    rows = sorted(rows, key=lambda r: (order[r["component"]],
                                       *(r[c] for c in COLUMNS[1:8])))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow([r["component"], *(int(r[c]) if float(r[c]).is_integer() else r[c]
                                      for c in COLUMNS[1:8]),
                    *(repr(float(r[c])) for c in COLUMNS[8:12]), int(r["repeats"])])
    return buf.getvalue().encode()


def write_components(out_csv: Path, rows: list[dict], meta: dict) -> dict:
    """Write NAME.csv and NAME.json atomically (CSV first); returns the JSON written."""
    data = csv_bytes(rows)
    meta = {"format": FORMAT, "content_sha256": hashlib.sha256(data).hexdigest(), **meta,
            "points": len(rows)}
    write_bytes(out_csv, data)
    write_bytes(out_csv.with_suffix(".json"), (json.dumps(meta, indent=2) + "\n").encode())
    return meta

"""The profile's provenance as report rows (what was measured, where, when, with what)."""

from __future__ import annotations

import json

_FIELDS = ("device", "device_name", "dtype", "threads", "torch_version", "attention_backend",
           "created", "step_overhead_s", "points", "elapsed_s")


def provenance_rows(label: str, path: str, sha256: str, provenance: dict) -> list[list[str]]:
    rows = [["label", label], ["file", path.rsplit("/", 1)[-1]], ["sha256", sha256]]
    for k in _FIELDS:
        if provenance.get(k) is not None:
            rows.append([k, str(provenance[k])])
    for k in ("model", "grid"):
        if provenance.get(k):
            v = provenance[k]
            rows.append([k, ", ".join(f"{a}={json.dumps(b)}" for a, b in v.items())
                         if isinstance(v, dict) else str(v)])
    return rows

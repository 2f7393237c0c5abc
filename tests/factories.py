"""Small factories for simulator tests: synthetic latency profiles and workloads, no model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from chunksim.core.spec import RequestSpec, Workload
from chunksim.decoder.config import ModelConfig
from chunksim.latency.profile import load_profile

SMALL = ModelConfig(name="small", n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2,
                    head_dim=16, intermediate_size=128, vocab_size=512, max_position=2048)
"""A model small enough for live runs and real forward passes in tests (seconds on CPU)."""

CHUNKS = (0, 16, 64, 256, 1024, 4096, 16384)
DECODES = (0, 1, 4, 16, 64, 256)
KVS = (1, 256, 1024, 4096, 16384)
PRIORS = (1024, 4096, 16384)


def linear_time(c: float, p: float, d: float, k: float) -> float:
    """A step-time law that multilinear interpolation reproduces exactly on the grid cells
    (linear in each key separately): 2 ms fixed + 10 us/token + 20 ns per decode-context
    token + 1 ns per chunk-token x prior-token."""
    return 0.002 + 10e-6 * (c + d) + 20e-9 * d * k + 1e-9 * c * p


def constant_time(step_s: float) -> Callable[[float, float, float, float], float]:
    return lambda c, p, d, k: step_s


def make_profile(tmp: Path, fn: Callable = linear_time, name: str = "test",
                 chunks=CHUNKS, decodes=DECODES, kvs=KVS, priors=PRIORS, spread: float = 1.0,
                 provenance: dict | None = None):
    """Write a profile CSV+JSON computed from `fn(chunk, prior, decodes, kv)` and load it.
    `spread` sets p90/p10 = spread around the median (1.0 = no variance)."""
    rows = []
    for c in chunks:
        for d in decodes:
            if c == 0 and d == 0:
                continue
            for k in (kvs if d else (0,)):
                rows.append((c, 0, d, k))
    for c in chunks:
        if c:
            for p in priors:
                rows.append((c, p, 0, 0))
    df = pd.DataFrame(rows, columns=["chunk_len", "prior_len", "decode_count", "kv_len"])
    med = [fn(c, p, d, k) for c, p, d, k in rows]
    df["median_s"] = med
    df["p10_s"] = [m / spread**0.5 for m in med]
    df["p90_s"] = [m * spread**0.5 for m in med]
    df["mean_s"] = med
    df["repeats"] = 5
    df = df.sort_values(["prior_len", "chunk_len", "decode_count", "kv_len"])
    csv = tmp / f"{name}.csv"
    csv.write_text(df.to_csv(index=False))
    meta = {
        "format": "chunksim-profile/1",
        "content_sha256": hashlib.sha256(csv.read_bytes()).hexdigest(),
        "device": "cpu", "device_name": "synthetic", "dtype": "float32", "threads": 1,
        "model": {"name": "synthetic"},
        "device_memory_bytes": 2**34, "weights_bytes": 2**20, "kv_bytes_per_token": 2048,
        "step_overhead_s": 0.0,
    }
    meta.update(provenance or {})
    (tmp / f"{name}.json").write_text(json.dumps(meta))
    return load_profile(str(csv))


def workload(reqs: list[tuple[float, int, int]], name: str = "test") -> Workload:
    """[(arrival_s, prompt, output), ...] -> Workload (must be sorted by arrival)."""
    return Workload(name, tuple(RequestSpec(i, a, p, o) for i, (a, p, o) in enumerate(reqs)))


def load_script(name: str):
    """`benchmarks/<name>.py` imported as a module (the benchmarks are scripts, not a
    package), for end-to-end tests of their `main`."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

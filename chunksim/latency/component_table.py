"""The component profile's table (`chunksim-components/1`): parse and check it into grids.

One CSV, one row per measured point of one component (docs/profile-format.md). Each
component keys on its own columns and leaves the others 0:

- per layer: `dense` (tokens), `prefill_attn` (chunk_len, prior_len), `decode_attn`
  (decode_count, kv_len = mean context, kv_max = longest context), `allreduce` (tokens;
  tensor-parallel profiles only);
- once per step: `embed` (tokens), `head` (logits), `fixed` (no key, one row);
- per MoE layer (MoE profiles only): `expert` (tokens = tokens routed to one expert; its
  FFN, priced by `latency.moe`), `alltoall` (tokens = the step's; expert-parallel
  dispatch and combine).
- optional, per layer: `mixed_attn` (chunk_len, prior_len, decode_count, kv_len): one
  layer's attention of one chunk and a batch of decodes run as one kernel call, where the
  source measured it (a mixed step's attention is then not the sum of its parts).

Every error names the file, the CSV line and the column at fault.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

FORMAT = "chunksim-components/1"
"""The `format` of a component profile's JSON."""
COLUMNS = ("component", "tokens", "chunk_len", "prior_len", "decode_count", "kv_len",
           "kv_max", "logits", "median_s", "p10_s", "p90_s", "mean_s", "repeats")
"""CSV header, in docs/profile-format.md's order."""
KEY_COLUMNS = COLUMNS[1:8]
REQUIRED = ("component", *KEY_COLUMNS, "median_s", "p10_s", "p90_s")
KEYS: dict[str, tuple[str, ...]] = {
    "dense": ("tokens",),
    "prefill_attn": ("chunk_len", "prior_len"),
    "decode_attn": ("decode_count", "kv_len", "kv_max"),
    "allreduce": ("tokens",),
    "embed": ("tokens",),
    "head": ("logits",),
    "fixed": (),
    "expert": ("tokens",),
    "alltoall": ("tokens",),
    "mixed_attn": ("chunk_len", "prior_len", "decode_count", "kv_len"),
}
"""Each component's key columns (the others must be 0)."""
OPTIONAL = frozenset({"allreduce", "expert", "alltoall", "mixed_attn"})
MINIMUM = {"tokens": 1, "chunk_len": 1, "prior_len": 0, "decode_count": 1, "kv_len": 1,
           "kv_max": 1, "logits": 0}
"""Smallest value of each key column where it is a key."""
RATIO_DIGITS = 6
"""kv_max / kv_len is rounded to this many digits to form the spread axis."""

@dataclass(frozen=True)
class Grid:
    """One component: axes and its median / sigma (log-normal spread) over them."""

    axes: tuple[tuple[float, ...], ...]
    median: np.ndarray
    sigma: np.ndarray


@dataclass(frozen=True)
class Components:
    """The parsed table: every component's grid (`allreduce` may be None)."""

    dense: Grid
    prefill_attn: Grid
    """Axes (chunk_len, prior_len); prior_len starts at 0."""
    decode_attn: Grid
    """Axes (decode_count, kv_len, spread = kv_max / kv_len); spread starts at 1. Spreads a
    decode count cannot reach (kv_max > count x kv_len) are filled along the spread axis."""
    embed: Grid
    head: Grid
    fixed: Grid
    allreduce: Grid | None
    expert: Grid | None = None
    """One routed expert's FFN over the tokens routed to it (MoE profiles)."""
    alltoall: Grid | None = None
    """A MoE layer's expert-parallel dispatch + combine over the step's tokens."""
    mixed_attn: Grid | None = None
    """Axes (chunk_len, prior_len, decode_count, kv_len): a chunk and decodes' attention as
    one call (None: the profile prices a mixed step's attention as the sum of its parts)."""


_Z90 = 1.2815515655446004


def kind_of(table: Mapping[str, np.ndarray], provenance: dict) -> str:
    """`components` for a component profile (`table`: its columns by name), else
    `whole-step`."""
    if provenance.get("format") == FORMAT or "component" in table:
        return "components"
    return "whole-step"


def parse(table: Mapping[str, np.ndarray], path: str) -> Components:
    """Check `table` (its columns by name, as read from `path`) and build the grids;
    ValueError naming file, CSV line and column on any fault."""
    missing = [c for c in REQUIRED if c not in table]
    if missing:
        raise ValueError(f"component profile {path} lacks column(s) {missing}; columns "
                         f"present: {list(table)} (see docs/profile-format.md)")
    if not len(table["component"]):
        raise ValueError(f"component profile {path} has no rows")
    rows: dict[str, list[tuple[int, tuple[float, ...], float, float]]] = {k: [] for k in KEYS}
    names = np.asarray(table["component"]).tolist()
    cols = {c: np.asarray(table[c]).tolist() for c in (*KEY_COLUMNS, "median_s", "p10_s", "p90_s")}
    for i, name in enumerate(names):
        line = i + 2  # CSV line: header is line 1

        def fault(col: str, why: str, line: int = line) -> ValueError:
            return ValueError(f"component profile {path} line {line}, column {col}: {why}")

        if name not in KEYS:
            raise fault("component", f"{name!r} is not a component; use one of "
                                     f"{', '.join(KEYS)}")
        keys = KEYS[name]
        values = []
        for col in KEY_COLUMNS:
            v = _number(cols[col][i])
            if v is None:
                raise fault(col, f"{cols[col][i]!r} is not a number")
            if col in keys:
                if v < MINIMUM[col]:
                    raise fault(col, f"{v:g} is below {MINIMUM[col]} for a {name} row")
                values.append(v)
            elif v != 0:
                raise fault(col, f"a {name} row keys on {', '.join(keys) or 'nothing'}; "
                                 f"leave {col} 0 (it is {v:g})")
        times = []
        for col in ("median_s", "p10_s", "p90_s"):
            v = _number(cols[col][i])
            if v is None or v < 0:
                raise fault(col, f"{cols[col][i]!r} must be a number of seconds >= 0")
            times.append(v)
        if name == "decode_attn":
            d, kv, kv_max = values
            if kv_max < kv:
                raise fault("kv_max", f"the longest context {kv_max:g} is below the mean "
                                      f"kv_len {kv:g}")
            if d == 1 and kv_max != kv:
                raise fault("kv_max", "one decode's longest context is its own: kv_max "
                                      "must equal kv_len")
            values = [d, kv, round(kv_max / kv, RATIO_DIGITS)]
        med, p10, p90 = times
        sig = math.log(max(p90, 1e-12) / max(p10, 1e-12)) / (2 * _Z90) if p90 > 0 else 0.0
        rows[name].append((line, tuple(values), med, max(sig, 0.0)))
    for name, got in rows.items():
        if not got and name not in OPTIONAL:
            need = ", ".join(k for k in KEYS if k not in OPTIONAL)
            raise ValueError(f"component profile {path} has no {name!r} rows (column "
                             f"component); a component profile needs {need}")
    if len(rows["fixed"]) != 1:
        line = rows["fixed"][1][0]
        raise ValueError(f"component profile {path} line {line}, column component: a "
                         f"second 'fixed' row; the fixed cost is one row")
    grids = {name: _grid(path, name, got) for name, got in rows.items() if got}
    if grids["prefill_attn"].axes[1][0] != 0:
        raise ValueError(f"component profile {path}: prefill_attn rows lack prior_len 0 "
                         f"(column prior_len); a first chunk has no prior context")
    if grids["decode_attn"].axes[2][0] != 1:
        raise ValueError(f"component profile {path}: decode_attn rows lack kv_max == "
                         f"kv_len (column kv_max); equal contexts are the spread axis's start")
    return Components(**{k: grids.get(k) for k in OPTIONAL},
                      **{k: v for k, v in grids.items() if k not in OPTIONAL})


def _number(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _grid(path: str, name: str, got: list) -> Grid:
    ndim = len(got[0][1])
    axes = tuple(tuple(sorted({v[a] for _, v, _, _ in got})) for a in range(ndim))
    shape = tuple(len(a) for a in axes) or (1,)
    med = np.full(shape, np.nan)
    sig = np.full(shape, np.nan)
    index = [{x: j for j, x in enumerate(a)} for a in axes]
    for line, v, m, s in got:
        at = tuple(index[a][v[a]] for a in range(ndim)) or (0,)
        if not np.isnan(med[at]):
            raise ValueError(f"component profile {path} line {line}, column component: "
                             f"{name} at {v} appears twice")
        med[at], sig[at] = m, s
    if name == "decode_attn":
        # a spread beyond what a decode count can reach: continue the spread axis linearly
        med, sig = _fill_spread(med, axes[2]), _fill_spread(sig, axes[2])
    hole = np.argwhere(np.isnan(med))
    if len(hole):
        point = {KEYS[name][a] if name != "decode_attn" or a < 2 else "kv_max/kv_len":
                 axes[a][j] for a, j in enumerate(hole[0])}
        raise ValueError(f"component profile {path}: {name} rows do not fill their grid; "
                         f"missing {point} (every combination of the key columns' values "
                         f"must be measured)")
    return Grid(axes=axes, median=med, sigma=sig)


def _fill_spread(g: np.ndarray, spreads: tuple[float, ...]) -> np.ndarray:
    """Fill NaN along the last (spread) axis from the last two measured points of each
    (count, kv) line, flat from one; lines with no spread-1 point stay NaN."""
    g = g.copy()
    x = np.asarray(spreads, dtype=float)
    for a in range(g.shape[0]):
        for b in range(g.shape[1]):
            line = g[a, b]
            ok = np.flatnonzero(~np.isnan(line))
            if len(ok) == 0 or ok[0] != 0 or len(ok) == len(line):
                continue
            if len(ok) == 1:
                line[1:] = line[0]
                continue
            i, j = ok[-2], ok[-1]
            slope = (line[j] - line[i]) / (x[j] - x[i])
            for k in np.flatnonzero(np.isnan(line)):
                if x[k] > x[j]:
                    line[k] = line[j] + slope * (x[k] - x[j])
                else:
                    line[k] = np.interp(x[k], x[ok], line[ok])
    return g

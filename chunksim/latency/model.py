"""The latency model: a step's composition in, seconds out. Pure; reads only the table.

How a real step maps onto the table (keys: chunk_len, decode_count, kv_len, prior_len):

- Prefill chunks: all chunk tokens of the step add up to `chunk_len` (the linear layers see
  the step's total tokens). Their attention work, sum_i L_i * (c_i + (L_i + 1) / 2) for a
  chunk of L_i tokens after c_i tokens of its own prior context, is matched by one chunk
  of the total length with an *effective* prior context c_eff (clamped at 0), which feeds
  the prior-context correction T(chunk, c_eff) - T(chunk, 0).
- Decodes: `decode_count` is their number and `kv_len` their mean context, since decode
  attention cost is linear in each decode's context.
- A request's one new token counts as a decode only when `Plan.is_decode` says so; a
  prompt's 1-token tail, or a re-admitted request's 1-token recompute, is a 1-token chunk
  of the prefill part over its prior context (the records count it there too).

Interpolation is multilinear on the measured grid; outside the grid it extrapolates
linearly from the edge cell, never below the edge's own figure beyond the far end, and
flags the step (counted in the run summary). Optional jitter multiplies the forward-pass
time by exp(sigma * z), with sigma from the measured p10/p90 spread (log-normal) and z a
seeded standard normal per step index; beyond the grid sigma is the edge's, never
extrapolated (a spread is a property of measured points, not a trend).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from chunksim.core.shape import BatchShape
from chunksim.latency.base import StepCosts
from chunksim.latency.profile import Profile

_Z90 = 1.2815515655446004  # standard normal 90th percentile


class _Axis:
    """One grid axis: cell lookup with linear extrapolation beyond the ends."""

    __slots__ = ("values", "lo", "hi", "n")

    def __init__(self, values: list[float]) -> None:
        self.values = [float(v) for v in values]
        self.lo = self.values[0]
        self.hi = self.values[-1]
        self.n = len(values)

    def cell(self, x: float) -> tuple[int, float, bool]:
        """(left index, weight of the right neighbour, outside the grid)."""
        v = self.values
        if self.n == 1:
            return 0, 0.0, x != v[0]
        i = bisect_right(v, x) - 1
        i = 0 if i < 0 else (self.n - 2 if i > self.n - 2 else i)
        return i, (x - v[i]) / (v[i + 1] - v[i]), x < self.lo or x > self.hi

    def clamp(self, x: float) -> float:
        """`x` held inside the axis's range (where a spread is read: never extrapolated)."""
        return self.lo if x < self.lo else (self.hi if x > self.hi else x)

    def cells(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = np.asarray(self.values)
        if self.n == 1:
            return np.zeros(len(x), int), np.zeros(len(x)), x != v[0]
        i = np.clip(np.searchsorted(v, x, side="right") - 1, 0, self.n - 2)
        return i, (x - v[i]) / (v[i + 1] - v[i]), (x < self.lo) | (x > self.hi)


def _rows(table: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of a table (columns by name) where `mask` holds."""
    return {c: v[mask] for c, v in table.items()}


class LatencyModel(StepCosts):
    """Step time from a whole-step profile: `step_s(shape)`, and a vectorized decode-only
    path."""

    prices_spread = False
    """Decode contexts are priced by their mean alone (the engine passes no longest)."""

    def __init__(self, profile: Profile, step_overhead_s: float | None = None) -> None:
        t = {c: np.asarray(v) for c, v in profile.columns.items()}
        main = _rows(t, t["prior_len"] == 0)
        self.chunk = _Axis(np.unique(main["chunk_len"]).tolist())
        self.dec = _Axis(np.unique(main["decode_count"]).tolist())
        kvs = np.unique(main["kv_len"][main["decode_count"] > 0]).tolist() or [0]
        self.kv = _Axis(kvs)
        if self.chunk.lo != 0 or self.dec.lo != 0:
            raise ValueError(
                f"profile {profile.path}: the main grid must include chunk_len 0 and "
                f"decode_count 0 (has chunk_len from {self.chunk.lo}, decode_count from "
                f"{self.dec.lo}); see docs/profile-format.md"
            )
        med = self._grid(main, "median_s")
        p10, p90 = self._grid(main, "p10_s"), self._grid(main, "p90_s")
        sig = np.log(np.maximum(p90, 1e-12) / np.maximum(p10, 1e-12)) / (2 * _Z90)
        coords = [self.chunk.values, self.dec.values, self.kv.values]
        med, filled = _fill_missing(med, coords)
        sig, _ = _fill_missing(sig, coords)
        self.filled = filled
        self.filled_cells = int(filled.sum())
        self.med = med
        self.sig = np.maximum(sig, 0.0)
        self._med_l = med.tolist()
        self._sig_l = self.sig.tolist()
        self._filled_l = filled.tolist()
        # prior-context correction: delta[c, p] = T(c, p) - T(c, 0), p = 0 column is 0
        pri = _rows(t, (t["prior_len"] > 0) & (t["decode_count"] == 0))
        if len(pri["prior_len"]):
            pc = np.unique(pri["chunk_len"]).tolist()
            pp = [0] + np.unique(pri["prior_len"]).tolist()
            delta = np.zeros((len(pc), len(pp)))
            self._lines = {}
            base = {c: self.step_s(BatchShape(prefill_tokens=int(c)), jitter_z=None)[0]
                    for c in pc}
            for c, p, m in zip(pri["chunk_len"].tolist(), pri["prior_len"].tolist(),
                               pri["median_s"].tolist(), strict=True):
                delta[pc.index(c), pp.index(p)] = m - base[c]
            self.pchunk, self.pprior = _Axis(pc), _Axis(pp)
            self._delta_l = delta.tolist()
        else:
            self.pchunk = self.pprior = None
            self._delta_l = []
        self.profile_sha256 = profile.sha256
        self._lines: dict[int, _Line] = {}
        self._init_extras(profile, step_overhead_s)

    def _grid(self, main, col: str) -> np.ndarray:
        g = np.full((self.chunk.n, self.dec.n, self.kv.n), np.nan)
        ci = {v: i for i, v in enumerate(self.chunk.values)}
        di = {v: i for i, v in enumerate(self.dec.values)}
        ki = {v: i for i, v in enumerate(self.kv.values)}
        for c, d, k, val in zip(main["chunk_len"].tolist(), main["decode_count"].tolist(),
                                main["kv_len"].tolist(), main[col].tolist(), strict=True):
            if d == 0:
                g[ci[float(c)], 0, :] = val  # decode_count 0: kv is irrelevant, broadcast
            elif float(k) in ki:
                g[ci[float(c)], di[float(d)], ki[float(k)]] = val
        # (chunk 0, decode 0) is not a step; one decode's cost is the closest real figure
        if self.dec.n > 1:
            g[0, 0, :] = g[0, 1, :]
        return g

    # -- scalar path (one step) -------------------------------------------------------
    def _interp3(self, grid: list, c: float, d: float, k: float) -> tuple[float, bool]:
        ic, tc, oc = self.chunk.cell(c)
        id_, td, od = self.dec.cell(d)
        ik, tk, ok = self.kv.cell(k) if d > 0 else (0, 0.0, False)
        acc = 0.0
        filled = False
        for a, wa in ((ic, 1.0 - tc), (ic + 1, tc)):
            if wa == 0.0:
                continue
            ga = grid[a]
            for b, wb in ((id_, 1.0 - td), (id_ + 1, td)):
                if wb == 0.0:
                    continue
                row = ga[b]
                for e, we in ((ik, 1.0 - tk), (ik + 1, tk)):
                    if we == 0.0:
                        continue
                    acc += (wa * wb * we) * row[e]
                    filled = filled or self._filled_l[a][b][e]
        if (oc and c > self.chunk.hi) or (od and d > self.dec.hi) or (ok and k > self.kv.hi):
            # Beyond the grid's far end a step does more work than at the edge: never
            # price it below the edge's figure (a noisy edge cell's negative slope,
            # extrapolated to thousands of decodes, would reach zero).
            edge, _ = self._interp3(grid, min(c, self.chunk.hi), min(d, self.dec.hi),
                                    min(k, self.kv.hi))
            acc = acc if acc > edge else edge
        return acc, oc or od or ok or filled

    def _delta(self, c: float, p: float) -> tuple[float, bool]:
        if self.pchunk is None or p <= 0 or c <= 0:
            return 0.0, False
        ic, tc, oc = self.pchunk.cell(c)
        ip, tp, op = self.pprior.cell(p)
        d = self._delta_l
        val = ((1 - tc) * ((1 - tp) * d[ic][ip] + tp * d[ic][ip + 1])
               + tc * ((1 - tp) * d[ic + 1][ip] + tp * d[ic + 1][ip + 1]))
        return val, oc or op

    def step_s(self, shape: BatchShape, jitter_z: float | None = None) -> tuple[float, bool]:
        """Forward-pass time of one step in seconds (no overhead), and whether the lookup
        left the measured grid. `jitter_z` (a standard normal) applies measured spread."""
        c, d, k = shape.prefill_tokens, shape.decode_count, shape.decode_kv_tokens
        if c == 0:  # decode-only: the one-element case of decode_steps_s (one path)
            t, out = self.decode_steps_s(
                d, np.array([float(k)]), None if jitter_z is None else np.array([jitter_z]),
                stepwise=True)  # (one step)
            return float(t[0]), bool(out[0])
        t, out = self._interp3(self._med_l, c, d, k)
        if shape.prior_tokens > 0:
            dt, out2 = self._delta(c, shape.prior_tokens)
            t += dt
            out = out or out2
        if jitter_z is not None:
            # the spread at the nearest grid point: held at the edge, never extrapolated
            sig, _ = self._interp3(self._sig_l, self.chunk.clamp(c), self.dec.clamp(d),
                                   self.kv.clamp(k))
            t *= math.exp(sig * jitter_z)
        return (t if t > 1e-9 else 1e-9), out

    # -- decode-only steps: one piecewise-linear line over kv per decode count ---------
    def _line(self, decode_count: int) -> _Line:
        line = self._lines.get(decode_count)
        if line is None:
            xs = self.kv.values
            med = [self._interp3(self._med_l, 0, decode_count, x) for x in xs]
            d_sig = self.dec.clamp(decode_count)  # spread: never extrapolated
            sig = [self._interp3(self._sig_l, 0, d_sig, x)[0] for x in xs]
            line = _Line(xs, [m for m, _ in med], [f for _, f in med], sig,
                         self.dec.cell(decode_count)[2])
            self._lines[decode_count] = line
        return line

    def decode_steps_s(self, decode_count: int, kv_tokens: np.ndarray,
                       jitter_z: np.ndarray | None = None,
                       kv_max: np.ndarray | None = None,
                       stepwise: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Times of decode-only steps with `decode_count` decodes at mean contexts
        `kv_tokens` (one entry per step), and their out-of-grid flags (`kv_max`, the longest
        contexts, is not priced by a whole-step table). A decode-only `step_s` is its
        one-element case. `stepwise`: the steps are a decode stretch's (`kv_tokens`
        ascend, one token a step), so their extent is read from the first and last."""
        line = self._line(decode_count)
        xs = line.xs
        kv_tokens = np.asarray(kv_tokens, dtype=np.float64)
        if stepwise:
            lo, hi = float(kv_tokens[0]), float(kv_tokens[-1])
        else:
            lo, hi = float(kv_tokens.min()), float(kv_tokens.max())
        i0 = bisect_right(xs, lo) - 1
        if jitter_z is None and 0 <= i0 < line.last + 1 and hi < xs[i0 + 1]:
            # the whole stretch lies in one kv cell: scalars broadcast, same IEEE ops
            t = line.base[i0] + line.slope[i0] * (kv_tokens - xs[i0])
            out = np.empty(len(kv_tokens), dtype=bool)
            out.fill(line.out_d or line.filled[i0])
            return np.maximum(t, 1e-9), out
        a = line.arrays
        i = a["xs"].searchsorted(kv_tokens, side="right") - 1
        np.minimum(np.maximum(i, 0, out=i), line.last, out=i)
        dx = kv_tokens - a["xs"][i]
        t = a["base"][i] + a["slope"][i] * dx
        if hi > xs[-1]:
            t = np.where((kv_tokens > xs[-1]) & (t < line.end), line.end, t)
        if jitter_z is not None:
            # math.exp, as in step_s: numpy's vectorized exp may differ in the last bit
            sig = a["sbase"][i] + a["sslope"][i] * dx
            sig = np.where(kv_tokens > xs[-1], line.send, sig)  # held at the edges, as
            sig = np.where(kv_tokens < xs[0], line.sbase[0], sig)  # step_s holds it
            e = sig * jitter_z
            t = t * np.fromiter((math.exp(v) for v in e.tolist()), float, len(t))
        out = a["filled"][i] | (kv_tokens < line.xs[0]) | (kv_tokens > line.xs[-1])
        if line.out_d:
            out[:] = True
        return np.maximum(t, 1e-9), out


class _Line:
    """Decode-only step time at one decode count: value and slope per kv cell."""

    __slots__ = ("xs", "base", "slope", "sbase", "sslope", "filled", "last", "out_d", "arrays",
                 "end", "send")

    def __init__(self, xs: list[float], med: list[float], filled_pts: list[bool],
                 sig: list[float], out_d: bool) -> None:
        n = len(xs)
        self.xs = xs if n > 1 else [xs[0], xs[0] + 1.0]
        med = med if n > 1 else [med[0], med[0]]
        sig = sig if n > 1 else [sig[0], sig[0]]
        filled_pts = filled_pts if n > 1 else [filled_pts[0]] * 2
        m = len(self.xs) - 1
        self.last = m - 1
        dx = [self.xs[j + 1] - self.xs[j] for j in range(m)]
        self.base = med[:m]
        self.slope = [(med[j + 1] - med[j]) / dx[j] for j in range(m)]
        self.sbase = sig[:m]
        self.sslope = [(sig[j + 1] - sig[j]) / dx[j] for j in range(m)]
        self.filled = [filled_pts[j] or filled_pts[j + 1] for j in range(m)]
        self.end = med[-1]
        """Time at the last grid kv: the floor beyond it."""
        self.send = sig[-1]
        """Spread at the last grid kv: held beyond it."""
        self.out_d = out_d
        self.arrays = {k: np.asarray(getattr(self, k)) for k in
                       ("xs", "base", "slope", "sbase", "sslope", "filled")}


def _fill_missing(g: np.ndarray, coords: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Fill pruned cells by linear extrapolation along kv (then decode_count) in axis units,
    from the last two measured points of each line; return the grid and the filled mask."""
    filled = np.isnan(g)
    g = g.copy()
    if not filled.any():
        return g, filled
    for axis in (2, 1):
        x = np.asarray(coords[axis], dtype=float)
        others = [n for ax, n in enumerate(g.shape) if ax != axis]
        for idx in np.ndindex(*others):
            sl = list(idx)
            sl.insert(axis, slice(None))
            line = g[tuple(sl)]  # a view: writes land in g
            ok = np.flatnonzero(~np.isnan(line))
            if len(ok) == 0 or len(ok) == len(line):
                continue
            if len(ok) == 1:
                line[np.isnan(line)] = line[ok[0]]
                continue
            a, b = ok[-2], ok[-1]
            slope = (line[b] - line[a]) / (x[b] - x[a])
            miss = np.isnan(line)
            inside = miss & (x < x[b])
            line[inside] = np.interp(x[inside], x[ok], line[ok])
            beyond = miss & (x > x[b])
            line[beyond] = line[b] + slope * (x[beyond] - x[b])
    g[np.isnan(g)] = np.nanmax(g)
    return g, filled

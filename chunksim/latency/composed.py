"""The latency model of a component profile: a step composed from per-layer parts. Pure.

    forward = scale x (layers x (dense(T) + sum_i prefill_attn(L_i, c_i)
                                 + decode_attn(D, mean, longest / mean) + allreduce(T)
                                 [+ routed_experts(T) + alltoall(T)])
                       + embed(T) + head(logits) + fixed)

T is the step's token count (every chunk token and every decode), (L_i, c_i) each prefill
chunk's length and prior context, D the decodes, `mean` and `longest` their contexts (what
the step reads, sum = D x mean, and its longest member, as a kernel's work split sees
it), `logits` the sequences sampling a token. The bracketed terms are a MoE profile's:
`routed_experts(T)` prices its `expert` component by tokens per expert (`latency.moe`).
`scale` is the profile's in-sequence scale (1 unless `sim profile` measured steps run
back to back in a serving-like order systematically slower than each alone; see
docs/profile-format.md).

Each component is interpolated multilinearly on its own grid. Beyond a grid's far end it
extrapolates linearly, never below the edge's figure; below its near end linearly, never
below 0; either way the step is flagged. The spread (sigma of --jitter) is each
component's measured log-normal sigma, read at the nearest grid point (held at the edge,
never extrapolated), weighted by the component's share of the step's time.

A decode-only step is priced along one path: `step_s` of one is the one-step case of
the bulk `decode_steps_s`, so both give bit-identical seconds. Without jitter, a
decode-only step inside the grid is read from its decode line's folded form: the
composition above with its constant parts summed once per cell of the decode table, a
bilinear form in the cell's two weights (equal to composing it, to rounding), which a
bulk segment prices in a few array operations.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from chunksim.core.shape import BatchShape
from chunksim.latency.base import StepCosts
from chunksim.latency.component_table import Components, Grid
from chunksim.latency.moe import Routing, routed_expert_s
from chunksim.latency.profile import Profile

_ROUNDING = 1e-12
"""Relative margin around the ends of a stretch's spreads that encloses every one of them
(each computed within a few ulps of its exact value: `_stepwise_extent`)."""


def _stepwise_extent(kv: np.ndarray, spread: np.ndarray, flat: bool) -> tuple:
    """(lowest, highest) context and spread of a decode stretch's steps, read from its
    ends: the mean contexts ascend exactly (one token a step, each mean rounded once),
    and the spreads (longest / mean, longest growing one token a step too) never grow in
    exact arithmetic, so a margin of `_ROUNDING` around the ends encloses the computed
    ones (`flat`: every spread is exactly 1.0). An extent wider than the points only
    sends them on to the per-point lookup (`_Plane.weights`), never changes a value."""
    if flat:
        return float(kv[0]), float(kv[-1]), 1.0, 1.0
    lo = float(spread[-1]) * (1.0 - _ROUNDING)
    return (float(kv[0]), float(kv[-1]), lo if lo > 1.0 else 1.0,
            float(spread[0]) * (1.0 + _ROUNDING))


class _Axis:
    """One grid axis: (left index, right weight) lookups, scalar and vectorized alike."""

    __slots__ = ("values", "inner", "left", "width", "widths", "lo", "hi", "last")

    def __init__(self, values: tuple[float, ...]) -> None:
        v = [float(x) for x in values]
        if len(v) == 1:
            v = [v[0], v[0] + 1.0]  # one point: a flat pair (its grid is padded alike)
        self.values = v
        # the vector path: searchsorted over the inner breakpoints is the clamped cell
        # index in one call; each cell's left end and width as `cell` computes them
        self.inner = np.asarray(v[1:-1])
        self.left = np.asarray(v[:-1])
        self.width = np.asarray([v[i + 1] - v[i] for i in range(len(v) - 1)])
        self.widths = self.width.tolist()  # (floats, for the scalar reads)
        self.lo, self.hi = float(values[0]), float(values[-1])
        self.last = len(v) - 2

    def cell(self, x: float) -> tuple[int, float]:
        v = self.values
        i = bisect_right(v, x) - 1
        i = 0 if i < 0 else (self.last if i > self.last else i)
        return i, (x - v[i]) / (v[i + 1] - v[i])

    def cell_of(self, x: float) -> int:
        """The index `cell` gives `x`."""
        i = bisect_right(self.values, x) - 1
        return 0 if i < 0 else (self.last if i > self.last else i)

    def cells(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`cell` element-wise (the same index and the same IEEE operations)."""
        i = self.inner.searchsorted(x, side="right")
        return i, (x - self.left[i]) / self.width[i]

    def clamp(self, x: float) -> float:
        return self.lo if x < self.lo else (self.hi if x > self.hi else x)


def _pad(a: np.ndarray) -> np.ndarray:
    """Duplicate every length-1 axis (a one-point axis is flat)."""
    for ax, n in enumerate(a.shape):
        if n == 1:
            a = np.concatenate([a, a], axis=ax)
    return a


class _Line1:
    """A 1-D component (dense, embed, head, allreduce): value and spread at a scalar key."""

    def __init__(self, grid: Grid) -> None:
        self.axis = _Axis(grid.axes[0])
        self.med = _pad(grid.median).tolist()
        self.sig = _pad(grid.sigma).tolist()
        self.edge = float(grid.median[-1])
        self._memo: dict[float, tuple[float, float, bool]] = {}
        """`at` per key: a run asks for few distinct token counts, most of them often."""

    def at(self, x: float) -> tuple[float, float, bool]:
        """(seconds, sigma, outside the grid), remembered per key (an int key and its
        float hash alike and give the same figures: the interpolation is in floats)."""
        got = self._memo.get(x)
        if got is None:
            got = self._memo[x] = self._at(x)
        return got

    def _at(self, x: float) -> tuple[float, float, bool]:
        ax = self.axis
        i, t = ax.cell(x)
        m = self.med
        v = (1.0 - t) * m[i] + t * m[i + 1]
        out = x < ax.lo or x > ax.hi
        if out:
            v = (v if v > self.edge else self.edge) if x > ax.hi else (v if v > 0.0 else 0.0)
            i, t = ax.cell(ax.clamp(x))
        s = self.sig
        return v, (1.0 - t) * s[i] + t * s[i + 1], out


class _Plane:
    """A 2-D table (prefill attention over (chunk, prior); decode attention of one decode
    count over (mean context, spread)), evaluated on floats or arrays with the same ops."""

    def __init__(self, ax0: _Axis, ax1: _Axis, med: np.ndarray, sig: np.ndarray) -> None:
        self.ax0, self.ax1 = ax0, ax1
        self.cols = len(ax1.values) - 1
        """Cells along the second axis: cell (i, j) is number i * cols + j."""
        # nested lists for the scalar path: Python floats, the same IEEE operations as
        # numpy's element-wise ones (so `at` and `at_many` agree bit for bit), without
        # numpy's per-scalar overhead
        self.medl, self.sigl = med.tolist(), sig.tolist()
        self.medc, self.sigc = self._corners(med), self._corners(sig)
        self.medcl, self.sigcl = self.medc.tolist(), self.sigc.tolist()

    @staticmethod
    def _corners(g: np.ndarray) -> np.ndarray:
        """Per cell (row-major, cell (i, j) at i * (columns - 1) + j) its four corners
        (i, j), (i, j + 1), (i + 1, j), (i + 1, j + 1): one gather reads them all."""
        g = np.asarray(g, dtype=np.float64)
        return np.stack([g[:-1, :-1], g[:-1, 1:], g[1:, :-1], g[1:, 1:]],
                        axis=-1).reshape(-1, 4)

    @staticmethod
    def _bilerp(corners: np.ndarray, cell, ti, tj):
        """Arrays: the same four corners and operations as `_bilerp1`."""
        c = corners[cell]
        uj = 1.0 - tj
        return ((1.0 - ti) * (uj * c[:, 0] + tj * c[:, 1])
                + ti * (uj * c[:, 2] + tj * c[:, 3]))

    @classmethod
    def _read(cls, corners: np.ndarray, scalars: list, cell, ti, tj):
        """`_bilerp` at `cell` from `corners`, or where `cell` is one int (every point in
        one cell) `_bilerp_one` of its corners as scalars (`scalars`)."""
        if isinstance(cell, int):
            return cls._bilerp_one(scalars[cell], ti, tj)
        return cls._bilerp(corners, cell, ti, tj)

    @staticmethod
    def _bilerp_one(c: list, ti, tj):
        """`_bilerp` of one cell's corners `c` (floats) over arrays."""
        uj = 1.0 - tj
        return (1.0 - ti) * (uj * c[0] + tj * c[1]) + ti * (uj * c[2] + tj * c[3])

    @staticmethod
    def _bilerp1(g: list, i: int, ti: float, j: int, tj: float) -> float:
        r0, r1 = g[i], g[i + 1]
        return ((1.0 - ti) * ((1.0 - tj) * r0[j] + tj * r0[j + 1])
                + ti * ((1.0 - tj) * r1[j] + tj * r1[j + 1]))

    def at(self, x: float, y: float) -> tuple[float, float, bool]:
        a0, a1 = self.ax0, self.ax1
        # `_Axis.cell` of both and `_bilerp1` of the median and, inside the grid, of the
        # spread, inlined (the same operations: a mixed step asks this for every chunk)
        v0, v1 = a0.values, a1.values
        i = bisect_right(v0, x) - 1
        i = 0 if i < 0 else (a0.last if i > a0.last else i)
        ti = (x - v0[i]) / (v0[i + 1] - v0[i])
        j = bisect_right(v1, y) - 1
        j = 0 if j < 0 else (a1.last if j > a1.last else j)
        tj = (y - v1[j]) / (v1[j + 1] - v1[j])
        uj = 1.0 - tj
        r0, r1 = self.medl[i], self.medl[i + 1]
        v = (1.0 - ti) * (uj * r0[j] + tj * r0[j + 1]) + ti * (uj * r1[j] + tj * r1[j + 1])
        out = x < a0.lo or x > a0.hi or y < a1.lo or y > a1.hi
        if not out:
            r0, r1 = self.sigl[i], self.sigl[i + 1]
            return v, ((1.0 - ti) * (uj * r0[j] + tj * r0[j + 1])
                       + ti * (uj * r1[j] + tj * r1[j + 1])), False
        if out:
            xc, yc = a0.clamp(x), a1.clamp(y)
            i, ti = a0.cell(xc)
            j, tj = a1.cell(yc)
            if x > a0.hi or y > a1.hi:
                edge = self._bilerp1(self.medl, i, ti, j, tj)
                v = v if v > edge else edge
            else:
                v = v if v > 0.0 else 0.0
        return v, self._bilerp1(self.sigl, i, ti, j, tj), out

    def weights(self, x: np.ndarray, y: np.ndarray, extent: tuple | None = None):
        """(cell, ti, tj, inside) of points over arrays, element-wise as `at` reads them:
        each point's cell (row-major, as `_corners`), its weights along both axes, and
        whether every point lies inside the grid. Where every point lies in one cell (a
        common case: a stretch's contexts move slowly; a point beyond the grid counts in
        the edge cell it is extrapolated from) the cell is one int, its left ends and
        widths read as scalars (the same IEEE operations as the gathers); else an array.
        `extent`: (x low, x high, y low, y high) enclosing every point, when the caller
        knows it without a pass (`_stepwise_extent`); None: read it."""
        a0, a1, cols = self.ax0, self.ax1, self.cols
        if extent is None:
            x0, x1, y0, y1 = float(x.min()), float(x.max()), float(y.min()), float(y.max())
        else:
            x0, x1, y0, y1 = extent
        inside = x0 >= a0.lo and x1 <= a0.hi and y0 >= a1.lo and y1 <= a1.hi
        # `cell_of` of the four ends, inlined (a bulk segment asks this every time)
        v0, v1, last0, last1 = a0.values, a1.values, a0.last, a1.last
        i, i1 = bisect_right(v0, x0) - 1, bisect_right(v0, x1) - 1
        j, j1 = bisect_right(v1, y0) - 1, bisect_right(v1, y1) - 1
        i = 0 if i < 0 else (last0 if i > last0 else i)
        j = 0 if j < 0 else (last1 if j > last1 else j)
        if i == (0 if i1 < 0 else (last0 if i1 > last0 else i1)) and j == (
                0 if j1 < 0 else (last1 if j1 > last1 else j1)):
            ti = (x - a0.values[i]) / a0.widths[i]
            tj = (y - a1.values[j]) / a1.widths[j]
            return i * cols + j, ti, tj, inside
        i, ti = a0.cells(x)
        j, tj = a1.cells(y)
        return i * cols + j, ti, tj, inside

    def at_many(self, x: np.ndarray, y: np.ndarray, sigma: bool = True,
                extent: tuple | None = None
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """`at` element-wise over arrays (bit-identical to it per element); the spread
        only when `sigma` (None otherwise: the bulk path without --jitter skips it);
        `extent` as `weights` takes it."""
        a0, a1 = self.ax0, self.ax1
        cell, ti, tj, inside = self.weights(x, y, extent)
        one = isinstance(cell, int)
        v = self._read(self.medc, self.medcl, cell, ti, tj)
        if one and extent is not None and extent[2] > a1.hi and (
                a0.lo <= extent[0] and extent[1] <= a0.hi):
            # every spread beyond the grid's far end, every context inside it: clamped,
            # the spread is the end itself (one scalar) and the contexts stay, so the
            # general path's operations below with its constant operands as scalars
            j = cell % self.cols
            tj_end = (a1.hi - a1.values[j]) / a1.widths[j]
            edge = self._bilerp_one(self.medcl[cell], ti, tj_end)
            return (np.where(v < edge, edge, v),
                    self._bilerp_one(self.sigcl[cell], ti, tj_end) if sigma else None,
                    np.ones(len(x), dtype=bool))
        if inside:
            out = np.zeros(len(x), dtype=bool)  # inside the grid: nothing to clamp
        else:
            far = (x > a0.hi) | (y > a1.hi)
            near = ((x < a0.lo) | (y < a1.lo)) & ~far
            out = far | near
            xc, yc = np.clip(x, a0.lo, a0.hi), np.clip(y, a1.lo, a1.hi)
            if one:  # a point clamped to the grid's edge stays in its edge cell
                i, j = divmod(cell, self.cols)
                ti = (xc - a0.values[i]) / a0.widths[i]
                tj = (yc - a1.values[j]) / a1.widths[j]
            else:
                i, ti = a0.cells(xc)
                j, tj = a1.cells(yc)
                cell = i * self.cols + j
            if far.any():
                edge = self._read(self.medc, self.medcl, cell, ti, tj)
                v = np.where(far & (v < edge), edge, v)
            if near.any():
                v = np.where(near & (v < 0.0), 0.0, v)
        return v, (self._read(self.sigc, self.sigcl, cell, ti, tj) if sigma else None), out


class _DecodeLine:
    """Everything of a decode-only step with a fixed decode count but its contexts."""

    __slots__ = ("plane", "dense", "sdense", "ar", "sar", "once", "sonce", "out", "moe",
                 "smoe", "fold", "fold_cols")

    def __init__(self, m: ComponentModel, d: int) -> None:
        ax = m.dax
        i, t = ax.cell(float(d))
        med = (1.0 - t) * m.dmed[i] + t * m.dmed[i + 1]
        if d > ax.hi:
            med = np.maximum(med, m.dmed_edge)
        ic, tc = ax.cell(ax.clamp(float(d)))
        sig = (1.0 - tc) * m.dsig[ic] + tc * m.dsig[ic + 1]
        self.plane = _Plane(m.kvax, m.rax, med, sig)
        self.out = d < ax.lo or d > ax.hi
        self.dense, self.sdense, o1 = m.dense.at(d)
        if m.allreduce is not None:
            self.ar, self.sar, o2 = m.allreduce.at(d)
        else:
            self.ar, self.sar, o2 = 0.0, 0.0, False
        te, se, o3 = m.embed.at(d)
        th, sh, o4 = m.head.at(d)
        self.once = (te + th) + m.fixed_s
        self.sonce = (se * te + sh * th) + m.fixed_sig * m.fixed_s
        self.out = self.out or o1 or o2 or o3 or o4
        self.moe, self.smoe = 0.0, 0.0
        if m.routing is not None:
            self.moe, self.smoe, o5 = m.moe_at(d)
            self.out = self.out or o5
        # the step's seconds inside each cell of the plane, folded into one bilinear form
        # in the cell's weights (ti along the contexts, tj along the spread):
        # t = ((K0 + K1 ti) + K2 tj) + K3 (ti tj), the composition of `_decode` with the
        # constant parts summed once per cell
        lsc = m.scale * m.layers
        rest = (self.dense + self.ar) + self.moe
        self.fold = []
        for c0, c1, c2, c3 in self.plane.medcl:
            self.fold.append((m.scale * (m.layers * (rest + c0) + self.once),
                              lsc * (c2 - c0), lsc * (c1 - c0), lsc * ((c3 - c2) - (c1 - c0))))
        self.fold_cols = tuple(np.array(col) for col in zip(*self.fold, strict=True))
        """`fold` as four arrays over the cells (the vector path's gathers)."""

    def at_many(self, kv: np.ndarray, spread: np.ndarray, extent: tuple | None = None):
        """Decode-only steps' seconds (no jitter, before the 1 ns floor) at mean contexts
        `kv` and spreads `spread` inside the plane's grid, from the folded form: (seconds,
        which points lie inside the grid: None when all do), the seconds of points outside
        it undefined (the caller composes the clamped attention instead);
        `extent` as `_Plane.weights` takes it: one beyond the grid on an axis (no point
        inside) gives no seconds, (None, False)."""
        p = self.plane
        if extent is not None:
            a0, a1 = p.ax0, p.ax1
            x0, x1, y0, y1 = extent
            if x0 > a0.hi or x1 < a0.lo or y0 > a1.hi or y1 < a1.lo:
                return None, False
        cell, ti, tj, inside = p.weights(kv, spread, extent)
        if isinstance(cell, int):
            k0, k1, k2, k3 = self.fold[cell]
        else:
            k0, k1, k2, k3 = (c[cell] for c in self.fold_cols)
        t = ((k0 + k1 * ti) + k2 * tj) + k3 * (ti * tj)
        if inside:
            return t, None
        a0, a1 = p.ax0, p.ax1
        return t, (kv >= a0.lo) & (kv <= a0.hi) & (spread >= a1.lo) & (spread <= a1.hi)


def _joint_of(c: Components):
    """The mixed-step joint attention table, None where the profile has none."""
    if c.mixed_attn is None:
        return None
    from chunksim.latency.joint import JointAttention

    return JointAttention(c.mixed_attn)


class ComponentModel(StepCosts):
    """Step time from a component profile: `step_s(shape)` and the bulk decode path."""

    prices_spread = True

    def __init__(self, profile: Profile, step_overhead_s: float | None = None,
                 expert_skew: float | None = None) -> None:
        self.c: Components = profile.components
        comp = profile.provenance.get("components") or {}
        layers = comp.get("layers", (profile.provenance.get("model") or {}).get("n_layers"))
        if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
            raise ValueError(f"profile {profile.path}: components.layers (or model.n_layers) "
                             f"is {layers!r} in its JSON; it must be the model's layer count")
        self.layers = float(layers)
        self.scale = float(comp.get("in_sequence_scale", 1.0))
        if not self.scale > 0:
            raise ValueError(f"profile {profile.path}: components.in_sequence_scale "
                             f"{self.scale!r} must be > 0")
        c = self.c
        self.dense = _Line1(c.dense)
        self.embed = _Line1(c.embed)
        self.head = _Line1(c.head)
        self.allreduce = _Line1(c.allreduce) if c.allreduce is not None else None
        self.fixed_s = float(c.fixed.median.flat[0])
        self.fixed_sig = float(c.fixed.sigma.flat[0])
        g = c.prefill_attn
        self.prefill = _Plane(_Axis(g.axes[0]), _Axis(g.axes[1]), _pad(g.median),
                              _pad(g.sigma))
        g = c.decode_attn
        self.dax, self.kvax, self.rax = (_Axis(a) for a in g.axes)
        self.dmed, self.dsig = _pad(g.median), _pad(g.sigma)
        self.dmed_edge = g.median[-1]
        self.filled_cells = 0
        self.profile_sha256 = profile.sha256
        self.joint = _joint_of(c)
        self.spread_axis = len(g.axes[2]) > 1
        """Whether the profile measured decode spreads; without, decodes are priced by
        their mean context and a spread is not an extrapolation."""
        self._init_moe(profile, expert_skew)  # before the extras: they price steps
        self._lines: dict[int, _DecodeLine] = profile.derived.setdefault(
            ("decode_lines", self.routing), {})
        """A decode line per decode count: a function of the profile's grids and the
        routing alone, so shared by every model of this profile object."""
        self._init_extras(profile, step_overhead_s)

    def _init_moe(self, profile: Profile, expert_skew: float | None) -> None:
        """A MoE profile's routing (`components.moe`) and its `expert` / `alltoall`
        lines; `routing` None for a dense profile (which refuses --expert-skew)."""
        self.routing: Routing | None = None
        self._moe: dict[int, tuple[float, float, bool]] = {}
        spec = (profile.provenance.get("components") or {}).get("moe")
        c = self.c
        if spec is None:
            if c.expert is not None or c.alltoall is not None:
                raise ValueError(f"profile {profile.path} has expert/alltoall rows but no "
                                 f"components.moe in its JSON (num_experts, top_k, ep); see "
                                 f"docs/profile-format.md")
            if expert_skew is not None:
                raise ValueError(f"--expert-skew {expert_skew:g}: profile {profile.path} is "
                                 f"of a dense model (no components.moe); it applies to MoE "
                                 f"profiles only")
            return
        if c.expert is None:
            raise ValueError(f"profile {profile.path}: components.moe is set but the table "
                             f"has no 'expert' rows (column component)")
        try:
            self.routing = Routing(
                int(spec["num_experts"]), int(spec["top_k"]), int(spec.get("ep", 1)),
                float(expert_skew if expert_skew is not None else spec.get("skew", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"profile {profile.path}: components.moe {spec!r}: {exc}") \
                from None
        self._shares = self.routing.device_shares()
        self._expert = _Line1(c.expert)
        self._alltoall = _Line1(c.alltoall) if c.alltoall is not None else None

    def moe_at(self, tokens: int) -> tuple[float, float, bool]:
        """(seconds, sigma, outside) of one MoE layer's routed experts and all-to-all on
        a step of `tokens` tokens (cached per token count)."""
        got = self._moe.get(tokens)
        if got is None:
            s, sig, out = routed_expert_s(float(tokens), self._shares, self._expert.at)
            if self._alltoall is not None:
                a, sa, o = self._alltoall.at(float(tokens))
                sig = (s * sig + a * sa) / (s + a) if s + a > 0 else 0.0
                s, out = s + a, out or o
            got = self._moe[tokens] = (s, sig, out)
        return got

    def _line(self, d: int) -> _DecodeLine:
        line = self._lines.get(d)
        if line is None:
            line = self._lines[d] = _DecodeLine(self, d)
        return line

    def _decode(self, line: _DecodeLine, kv: np.ndarray, spread: np.ndarray, jitter_z,
                extent=None):
        """Decode-only steps over arrays. Without jitter, a point inside the plane's grid
        is priced by the line's folded form (`_DecodeLine.at_many`), one outside it by the
        composition below (clamped). `extent`: the arrays' (`_Plane.weights`)."""
        if jitter_z is None:
            t, inside = line.at_many(kv, spread, extent)
            if inside is None:
                return t, np.zeros(len(t), dtype=bool)
            rest, out = self._decode_composed(line, kv, spread, None, extent)
            return (rest, out) if t is None else (np.where(inside, t, rest), out)
        return self._decode_composed(line, kv, spread, jitter_z, extent)

    def _decode_composed(self, line: _DecodeLine, kv, spread, jitter_z, extent=None):
        """`_decode` by composing the steps from their clamped attention (outside the
        grid, and with jitter, whose spread weighs each part). (Adding 0.0 and scaling by
        1.0 are skipped: they change no value but -0.0, clamped later.)"""
        att, satt, out = line.plane.at_many(kv, spread, sigma=jitter_z is not None,
                                            extent=extent)
        per_layer = line.dense + att
        if line.ar:
            per_layer = per_layer + line.ar
        if self.routing is not None:
            per_layer = per_layer + line.moe
        raw = self.layers * per_layer + line.once
        t = raw * self.scale if self.scale != 1.0 else raw
        if jitter_z is None:
            return t, out
        ws = self.layers * ((line.sdense * line.dense + satt * att) + line.sar * line.ar)
        if self.routing is not None:
            ws = ws + self.layers * (line.smoe * line.moe)
        sig = np.divide(ws + line.sonce, raw, out=np.zeros(len(raw)), where=raw > 0)
        e = sig * jitter_z
        # math.exp per step, as the composition of a mixed step (`step_s`) applies it
        return t * np.fromiter((math.exp(v) for v in e.tolist()), float, len(e)), out

    def step_s(self, shape: BatchShape, jitter_z: float | None = None) -> tuple[float, bool]:
        """Forward-pass time of one step in seconds (no overhead) and whether a component
        left its measured grid. `jitter_z` (a standard normal) applies measured spread."""
        c, d = shape.prefill_tokens, shape.decode_count
        kv = float(shape.decode_kv_tokens)
        kv_max = float(shape.decode_kv_max)
        spread = kv_max / kv if kv_max > kv and self.spread_axis else 1.0
        if c == 0:  # decode-only: the one-step case of decode_steps_s (one path)
            t, out = self.decode_steps_s(
                d, np.array([kv]), None if jitter_z is None else np.array([jitter_z]),
                np.array([kv_max]) if kv_max > kv else None, stepwise=True)
            return float(t[0]), bool(out[0])
        chunks = shape.chunks or ((c, shape.prior_tokens),)
        tokens = c + d
        logits = shape.logits if shape.logits >= 0 else d + len(chunks)
        # the 1-D lines' memos read here first (`_Line1.at`: a call saved per line)
        dense, embed, head = self.dense, self.embed, self.head
        td, sd, out = dense._memo.get(tokens) or dense.at(tokens)
        pre = spre = 0.0
        for length, prior in chunks:
            tp, sp, o = self.prefill.at(float(length), float(prior))
            pre += tp
            spre += sp * tp
            out = out or o
        att = satt = 0.0
        if d:
            line = self._lines.get(d) or self._line(d)
            att, satt, o = line.plane.at(kv, spread)
            satt *= att
            out = out or o or line.out
            if self.joint is not None:
                cross, o = self._cross(chunks, c, d, kv)
                pre = max(pre + cross, -att)  # the step's attention never drops below 0
                out = out or o
        ar = sar = 0.0
        if self.allreduce is not None:
            ar, sar, o = self.allreduce.at(tokens)
            out = out or o
        te, se, o1 = embed._memo.get(tokens) or embed.at(tokens)
        th, sh, o2 = head._memo.get(logits) or head.at(logits)
        per_layer = ((td + pre) + att) + ar
        mo = smo = 0.0
        if self.routing is not None:
            mo, smo, o = self.moe_at(tokens)
            per_layer = per_layer + mo
            out = out or o
        raw = self.layers * per_layer + ((te + th) + self.fixed_s)
        t = raw * self.scale
        if jitter_z is not None:
            ws = self.layers * (((sd * td + spre) + satt) + sar * ar)
            if self.routing is not None:
                ws = ws + self.layers * (smo * mo)
            ws += (se * te + sh * th) + self.fixed_sig * self.fixed_s
            t *= math.exp((ws / raw if raw > 0 else 0.0) * jitter_z)
        return (t if t > 1e-9 else 1e-9), bool(out or o1 or o2)

    def _cross(self, chunks, c: int, d: int, kv: float) -> tuple[float, bool]:
        """The joint table's cross term of a mixed step (chunksim.latency.joint): at the
        step's chunk tokens and their token-weighted prior context, held at the table's
        edge (all three terms read at the clamped point)."""
        prior = sum(length * p for length, p in chunks) / c
        (cc, pc, dc, kc), out = self.joint.clamp((float(c), prior, float(d), kv))
        joint = self.joint.at(cc, pc, dc, kc)
        alone, _, _ = self.prefill.at(cc, pc)
        dec, _, _ = self._line(int(dc)).plane.at(kc, 1.0)
        return joint - alone - dec, out

    def decode_steps_s(self, decode_count: int, kv_tokens: np.ndarray,
                       jitter_z: np.ndarray | None = None,
                       kv_max: np.ndarray | None = None,
                       stepwise: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Times of decode-only steps with `decode_count` decodes at mean contexts
        `kv_tokens` and longest contexts `kv_max` (one entry per step; None: equal
        contexts), and their out-of-grid flags; bit-identical to `step_s` per step.
        `stepwise`: the steps are a decode stretch's, every context one token longer
        than in the step before (mean and longest alike), so the points' extent is read
        from the first and last step (`_stepwise_extent`); any points otherwise."""
        line = self._lines.get(decode_count) or self._line(decode_count)
        kv = np.asarray(kv_tokens, dtype=np.float64)
        flat = kv_max is None or not self.spread_axis
        if not flat:
            # kv_max / kv where the longest exceeds the mean, else 1.0 (as step_s): a
            # ratio of the others is <= 1 (a decode's context is >= 1, so kv > 0)
            spread = np.maximum(np.asarray(kv_max, dtype=np.float64) / kv, 1.0)
        else:
            spread = np.ones(len(kv))
        extent = _stepwise_extent(kv, spread, flat) if stepwise and len(kv) else None
        t, out = self._decode(line, kv, spread, jitter_z, extent)
        if line.out:
            out = out | line.out
        return np.maximum(t, 1e-9), out

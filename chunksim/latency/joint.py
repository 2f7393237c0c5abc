"""A mixed step's attention run as one kernel call: the joint table's cross term. Pure.

A serving engine runs a mixed step's attention (prefill chunks and decodes together) as one
varlen kernel call, which costs more (or less) than its parts timed alone: the work split
is planned over both, and the decodes wait for the chunk's tiles. Where a profile carries a
`mixed_attn` table, J(chunk, prior, decodes, context) = one layer's attention of one chunk
and a batch of decodes as one call, a mixed step's attention is

    sum_i prefill_attn(L_i, c_i) + decode_attn(D, mean, spread) + cross

    cross = J(C, p, D, mean) - prefill_attn(C, p) - decode_attn(D, mean, 1)

with C the step's chunk tokens and p their token-weighted prior context, so that a step of
one chunk and equal decode contexts costs J itself. The cross term is read by multilinear
interpolation inside the table and held at its edge outside it (the step is then flagged
as extrapolated); attention never drops below 0.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import product

import numpy as np

from chunksim.latency.component_table import Grid


class JointAttention:
    """The `mixed_attn` table: `clamp` a key to it, `at` a key inside it -> seconds."""

    def __init__(self, grid: Grid) -> None:
        self.axes = [[float(x) for x in a] for a in grid.axes]
        self.med = np.asarray(grid.median, dtype=np.float64)

    def clamp(self, key: tuple[float, ...]) -> tuple[tuple[float, ...], bool]:
        """`key` held inside the table's axes, and whether it was outside them."""
        held = tuple(min(max(x, ax[0]), ax[-1]) for ax, x in zip(self.axes, key, strict=True))
        return held, held != tuple(key)

    def at(self, *key: float) -> float:
        """Multilinear interpolation at a key inside the table (see `clamp`)."""
        cells = []
        for ax, x in zip(self.axes, key, strict=True):
            if len(ax) == 1:
                cells.append(((0, 1.0),))
                continue
            i = min(max(bisect_right(ax, x) - 1, 0), len(ax) - 2)
            t = (x - ax[i]) / (ax[i + 1] - ax[i])
            cells.append(((i, 1.0 - t), (i + 1, t)))
        v = 0.0
        for corner in product(*cells):
            w = 1.0
            for _, wk in corner:
                w *= wk
            if w:
                v += w * float(self.med[tuple(i for i, _ in corner)])
        return v

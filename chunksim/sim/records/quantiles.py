"""Streaming quantiles for runs too large to keep every sample: a log-bucket histogram
(HDR / DDSketch style) with a guaranteed relative error.

A positive value x falls in bucket i = ceil(log(x) / log(gamma)), the interval
(gamma^(i-1), gamma^i], with gamma = (1 + a) / (1 - a); the bucket answers with
2 gamma^i / (gamma + 1), within a relative `a` of every value in it. A quantile is taken
as numpy's default (linear) method takes it, from the two order statistics around rank
(n - 1) q, each replaced by its bucket's answer (clamped to the exact min and max): the
result is within the relative `a` of the exact percentile (a convex combination of
positive values each within `a`). Mean and standard deviation come from exactly merged
moments (Chan et al.), max and min are exact. Memory is one counter per bucket touched:
about 11,500 buckets span 1 ns to 10,000 s at a = 0.1 %.
"""

from __future__ import annotations

import math

import numpy as np

REL_ERROR = 1e-3
"""The documented bound on a streamed percentile's relative error."""
_ALPHA = 0.999 * REL_ERROR  # a hair inside the bound: log() rounding at bucket edges
TINY = 1e-12
"""Values at or below this (seconds) count as 0 (the zero bucket answers 0)."""


class LogHistogram:
    """Weighted samples folded into log buckets: `add(values, weight)`, then `len`,
    `mean`, `std`, `max`, `min`, `percentile(ps)` (numpy's linear method, within
    REL_ERROR)."""

    def __init__(self, alpha: float = _ALPHA) -> None:
        self.gamma = (1.0 + alpha) / (1.0 - alpha)
        self.log_gamma = math.log(self.gamma)
        self.counts = np.zeros(0, dtype=np.int64)
        self.offset = 0  # bucket index of counts[0]
        self.zeros = 0
        self.n = 0
        self._mean = 0.0
        self._m2 = 0.0
        self.max = -math.inf
        self.min = math.inf

    def __len__(self) -> int:
        return self.n

    def add(self, values, weight=1) -> None:
        """Fold `values`, each counted `weight` times (a count, or one count per value)."""
        v = np.asarray(values, dtype=float).reshape(-1)
        if not len(v):
            return
        if np.ndim(weight):
            w = np.asarray(weight, dtype=np.int64).reshape(-1)
            keep = w > 0
            v, w = v[keep], w[keep]
            if not len(v):
                return
            nb = int(w.sum())
        else:
            if int(weight) <= 0:
                return
            w = None
            nb = len(v) * int(weight)
        pos = v > TINY
        if not pos.all():
            self.zeros += int(w[~pos].sum()) if w is not None else int(
                (~pos).sum()) * int(weight)
        if pos.any():
            idx = np.ceil(np.log(v[pos]) / self.log_gamma).astype(np.int64)
            lo, hi = int(idx.min()), int(idx.max())
            self._cover(lo, hi)
            if w is not None:
                add = np.bincount(idx - lo, weights=w[pos], minlength=hi - lo + 1)
                add = np.rint(add).astype(np.int64)  # exact below 2**53
            else:
                add = np.bincount(idx - lo, minlength=hi - lo + 1) * int(weight)
            self.counts[lo - self.offset : hi - self.offset + 1] += add
        # moments, merged exactly (Chan et al.): the batch's, then the pair
        if w is None:
            mb = float(v.mean())
            m2b = float(((v - mb) ** 2).sum()) * int(weight)
        else:
            mb = float((v * w).sum() / nb)
            m2b = float((w * (v - mb) ** 2).sum())
        n = self.n + nb
        delta = mb - self._mean
        self._mean += delta * nb / n
        self._m2 += m2b + delta * delta * self.n * nb / n
        self.n = n
        self.max = max(self.max, float(v.max()))
        self.min = min(self.min, float(v.min()))

    def merge(self, other: LogHistogram) -> None:
        """Fold another histogram (same alpha) into this one."""
        if not other.n:
            return
        if len(other.counts):
            lo, hi = other.offset, other.offset + len(other.counts) - 1
            self._cover(lo, hi)
            self.counts[lo - self.offset : hi - self.offset + 1] += other.counts
        self.zeros += other.zeros
        n = self.n + other.n
        delta = other._mean - self._mean
        self._mean += delta * other.n / n
        self._m2 += other._m2 + delta * delta * self.n * other.n / n
        self.n = n
        self.max = max(self.max, other.max)
        self.min = min(self.min, other.min)

    def _cover(self, lo: int, hi: int) -> None:
        if not len(self.counts):
            self.counts = np.zeros(hi - lo + 1, dtype=np.int64)
            self.offset = lo
            return
        top = self.offset + len(self.counts) - 1
        if lo >= self.offset and hi <= top:
            return
        new_lo, new_hi = min(lo, self.offset), max(hi, top)
        grown = np.zeros(new_hi - new_lo + 1, dtype=np.int64)
        grown[self.offset - new_lo : self.offset - new_lo + len(self.counts)] = self.counts
        self.counts, self.offset = grown, new_lo

    @property
    def mean(self) -> float:
        return self._mean

    @property
    def std(self) -> float:
        """Population standard deviation (numpy's default, ddof=0)."""
        return math.sqrt(max(self._m2, 0.0) / self.n) if self.n else 0.0

    def _order_stats(self, ranks: np.ndarray) -> np.ndarray:
        """Values at 0-based `ranks` of the sorted samples, each within REL_ERROR."""
        cum = np.cumsum(self.counts)
        out = np.empty(len(ranks))
        for j, r in enumerate(ranks):
            if r < self.zeros:
                out[j] = 0.0
                continue
            i = int(np.searchsorted(cum, r - self.zeros, side="right"))
            rep = 2.0 * self.gamma ** (i + self.offset) / (self.gamma + 1.0)
            out[j] = min(max(rep, self.min), self.max)
        return out

    def percentile(self, ps) -> np.ndarray:
        """Percentiles `ps` (0..100) by numpy's linear method, within REL_ERROR."""
        if not self.n:
            raise ValueError("no samples")
        ps = np.atleast_1d(np.asarray(ps, dtype=float))
        h = (self.n - 1) * ps / 100.0
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, self.n - 1)
        a, b = self._order_stats(lo), self._order_stats(hi)
        return a + (h - lo) * (b - a)


class Samples:
    """A run's samples of one latency (token gaps), seconds: every value (`exact`, in
    `values`), or for a run too large to keep them, a `LogHistogram` of them (`hist`:
    percentiles within its REL_ERROR, moments exact). One type for both, so a reader
    asks which it holds instead of guessing from the object. An exact one reads as its
    array (`np.asarray`, `len`, iteration); a streamed one refuses to."""

    __slots__ = ("values", "hist")

    def __init__(self, values=None, hist: LogHistogram | None = None) -> None:
        if (values is None) == (hist is None):
            raise ValueError("Samples: give the values or their histogram, not both")
        self.values = None if values is None else np.asarray(values, dtype=float)
        self.hist = hist

    @property
    def exact(self) -> bool:
        return self.hist is None

    def __len__(self) -> int:
        return len(self.values) if self.hist is None else len(self.hist)

    def _kept(self) -> np.ndarray:
        if self.hist is not None:
            raise ValueError("this run streamed its samples into a histogram and kept no "
                             "values (more than records.EXACT_GAP_SAMPLES of them)")
        return self.values

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        v = self._kept()
        return v if dtype is None else v.astype(dtype)

    def __iter__(self):
        return iter(self._kept().tolist())

    @property
    def max(self) -> float:
        """Largest sample (0 when there is none)."""
        if not len(self):
            return 0.0
        return float(self.hist.max) if self.hist is not None else float(np.max(self.values))

    def percentile(self, ps) -> np.ndarray:
        """numpy's linear percentiles (of the histogram: within its REL_ERROR)."""
        if self.hist is not None:
            return self.hist.percentile(ps)
        return np.percentile(self.values, ps)

    @staticmethod
    def pool(parts) -> Samples:
        """Several engines' samples as one: the values joined while every part is exact,
        else one histogram folding every part."""
        if all(p.exact for p in parts):
            return Samples(np.concatenate([p.values for p in parts]) if parts
                           else np.zeros(0))
        pooled = LogHistogram()
        for p in parts:
            if p.exact:
                pooled.add(p.values)
            else:
                pooled.merge(p.hist)
        return Samples(hist=pooled)

"""A calibration on any latency model: a per-step framework time and two scales, fitted
by `sim calibrate` to measured runs and stored in the profile's provenance. Pure.

    step = framework + overhead + compute_scale x prefill part + memory_scale x the rest

- The *prefill part* of a step is what the base model prices for the same step with its
  decodes removed: the chunks' tokens through the weights and their attention (the
  compute-bound work). A step with no prefill has none.
- *The rest* is what the decodes add: reading the weights for a handful of tokens and
  each decode's KV (the memory-bound and attention work). A decode-only step is all of it.
- The framework time is added once per step, beside the profile's per-step overhead
  (host work: scheduling, input preparation, sampling bookkeeping); like the overhead it
  wakes up with the step after an idle wait and hides under the forward pass with
  `--async-scheduling`.

One definition for both profile kinds: the split is made by asking the base model, not
by reading its table, so a whole-step table and a component profile are calibrated
alike (a component profile's own fixed per-step term, where it has one, stays inside
the base model's figure).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

from chunksim.core.shape import BatchShape

KEY = "serving_calibration"
"""The provenance key holding a `Calibration` (its fields, seconds and factors)."""


@dataclass(frozen=True)
class Calibration:
    """The fitted parameters (the identity: 0 s, 1, 1)."""

    framework_s: float = 0.0
    """Per-step framework time added to every step, seconds (>= 0)."""
    compute_scale: float = 1.0
    """Factor on the prefill (compute-bound) part of each step (> 0)."""
    memory_scale: float = 1.0
    """Factor on the decode (memory-bound and attention) part of each step (> 0)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.framework_s) and self.framework_s >= 0):
            raise ValueError(f"calibration framework_s={self.framework_s} must be >= 0 s")
        for name in ("compute_scale", "memory_scale"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"calibration {name}={v} must be > 0")

    @property
    def identity(self) -> bool:
        return self == Calibration()

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_provenance(cls, provenance: dict, path: str = "profile") -> Calibration | None:
        """The calibration a profile's provenance holds (None when it holds none)."""
        raw = provenance.get(KEY)
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: provenance {KEY!r} must be an object with "
                             "framework_s, compute_scale, memory_scale")
        try:
            return cls(float(raw.get("framework_s", 0.0)),
                       float(raw.get("compute_scale", 1.0)),
                       float(raw.get("memory_scale", 1.0)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: provenance {KEY!r}: {exc}") from None


def _prefill_part(shape: BatchShape) -> BatchShape:
    """The step with its decodes removed (their logits rows too)."""
    logits = max(shape.logits - shape.decode_count, 0) if shape.logits >= 0 else -1
    return BatchShape(shape.prefill_tokens, shape.prior_tokens, 0, 0.0, shape.chunks, 0.0,
                      logits)


class CalibratedModel:
    """`base` (a `StepCosts`) with a `Calibration` applied; every other attribute is the
    base model's."""

    def __init__(self, base, cal: Calibration) -> None:
        self.base = base
        self.cal = cal
        digest = hashlib.sha256((str(base.profile_sha256) + json.dumps(
            cal.as_dict(), sort_keys=True)).encode()).hexdigest()
        self.profile_sha256 = digest
        """The base table's hash folded with the calibration: runs on two calibrations
        of one table carry different stamps."""

    def __getattr__(self, name: str):
        if name == "base":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    def step_s(self, shape: BatchShape, jitter_z: float | None = None) -> tuple[float, bool]:
        """The base model's forward time with the prefill part and the rest scaled."""
        t, out = self.base.step_s(shape, jitter_z)
        if shape.prefill_tokens == 0 or shape.decode_count == 0 or (
                self.cal.compute_scale == self.cal.memory_scale):
            return self._scaled(t, shape.prefill_tokens > 0), out
        tp, _ = self.base.step_s(_prefill_part(shape), jitter_z)
        return self._scaled(t, tp if tp < t else t), out

    def decode_steps_s(self, decode_count, kv_tokens, jitter_z=None, kv_max=None,
                       stepwise=False):
        """Decode-only steps (the base model's vector path), scaled as `step_s` scales
        each: all memory-bound part."""
        t, out = self.base.decode_steps_s(decode_count, kv_tokens, jitter_z, kv_max,
                                          stepwise)
        return self._scaled(t, False), out

    def _scaled(self, t, prefill):
        """The one rule, on a float or an array of steps' base times `t`: `prefill` the
        step's prefill part (seconds, within t), True for a step that is all prefill part
        (no decodes, or both scales equal), False for one with none (decode-only)."""
        a, b = self.cal.compute_scale, self.cal.memory_scale
        if prefill is False:
            return t * b
        if prefill is True:
            return t * a
        return a * prefill + b * (t - prefill)

    def overhead(self, requests: int) -> float:
        """The base model's per-step overhead plus the framework time."""
        return self.base.overhead(requests) + self.cal.framework_s


def calibrated(model, provenance: dict, path: str = "profile"):
    """`model` with the provenance's calibration applied (itself when there is none)."""
    cal = Calibration.from_provenance(provenance, path)
    if cal is None or cal.identity:
        return model
    return CalibratedModel(model, cal)

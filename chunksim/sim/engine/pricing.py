"""The one place a step's seconds are composed: `StepPricer`.

A step lasts its forward passes (the latency model's figure per batch shape, summed: a
two-pass plan runs two), plus the drafter's proposals after it (speculative decoding),
plus the host work outside the forward pass (the per-step overhead; with async
scheduling it hides behind the forward pass: the step lasts the longer of the two), all
multiplied by the wake-up ratio on the first steps after an idle wait. With --jitter each
forward pass is drawn from the profile's spread (`Noise`, addressed by step index) and
checked against its median (`SpreadGuard`).

The engine's per-step path prices a step with `step`; the bulk decode path prices a run
of decode-all steps with `decodes` (the latency model's vector path), with the same
float operations in the same order per step, so both give bit-identical seconds
(tests/test_properties.py and the fast-path tests compare them with atol=0).
"""

from __future__ import annotations

import numpy as np

from chunksim.core.shape import StepShape
from chunksim.latency.base import StepCosts

_NOISE_BLOCK = 4096
MAX_RUN = 65536
"""The most decode steps priced at once (`decodes`)."""
_STEPS = np.arange(MAX_RUN, dtype=np.int64)


def steps(k: int) -> np.ndarray:
    """0, 1, ..., k-1 (a view when it can be)."""
    return _STEPS[:k] if k <= len(_STEPS) else np.arange(k, dtype=np.int64)


class Noise:
    """Standard normals addressed by step index (same value whichever path runs a step)."""

    def __init__(self, seed) -> None:
        self.rng = np.random.default_rng(seed)
        self.blocks: list[np.ndarray] = []

    def _upto(self, i: int) -> None:
        while len(self.blocks) * _NOISE_BLOCK <= i:
            self.blocks.append(self.rng.standard_normal(_NOISE_BLOCK))

    def at(self, i: int) -> float:
        self._upto(i)
        return float(self.blocks[i // _NOISE_BLOCK][i % _NOISE_BLOCK])

    def range(self, i: int, k: int) -> np.ndarray:
        """The draws of steps i .. i+k-1: a view into one block when they lie in one (as
        a stretch's nearly always do), else joined from just the blocks they span."""
        self._upto(i + k)
        first, lo = divmod(i, _NOISE_BLOCK)
        last = (i + max(k, 1) - 1) // _NOISE_BLOCK
        if first == last:
            return self.blocks[first][lo : lo + k]
        return np.concatenate(self.blocks[first : last + 1])[lo : lo + k]


class StepPricer:
    """Seconds of the engine's steps: the latency model's forward passes composed with
    the drafter, the host overhead, async overlap and the wake-up after an idle wait, and
    the jitter's draws and guard. Keeps the wake-up state (`woke`, `waking`) and the
    length of the last step priced one by one (`last_s`)."""

    def __init__(self, latency: StepCosts, noise: Noise | None = None, guard=None,
                 drafter=None, async_scheduling: bool = False, wake_steps: int = 0) -> None:
        self.latency = latency
        self.noise = noise
        """The jitter's draws (None: no jitter)."""
        self.guard = guard
        """Checks every jittered forward pass against its median (`SpreadGuard`; None:
        unchecked)."""
        self.drafter = drafter
        """Speculative decoding's drafter cost (`latency.drafter.Drafter`; None: none)."""
        self.async_ = async_scheduling
        self.wake_steps = wake_steps
        """How many steps after an idle wait are priced by their wake-up ratio (0: none)."""
        self.idle_s = 0.0
        """Length of the engine's last idle wait."""
        self.since_wake = wake_steps
        """Steps run since it; >= wake_steps: warm."""
        self.last_s = 0.0
        """Length of the last step priced by `step`."""
        self._run: tuple | None = None  # the last `decodes`' operands, for `check`

    @property
    def waking(self) -> bool:
        """Whether the next step is priced by its wake-up ratio."""
        return self.since_wake < self.wake_steps

    def woke(self, idle_s: float) -> None:
        """The engine woke after idling `idle_s`: the next steps wake up."""
        self.idle_s, self.since_wake = idle_s, 0

    def step(self, shape: StepShape, index: int, requests: int,
             drafting: int = 0) -> tuple[float, bool]:
        """(seconds, priced outside the table) of step number `index` of `shape`,
        scheduling `requests` requests, after which `drafting` of them propose drafts;
        the step is taken as run (a wake-up step counts)."""
        latency = self.latency
        z = self.noise.at(index) if self.noise is not None else None
        fwd, out = 0.0, False
        for bs in shape.batch_shapes():  # one forward pass each (two-pass: two)
            t, o = latency.step_s(bs, z)
            if z is not None and self.guard is not None:
                self.guard.check(index, t, latency.step_s(bs, None)[0], z)
            fwd += t
            out = out or o
        if self.drafter is not None:  # proposing the next drafts (no jitter)
            fwd += self.drafter.draft_s(shape, drafting)
        dur = self._compose(fwd, requests, 1)
        if self.since_wake < self.wake_steps:
            self.since_wake += 1
        self.last_s = dur
        return dur, out

    def decodes(self, n: int, kv_mean: np.ndarray, longest: int | None,
                index: int) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, priced outside the table) of consecutive decode-all steps of `n`
        one-token decodes from step number `index` on, one per entry of `kv_mean` (their
        mean contexts, one token longer a step, as is `longest`, the first step's longest
        context). Each is what `step` gives that step. The steps count as run only
        through `ran`; `check` holds the jitter guard to those that run."""
        latency = self.latency
        k = len(kv_mean)
        z = self.noise.range(index, k) if self.noise is not None else None
        # every context one token longer a step, the longest too: exact floats
        kv_max = ((_STEPS[:k] if k <= MAX_RUN else steps(k)) + float(longest)
                  if latency.prices_spread else None)
        fwd, out = latency.decode_steps_s(n, kv_mean, z, kv_max, True)
        if z is not None and self.guard is not None:
            self._run = (n, kv_mean, z, kv_max, fwd, index)
        return self._compose(fwd, n, k), out

    def check(self, k: int) -> None:
        """Hold the first k steps of the last `decodes` to the jitter guard."""
        if self.guard is None or self.noise is None:
            return
        n, kv_mean, z, kv_max, fwd, index = self._run
        median, _ = self.latency.decode_steps_s(
            n, kv_mean[:k], None, None if kv_max is None else kv_max[:k], True)
        self.guard.check_run(index, fwd[:k], median, z[:k])

    def ran(self, k: int) -> None:
        """k steps priced by `decodes` ran (the wake-up moves on)."""
        if self.since_wake < self.wake_steps:
            self.since_wake = min(self.wake_steps, self.since_wake + k)

    def _compose(self, fwd, requests: int, k: int):
        """A step's seconds from its forward time `fwd` (a float; or an array, one entry
        per step of a run of k): plus the host overhead of `requests` requests (async
        scheduling: the longer of the two), times the wake-up ratio where the engine
        wakes up (host work wakes up alike). The same float operations either way."""
        latency = self.latency
        overhead = latency.overhead(requests)
        if self.async_:
            dur = max(fwd, overhead) if k == 1 and not isinstance(fwd, np.ndarray) \
                else np.maximum(fwd, overhead)
        else:
            dur = fwd + overhead if overhead else fwd
        woken = self.since_wake
        if woken < self.wake_steps:
            wake = latency.wake_ratio
            if not isinstance(dur, np.ndarray):
                return dur * wake(self.idle_s, woken)
            dur = dur.copy() if dur is fwd else dur
            for i in range(min(k, self.wake_steps - woken)):
                dur[i] = float(dur[i]) * wake(self.idle_s, woken + i)
        return dur

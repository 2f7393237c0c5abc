"""What every latency model prices the same way, whatever the profile kind: the per-step
CPU overhead outside the forward pass and the wake-up of an idle engine (both from the
profile's provenance)."""

from __future__ import annotations

from bisect import bisect_right

from chunksim.core.shape import BatchShape
from chunksim.latency.profile import Profile


class StepCosts:
    """Overhead and wake-up; a subclass provides `step_s` and calls `_init_extras` last."""

    prices_spread: bool = False
    """Whether `decode_steps_s` takes the decodes' longest context (the engine passes it)."""
    drafter = None
    """Speculative decoding's drafter cost (`latency.drafter.Drafter`), attached when a run
    speculates; None otherwise."""

    def step_s(self, shape: BatchShape, jitter_z: float | None = None) -> tuple[float, bool]:
        raise NotImplementedError

    def _init_extras(self, profile: Profile, step_overhead_s: float | None) -> None:
        # per-step CPU cost outside the forward pass: base + per request in the step, as
        # `sim profile` fits it on the live loop; an explicit value is a flat cost per step
        fit = profile.provenance.get("step_overhead") or {}
        if step_overhead_s is not None:
            self.overhead_s, self.overhead_per_request_s = float(step_overhead_s), 0.0
        elif "base_s" in fit and "per_request_s" in fit:
            self.overhead_s = max(0.0, float(fit["base_s"]))
            self.overhead_per_request_s = max(0.0, float(fit["per_request_s"]))
        else:
            self.overhead_s = float(profile.provenance.get("step_overhead_s", 0.0))
            self.overhead_per_request_s = 0.0
        if self.overhead_s < 0:
            raise ValueError(f"step overhead {self.overhead_s} s must be >= 0 (--step-overhead-ms)")
        # waking an idle engine: per idle time, each of the next steps' ratio to warm
        wake = profile.provenance.get("wake_up") or {}
        self.wake_idle_s: list[float] = [float(x) for x in wake.get("idle_s", [])]
        self.wake_ratios: list[list[float]] = [[float(r) for r in row]
                                               for row in wake.get("ratios", [])]
        if len(self.wake_ratios) != len(self.wake_idle_s) or len(
                {len(row) for row in self.wake_ratios}) > 1:
            raise ValueError(f"profile {profile.path}: wake_up has {len(self.wake_idle_s)} "
                             f"idle times but ratios {self.wake_ratios}; re-run sim profile")
        self.wake_steps = len(self.wake_ratios[0]) if self.wake_ratios else 0
        """How many steps after an idle wait `wake_ratio` prices (0: no wake-up table)."""
        warm, steps = wake.get("warm_s"), wake.get("steps")
        if self.wake_steps and warm and steps and len(warm) == len(steps) == self.wake_steps:
            # The ratios are over the steps' warm times in that measurement; the table may
            # price a step colder than that (a fidelity profile's cold looks at prefills).
            # What a step after idle costs is ratio x warm, so scale to the table's figure.
            for k, (c, p, d, kv) in enumerate(steps):
                table_s, _ = self.step_s(BatchShape(c, p, d, kv))
                for row in self.wake_ratios:
                    row[k] *= float(warm[k]) / table_s

    def overhead(self, requests: int) -> float:
        """Per-step CPU overhead of a step scheduling `requests` requests, seconds."""
        return self.overhead_s + self.overhead_per_request_s * requests

    def wake_ratio(self, idle_s: float, k: int) -> float:
        """Factor on the time (forward pass + overhead) of the `k`-th step (0-based) after
        the engine sat idle for `idle_s`: the profile's measured forward time of that step
        after such an idle wait over the table's own figure for it (the measured ratio x
        warm time / table, where the profile has the warm times), linear in the idle time
        between its points, from 1 at no idle time, flat beyond the longest. Never below
        1: the table may already price the step as cold as that, and waking never makes
        it faster. The engine applies it to the overhead too: host work wakes up alike."""
        if k >= self.wake_steps or idle_s <= 0:
            return 1.0
        xs = self.wake_idle_s
        i = bisect_right(xs, idle_s)
        if i == len(xs):
            r = self.wake_ratios[-1][k]
        else:
            x0, r0 = (0.0, 1.0) if i == 0 else (xs[i - 1], self.wake_ratios[i - 1][k])
            r = r0 + (self.wake_ratios[i][k] - r0) * (idle_s - x0) / (xs[i] - x0)
        return r if r > 1.0 else 1.0

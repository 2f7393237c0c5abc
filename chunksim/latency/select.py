"""The latency model a profile calls for: whole-step table or component composition."""

from __future__ import annotations

from chunksim.latency.base import StepCosts
from chunksim.latency.profile import Profile


def latency_model(profile: Profile, step_overhead_s: float | None = None) -> StepCosts:
    """`LatencyModel` for a whole-step profile, `ComponentModel` for a component one."""
    if profile.kind == "components":
        from chunksim.latency.composed import ComponentModel

        return ComponentModel(profile, step_overhead_s)
    from chunksim.latency.model import LatencyModel

    return LatencyModel(profile, step_overhead_s)

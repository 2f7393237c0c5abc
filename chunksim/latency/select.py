"""The latency model a profile calls for: whole-step table or component composition."""

from __future__ import annotations

from chunksim.latency.base import StepCosts
from chunksim.latency.profile import Profile


def latency_model(profile: Profile, step_overhead_s: float | None = None,
                  expert_skew: float | None = None) -> StepCosts:
    """`LatencyModel` for a whole-step profile, `ComponentModel` for a component one;
    with the profile's calibration (`sim calibrate`) applied where it has one.
    `expert_skew`: routing skew of a MoE component profile (`latency.moe`; refused
    otherwise)."""
    from chunksim.latency.calibrated import calibrated

    if profile.kind == "components":
        from chunksim.latency.composed import ComponentModel

        return calibrated(ComponentModel(profile, step_overhead_s, expert_skew),
                          profile.provenance, profile.path)
    if expert_skew is not None:
        raise ValueError(f"--expert-skew {expert_skew:g}: profile {profile.path} is a "
                         f"whole-step table; routing skew prices the expert component of a "
                         f"MoE component profile")
    from chunksim.latency.model import LatencyModel

    return calibrated(LatencyModel(profile, step_overhead_s), profile.provenance, profile.path)

"""A run's summary from its records: the metrics (`sim.metrics.metrics`) completed with the
profile's facts, per-class sections and the warnings."""

from __future__ import annotations

from chunksim.latency.coverage import extrapolation_warnings, profile_ranges
from chunksim.latency.profile import Profile
from chunksim.policies import chosen_defaults
from chunksim.sim.build import EngineParts, RunConfig
from chunksim.sim.engine.engine import SimResult
from chunksim.sim.metrics.metrics import summarize, summarize_classes
from chunksim.sim.records.records import StepTotals


def summarize_run(result: SimResult, profile: Profile, cfg: RunConfig,
                  parts: EngineParts) -> dict:
    """The summary of a run's records (its meta completed with the profile's facts, and
    a warning when many steps were priced outside the profile's grid)."""
    latency, device = parts.latency, parts.device
    meta = dict(result.meta)
    meta.update(profile=profile.path.rsplit("/", 1)[-1], profile_label=profile.label,
                profile_kind=profile.kind,
                profile_filled_cells=latency.filled_cells,
                policy_defaults=chosen_defaults(cfg.policy, dict(cfg.knobs), cfg.chunk, device))
    ranges = profile_ranges(profile)
    steps = result.step_totals  # the engine's own totals, or a fleet's folded here
    if steps is None:
        steps = (StepTotals.merged(result.step_parts, ranges, result.step_part_totals)
                 if result.step_parts is not None else StepTotals.of(result.steps, ranges))
    summary = summarize(result.request_columns, steps, result.itl_s, cfg.slos_s, meta)
    by_class = summarize_classes(result.request_columns, result.itl_by_class_s, cfg.slos_s,
                                 cfg.class_slos_s)
    if by_class:
        summary["by_class"] = by_class
    summary["warnings"] = extrapolation_warnings(steps, ranges)
    warning = getattr(latency.drafter, "warning", None)
    if warning:
        summary["warnings"].append(warning)
    return summary

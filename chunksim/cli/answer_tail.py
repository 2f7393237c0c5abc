"""The cost flags every verdict takes (--gpu-cost-per-hour, --gpu); what they price is
`reports.answer_tail`."""

from __future__ import annotations

from collections.abc import Callable

from chunksim.cli.options import _values, bundle, options_of
from chunksim.sweep.cost import CostConfig


def with_cost_options(fn: Callable) -> Callable:
    """Add --gpu-cost-per-hour and --gpu; the command receives `cost_cfg: CostConfig`."""
    return bundle(options_of(CostConfig, "Cost"),
                  lambda picked: CostConfig(**_values(CostConfig, picked)), "cost_cfg")(fn)

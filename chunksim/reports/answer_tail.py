"""How every verdict ends: the recommendation's deployment (`sweep.deploy`) and, with
--gpu-cost-per-hour or --gpu, each configuration's cost (`sweep.cost`). Shared by `sim
compare` and `sim capacity` (plain, --gpus and --target-rate)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from chunksim.sweep.cost import Cost, CostConfig, GpuPrice, config_gpus, cost_of
from chunksim.sweep.deploy import Deployment, deployment


@dataclass
class AnswerTail:
    """What closes a verdict."""

    deployment: Deployment | None
    costs: list[Cost]
    price: GpuPrice | None
    at: str
    """Where the cost is read (`its capacity`, `the compared load`, `the target rate`)."""

    def print(self) -> None:
        from chunksim.reports.deploy_text import print_deploy

        if self.deployment is not None or self.costs:
            print_deploy(self.deployment, self.costs, self.price, self.at)

    def section(self, doc) -> None:
        from chunksim.reports.deploy_text import deploy_section

        if self.deployment is not None or self.costs:
            deploy_section(doc, self.deployment, self.costs, self.price, self.at)

    def document(self) -> dict[str, Any]:
        """For comparison.json / capacity.json."""
        out: dict[str, Any] = {}
        if self.deployment is not None:
            out["deploy"] = asdict(self.deployment)
        if self.price is not None:
            out["cost"] = {"price": asdict(self.price), "at": self.at,
                           "configurations": [
                               {k: (None if isinstance(v, float) and not math.isfinite(v)
                                    else v) for k, v in asdict(c).items()}
                               for c in self.costs]}
        return out


def answer_tail(recommended, points: list[tuple[Any, dict | None, float]], run_cfg,
                workload_opts, profile, cost_cfg: CostConfig, at: str) -> AnswerTail:
    """`recommended`: (config, rate) or None; `points`: (config, summary, rate) of every
    configuration whose cost is read (a None summary is skipped)."""
    path = str(profile.path)
    bundled = "/chunksim/data/profiles/" in path.replace("\\", "/")
    name = path.rsplit("/", 1)[-1].removesuffix(".csv") if bundled else path
    dep = None
    if recommended is not None:
        config, rate = recommended
        dep = deployment(config, run_cfg, profile.provenance, rate, workload_opts, name)
    price = cost_cfg.price
    costs = []
    if price is not None:
        for config, summary, rate in points:
            if summary is not None:
                costs.append(cost_of(config.label, config_gpus(
                    config, run_cfg.fleet, profile.provenance), summary, rate, price))
    return AnswerTail(dep, costs, price, at)

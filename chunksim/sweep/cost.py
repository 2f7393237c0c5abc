"""What a configuration costs: dollars per million output tokens and GPU-hours per day, from
a price per GPU-hour (`--gpu-cost-per-hour`, or a `--gpu` preset with its source and date).

    $ per Mtok = GPUs x price per GPU-hour / (output tokens/s x 3600) x 1e6
    GPU-hours per day = GPUs x 24

Output tokens/s is the run's own (vLLM bench's `output_throughput`): the tokens of the
requests served, at a capacity the rate the configuration sustains under the SLOs, so the
capacity answer reads as a cost. Where requests were rejected (`--max-reject-pct`), the
rate offered and the rate served differ, and both are stated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chunksim.core.knobs import knob

_C = "Cost"


@dataclass(frozen=True)
class GpuPrice:
    """One preset: an on-demand price per GPU-hour and where it comes from."""

    name: str
    usd_per_hour: float
    source: str
    date: str


GPU_PRICES: dict[str, GpuPrice] = {p.name: p for p in (
    GpuPrice("a100-80gb", 1.30, "mercatus-ai.com/blog/cloud-gpu-pricing, specialty-cloud "
             "on-demand range $1.10-1.50, midpoint", "2026-05"),
    GpuPrice("h100-sxm", 3.00, "mercatus-ai.com/blog/cloud-gpu-pricing, specialty-cloud "
             "on-demand range $2.50-3.50, midpoint", "2026-05"),
    GpuPrice("h200-sxm", 4.00, "mercatus-ai.com/blog/cloud-gpu-pricing, specialty-cloud "
             "on-demand range $3.50-4.50, midpoint", "2026-05"),
    GpuPrice("b200", 5.25, "lyceum.technology/magazine/nvidia-b200-gpu-cloud-pricing-2026, "
             "specialty-cloud on-demand range $4.50-6.00, midpoint", "2026-03"),
)}
"""Public on-demand list prices per GPU-hour (hyperscalers charge more, reservations
less: give your own with --gpu-cost-per-hour)."""


def _price(value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"--gpu-cost-per-hour {value}: must be a finite number > 0 "
                         "(dollars per GPU-hour, e.g. 3.5)")
    return float(value)


@dataclass(frozen=True)
class CostConfig:
    """The price of a GPU-hour (None: no cost in the answer)."""

    gpu_cost_per_hour: float | None = knob(None, "--gpu-cost-per-hour", panel=_C,
                                           parse=_price)
    """Dollars per GPU-hour: adds $ per million output tokens and GPU-hours per day to the
    verdict and the capacity tables."""
    gpu: str | None = knob(None, "--gpu", panel=_C)
    """A price preset instead of --gpu-cost-per-hour: a100-80gb ($1.30), h100-sxm ($3.00),
    h200-sxm ($4.00), b200 ($5.25); public on-demand prices, source and date in the
    answer."""

    def __post_init__(self) -> None:
        if self.gpu is not None and self.gpu not in GPU_PRICES:
            raise ValueError(f"--gpu {self.gpu!r} is no price preset; choose one of "
                             f"{', '.join(GPU_PRICES)} or give --gpu-cost-per-hour")
        if self.gpu is not None and self.gpu_cost_per_hour is not None:
            raise ValueError(f"--gpu {self.gpu} and --gpu-cost-per-hour "
                             f"{self.gpu_cost_per_hour:g} both set the price; give one")

    @property
    def price(self) -> GpuPrice | None:
        """The price in force (None: no cost asked for)."""
        if self.gpu is not None:
            return GPU_PRICES[self.gpu]
        if self.gpu_cost_per_hour is not None:
            return GpuPrice("given", self.gpu_cost_per_hour, "--gpu-cost-per-hour", "")
        return None


def usd_per_mtok(gpus: int, usd_per_gpu_hour: float, output_tok_per_s: float) -> float:
    """Dollars per million output tokens (inf when nothing is produced)."""
    if not output_tok_per_s > 0:
        return math.inf
    return gpus * usd_per_gpu_hour / (output_tok_per_s * 3600.0) * 1e6


def gpu_hours_per_day(gpus: int) -> float:
    return gpus * 24.0


@dataclass(frozen=True)
class Cost:
    """One configuration's cost at one operating point."""

    label: str
    gpus: int
    rate: float
    """Requests/s offered at the operating point where the cost is read."""
    output_tok_per_s: float
    """Output tokens/s served (of the requests completed; rejected ones produce none)."""
    usd_per_mtok: float
    gpu_hours_per_day: float
    usd_per_day: float
    served_rate: float = math.nan
    """Requests/s completed (the offered rate less what was rejected or left unfinished)."""
    rejected_pct: float = 0.0
    """Requests rejected on arrival, % of those offered: the rate served is below the
    rate offered by at least this share."""


def cost_of(label: str, gpus: int, summary: dict, rate: float, price: GpuPrice) -> Cost:
    """The cost of `gpus` GPUs producing `summary`'s served output throughput, offered
    `rate`."""
    from chunksim.sim.records.rejections import reject_pct

    tok = float(summary.get("output_throughput") or 0.0)
    served = float(summary.get("request_throughput") or 0.0)
    return Cost(label, gpus, rate, tok, usd_per_mtok(gpus, price.usd_per_hour, tok),
                gpu_hours_per_day(gpus), gpu_hours_per_day(gpus) * price.usd_per_hour,
                served, reject_pct(summary))


def config_gpus(config, fleet, provenance: dict) -> int:
    """GPUs one configuration occupies: instances (1, replicas, P + D; its own layout, else
    the run's `fleet` flags) x the profile's tensor-parallel degree."""
    from chunksim.latency.profile import engine_devices

    if config.fleet is not None and config.fleet.has_layout:
        instances = config.fleet.gpus
    elif fleet.pd_counts is not None:
        instances = sum(fleet.pd_counts)
    else:
        instances = fleet.replica_count
    return instances * engine_devices(provenance)

"""What a MoE layer's routed experts cost on a step of T tokens: tokens per expert under
top-k routing, experts per device under expert parallelism. Pure.

A token picks `top_k` distinct experts of `num_experts`; expert e is picked by a token
with probability p_e (sum p_e = top_k, each p_e <= 1). Over T tokens, expert e is idle
with probability (1 - p_e)^T, so

    active_e = 1 - (1 - p_e)^T            (the chance it runs at all)
    n_e      = T p_e / active_e           (its mean tokens when it runs)
    cost_e   = active_e x expert(n_e)     (expert(n): the profile's `expert` component,
                                           one expert's FFN on n tokens)

A device holds num_experts / ep experts and runs them one after another; the layer
waits for the busiest device, so the routed-expert term is max over devices of the sum
of its experts' cost_e. Uniform routing (`skew` 0) gives p_e = top_k / num_experts and

    expert term = (num_experts / ep) x active x expert(T top_k / (num_experts active))

which for large T is the familiar (num_experts / ep) x expert(T top_k / num_experts),
and for one decode, top_k experts of one token each. The per-token draws are taken as
independent, and an expert's cost at its mean load (exact where `expert` is linear).

Skew (`--expert-skew s`): expert popularity follows Zipf's law, the i-th most popular
expert picked in proportion to 1 / i^s (s 0: uniform; NVIDIA's AIConfigurator times
its MoE kernels under a power-law token distribution of exponent 1.2); shares above 1
(an expert every token picks) are held at 1 and the rest spread over the others. The
popularity ranks are dealt to devices round-robin (the hottest on device 0, the next on
device 1, ...), as a placement that spreads hot experts would; device 0 is the busiest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Routing:
    """Routing of one MoE layer as the step cost sees it."""

    num_experts: int
    top_k: int
    ep: int = 1
    """Devices the experts are spread over (1: every expert on every device, sharded)."""
    skew: float = 0.0
    """Zipf exponent of expert popularity (0: uniform)."""

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"moe top_k={self.top_k}: must be in [1, num_experts="
                             f"{self.num_experts}]")
        if self.ep < 1 or self.num_experts % self.ep:
            raise ValueError(f"moe ep={self.ep} must divide num_experts={self.num_experts}")
        if not self.skew >= 0:
            raise ValueError(f"--expert-skew {self.skew}: use 0 (uniform) or more")

    @property
    def experts_per_device(self) -> int:
        return self.num_experts // self.ep

    def shares(self) -> np.ndarray:
        """p_e, most popular first: the chance a token picks expert e (sum = top_k)."""
        w = np.arange(1, self.num_experts + 1, dtype=np.float64) ** -self.skew
        p = np.zeros_like(w)
        free = np.ones(len(w), dtype=bool)
        left = float(self.top_k)
        while True:  # water-filling: a share above 1 is held at 1, the rest re-spread
            p[free] = left * w[free] / w[free].sum()
            over = free & (p > 1.0)
            if not over.any():
                return p
            p[over] = 1.0
            free &= ~over
            left = self.top_k - float((~free).sum())

    def device_shares(self) -> np.ndarray:
        """[ep, experts per device]: each device's experts' p_e (popularity ranks dealt
        round-robin). Under uniform routing every row is the same."""
        return self.shares().reshape(self.experts_per_device, self.ep).T


def routed_expert_s(tokens: float, shares: np.ndarray,
                    expert: Callable[[float], tuple[float, float, bool]]
                    ) -> tuple[float, float, bool]:
    """(seconds, sigma, outside the grid) of the routed experts of one layer on a step of
    `tokens` tokens: the busiest device's sum of active_e x expert(n_e) (module docstring).
    `shares`: `Routing.device_shares()`; `expert(n)`: the component's (seconds, sigma,
    outside) at n tokens."""
    best = (-1.0, 0.0, False)
    for row in _distinct_rows(shares):
        total = wsig = 0.0
        out = False
        for p, count in row:
            active = -math.expm1(tokens * math.log1p(-p)) if p < 1.0 else 1.0
            # an active expert runs at least one token; rounding may put T p / active a
            # hair below 1, which would read as below the grid
            s, sig, o = expert(max(1.0, tokens * p / active))
            total += count * (active * s)
            wsig += count * (active * s * sig)
            out = out or o
        if total > best[0]:
            best = (total, wsig / total if total > 0 else 0.0, out)
    return best


def _distinct_rows(shares: np.ndarray) -> list[tuple[tuple[float, int], ...]]:
    """Each distinct device row once, as (share, how many experts have it) pairs: under
    uniform routing one row of one pair."""
    seen: dict[tuple[tuple[float, int], ...], None] = {}
    for row in shares:
        counts: dict[float, int] = {}
        for x in row:
            counts[float(x)] = counts.get(float(x), 0) + 1
        seen.setdefault(tuple(counts.items()), None)
    return list(seen)


def expert_from_layer(tokens: float, layer_s: float, routing: Routing) -> tuple[float, float]:
    """(n, expert(n)) that make uniform routing price a whole MoE layer's routed experts
    at `layer_s` seconds on a `tokens`-token step: n = T k / (E active), expert(n) =
    layer_s x ep / (E active). What an importer writes as `expert` rows from a source that
    times the whole MoE op per step (a kernel database); `routed_expert_s` at `tokens`
    then gives back `layer_s`."""
    e, k = routing.num_experts, routing.top_k
    active = -math.expm1(tokens * math.log1p(-k / e)) if k < e else 1.0
    return max(1.0, tokens * k / (e * active)), layer_s * routing.ep / (e * active)

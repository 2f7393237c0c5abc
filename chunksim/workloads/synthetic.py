"""Seeded synthetic workloads: an arrival process times two length distributions.

Arrivals, prompt lengths and output lengths each get their own child stream of the seed
(`SeedSequence.spawn`), so changing the output distribution keeps the same arrivals and
prompts — comparisons can vary one factor at a time. Same config -> identical workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from chunksim.core.spec import Workload
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess, sample_arrivals
from chunksim.workloads.build import workload_from_arrays
from chunksim.workloads.lengths import Empirical, LengthDist, LogNormal

# Azure LLM inference 2023, conversation trace (19,366 requests): prompt mean 1155 / std
# 1109, output mean 211 / std 163, max 14,050 / 1,000. The defaults for a "chat" workload.
CHAT_PROMPT = LogNormal(mean_tokens=1155, std_tokens=1109, min_tokens=1, max_tokens=16384)
CHAT_OUTPUT = LogNormal(mean_tokens=211, std_tokens=163, min_tokens=1, max_tokens=1024)
DEFAULT_NUM_REQUESTS = 200
"""Requests generated when neither a count nor a duration is given."""


@dataclass(frozen=True)
class SyntheticConfig:
    """Everything that defines a synthetic workload; `generate` is a pure function of it."""

    arrivals: ArrivalProcess = field(default_factory=ArrivalProcess)
    """When requests arrive."""
    prompt: LengthDist = CHAT_PROMPT
    """Prompt length distribution, tokens."""
    output: LengthDist = CHAT_OUTPUT
    """Output length distribution, tokens."""
    num_requests: int | None = None
    """Exact request count; None with `duration_s` None means `DEFAULT_NUM_REQUESTS`."""
    duration_s: float | None = None
    """Generate every arrival in [0, duration_s) instead of a fixed count."""
    seed: int = 0
    """Seed of numpy's Generator; same seed and config -> identical requests."""
    name: str | None = None
    """Workload label; None derives one like `poisson-4rps`."""
    request_class: str = "default"
    """Traffic class stamped on every request."""

    def __post_init__(self) -> None:
        if self.num_requests is not None and self.duration_s is not None:
            raise ValueError(
                f"num_requests={self.num_requests} and duration_s={self.duration_s} both "
                "given; a synthetic workload is sized by one of them, drop the other"
            )
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError(f"num_requests={self.num_requests} must be >= 1")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and self.duration_s > 0
        ):
            raise ValueError(f"duration_s={self.duration_s} must be a finite number > 0")
        if self.duration_s is not None and self.arrivals.kind is ArrivalKind.BURST:
            raise ValueError(
                "burst arrivals all land at t=0, so duration_s cannot size them; "
                "give num_requests instead"
            )
        if self.seed < 0:
            raise ValueError(f"seed={self.seed} must be >= 0")

    @property
    def label(self) -> str:
        """The workload name: the given one, or kind and rate."""
        if self.name:
            return self.name
        a = self.arrivals
        if a.kind is ArrivalKind.BURST:
            return "burst"
        b = f"-b{a.burstiness:g}" if a.kind is ArrivalKind.GAMMA else ""
        return f"{a.kind.value}-{a.rate_per_s:g}rps{b}"

    def to_params(self) -> dict:
        """JSON-ready echo of the config for summary.json."""
        return {
            "generator": "synthetic",
            "arrivals": self.arrivals.kind.value,
            "rate_per_s": self.arrivals.rate_per_s,
            "burstiness": self.arrivals.burstiness,
            "prompt": self.prompt.to_params(),
            "output": self.output.to_params(),
            "num_requests": self.num_requests,
            "duration_s": self.duration_s,
            "seed": self.seed,
        }


def sample_lengths(
    prompt: LengthDist, output: LengthDist, n: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """`n` prompt and output lengths from their own child streams of `seed`."""
    _, prompt_ss, output_ss = np.random.SeedSequence(seed).spawn(3)
    prompt_rng = np.random.default_rng(prompt_ss)
    if isinstance(prompt, Empirical) and prompt.pairs_with(output):
        rows = prompt_rng.integers(0, len(prompt.values), size=n)
        return prompt.take(rows), output.take(rows)  # type: ignore[union-attr]
    return prompt.sample(n, prompt_rng), output.sample(n, np.random.default_rng(output_ss))


def sample_arrival_times(config: SyntheticConfig) -> np.ndarray:
    """Arrival times (s) from the seed's arrival stream."""
    arrival_ss = np.random.SeedSequence(config.seed).spawn(3)[0]
    num = config.num_requests
    if num is None and config.duration_s is None:
        num = DEFAULT_NUM_REQUESTS
    return sample_arrivals(
        config.arrivals,
        np.random.default_rng(arrival_ss),
        num_requests=num,
        duration_s=config.duration_s,
    )


def generate(config: SyntheticConfig) -> Workload:
    """The workload `config` describes (deterministic in `config`)."""
    arrival_s = sample_arrival_times(config)
    if len(arrival_s) == 0:  # unreachable today (t=0 always arrives); kept for clarity
        raise ValueError(f"no arrivals in duration_s={config.duration_s}; lengthen it")
    prompt, output = sample_lengths(config.prompt, config.output, len(arrival_s), config.seed)
    return workload_from_arrays(
        config.label,
        arrival_s,
        prompt,
        output,
        request_class=[config.request_class] * len(arrival_s),
        params=config.to_params(),
    )

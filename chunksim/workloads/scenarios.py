"""Named scenarios built from the synthetic pieces.

`long-prompt` is the seed question of chunksim: what one very long prompt does to the
inter-token latency of everyone already decoding, under whole vs chunked prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chunksim.core.spec import Workload
from chunksim.workloads.arrivals import ArrivalProcess
from chunksim.workloads.build import workload_from_arrays
from chunksim.workloads.lengths import LengthDist, LogNormal
from chunksim.workloads.synthetic import SyntheticConfig, generate

LONG_PROMPT_DEFAULT_RATE_PER_S = 8.0
"""Background chat rate of `long-prompt`: on the bundled tiny-cpu profile the engine is
~90 % busy with 2-3 decodes in flight, so the long prompt lands on running decodes."""
SHORT_CHAT_PROMPT = LogNormal(mean_tokens=256, std_tokens=192, min_tokens=32, max_tokens=1024)
SHORT_CHAT_OUTPUT = LogNormal(mean_tokens=128, std_tokens=96, min_tokens=16, max_tokens=512)
LONG_CLASS = "long"
CHAT_CLASS = "chat"


@dataclass(frozen=True)
class LongPromptConfig:
    """One long prompt dropped into a steady Poisson stream of short chat requests."""

    rate_per_s: float = LONG_PROMPT_DEFAULT_RATE_PER_S
    """Poisson rate of the background chat stream, requests/s."""
    duration_s: float = 30.0
    """Span of the background stream, seconds."""
    long_prompt_tokens: int = 8192
    """Prompt length of the long request, tokens."""
    long_output_tokens: int = 128
    """Output length of the long request, tokens."""
    long_arrival_s: float = 10.0
    """When the long request arrives, seconds (must fall inside the stream)."""
    prompt: LengthDist = SHORT_CHAT_PROMPT
    """Background prompt lengths (default lognormal mean 256, clamped to [32, 1024])."""
    output: LengthDist = SHORT_CHAT_OUTPUT
    """Background output lengths (default lognormal mean 128, clamped to [16, 512])."""
    seed: int = 0
    """Seed of the background stream."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"duration_s={self.duration_s} must be a finite number > 0")
        if not 0 <= self.long_arrival_s < self.duration_s:
            raise ValueError(
                f"long_arrival_s={self.long_arrival_s} must lie in [0, duration_s="
                f"{self.duration_s}); move it or lengthen the stream"
            )
        if self.long_prompt_tokens < 1 or self.long_output_tokens < 1:
            raise ValueError(
                f"long_prompt_tokens={self.long_prompt_tokens}, long_output_tokens="
                f"{self.long_output_tokens}; both must be >= 1"
            )


def long_prompt(config: LongPromptConfig | None = None) -> Workload:
    """The `long-prompt` scenario; the long request's id is in `notes` and
    `longest_request_id(workload)` finds it."""
    c = config or LongPromptConfig()
    background = generate(
        SyntheticConfig(
            arrivals=ArrivalProcess(rate_per_s=c.rate_per_s),
            prompt=c.prompt,
            output=c.output,
            duration_s=c.duration_s,
            seed=c.seed,
        )
    )
    bg = background.requests  # a SpecTable: its columns, the long request appended
    arrival = np.append(bg.arrival_s, float(c.long_arrival_s))
    prompt = np.append(bg.prompt_tokens, int(c.long_prompt_tokens))
    output = np.append(bg.output_tokens, int(c.long_output_tokens))
    classes = [CHAT_CLASS] * len(bg) + [LONG_CLASS]
    # The long request goes last in input order, so the stable sort places it after any
    # chat request arriving at the very same instant.
    order = np.argsort(arrival, kind="stable")
    long_id = int(np.flatnonzero(order == len(bg))[0])
    params = {
        "generator": "long-prompt",
        "rate_per_s": c.rate_per_s,
        "duration_s": c.duration_s,
        "long_prompt_tokens": c.long_prompt_tokens,
        "long_output_tokens": c.long_output_tokens,
        "long_arrival_s": c.long_arrival_s,
        "prompt": c.prompt.to_params(),
        "output": c.output.to_params(),
        "seed": c.seed,
        "long_request_id": long_id,
    }
    return workload_from_arrays(
        f"long-prompt-{c.long_prompt_tokens}tok-{c.rate_per_s:g}rps",
        arrival,
        prompt,
        output,
        request_class=classes,
        notes=(
            f"long request: id {long_id}, {c.long_prompt_tokens} prompt tokens at "
            f"{c.long_arrival_s:g} s, class {LONG_CLASS!r}",
        ),
        params=params,
    )


def longest_request_id(workload: Workload) -> int:
    """Id of the request with the longest prompt (the earliest one on ties)."""
    return max(workload.requests, key=lambda r: (r.prompt_tokens, -r.request_id)).request_id

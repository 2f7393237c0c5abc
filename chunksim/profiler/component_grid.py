"""What `sim profile --kind components` measures: each component's axes, and the timing.

The dense axis is dense where tile effects live: every 16 tokens up to 512, then
geometric (x sqrt 2) to the largest step. Decode attention is measured at unequal
contexts too: `spreads` are longest / mean context ratios, each batch one member at the
longest and the rest equal (`decode_lengths`), as far as the count allows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


def dense_tokens(max_tokens: int) -> tuple[int, ...]:
    """1, every 16 up to 512, then x sqrt(2) (rounded) up to `max_tokens` (included)."""
    values = {1, *range(16, min(512, max_tokens) + 1, 16)}
    x = 512.0
    while x < max_tokens:
        x *= math.sqrt(2)
        values.add(min(max_tokens, int(round(x))))
    values.add(max_tokens)
    return tuple(sorted(values))


@dataclass(frozen=True)
class ComponentGrid:
    """Axes and timing settings of one component profile run."""

    preset: str
    max_tokens: int
    """Largest step (dense, embed): the dense axis is `dense_tokens(max_tokens)`."""
    chunk_len: tuple[int, ...]
    prior_len: tuple[int, ...]
    """Contains 0."""
    decode_count: tuple[int, ...]
    """Contains 1 and 2 (no interpolation then reads the spread fill of one decode)."""
    kv_len: tuple[int, ...]
    spreads: tuple[float, ...]
    """Longest / mean context ratios, starting at 1."""
    logits: tuple[int, ...]
    warmup: int = 2
    repeats: int = 5
    point_budget_s: float = 1.0
    point_min_s: float = 0.04
    calibration_steps: int = 36
    """Whole-model steps timed to report the composed model's error."""
    sequence_rounds: int = 7
    """Rounds of the calibration steps back to back (each step's median over rounds)."""
    looks: int = 2
    """Looks at each fast point, each in its own order; a point keeps its lowest
    (`profiler.component_points`)."""
    relook_below_s: float = 0.01
    """Points whose best median so far is under this get the later looks."""

    @property
    def tokens(self) -> tuple[int, ...]:
        return dense_tokens(self.max_tokens)

    def as_dict(self) -> dict:
        d = asdict(self)
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
        d["tokens"] = list(self.tokens)
        return d


def decode_lengths(count: int, mean: int, spread: float) -> list[int] | None:
    """`count` contexts with mean exactly `mean` and the longest round(spread x mean): one
    member at the longest, the rest as equal as integers allow (None if the rest would
    fall below 1 token)."""
    if count == 1 or spread == 1.0:
        return [mean] * count if spread == 1.0 else None
    longest = int(round(spread * mean))
    rest = mean * count - longest
    if rest < count - 1:
        return None
    base, extra = divmod(rest, count - 1)
    return [longest] + [base + (1 if i < extra else 0) for i in range(count - 1)]


PRESETS: dict[str, ComponentGrid] = {
    # `tiny` on one CPU thread in about a minute, calibration included.
    "quick": ComponentGrid(
        preset="quick", max_tokens=4096, chunk_len=(1, 16, 64, 256, 1024, 2048),
        prior_len=(0, 256, 1024, 4096), decode_count=(1, 2, 4, 8, 16, 32, 64),
        kv_len=(16, 256, 1024, 2048), spreads=(1.0, 2.0, 3.0),
        logits=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256), point_min_s=0.01, calibration_steps=30,
        sequence_rounds=5,
    ),
    # What the simulator's scenarios need: steps to 8192 tokens, 256 decodes, 16k contexts.
    "default": ComponentGrid(
        preset="default", max_tokens=8192,
        chunk_len=(1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
        prior_len=(0, 512, 1024, 2048, 4096, 8192, 16384),
        decode_count=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        kv_len=(16, 256, 512, 1024, 2048, 4096, 8192, 16384), spreads=(1.0, 1.5, 2.0, 3.0),
        logits=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256), calibration_steps=60,
    ),
}


def component_grid(name: str) -> ComponentGrid:
    """The preset `name` (`fine` maps to `default`); ValueError naming --grid otherwise."""
    try:
        return PRESETS["default" if name == "fine" else name]
    except KeyError:
        raise ValueError(f"--grid {name!r} is not a component grid preset; use one of "
                         f"{', '.join(PRESETS)}") from None

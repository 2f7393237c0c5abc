"""The profiling grid: which (chunk_len, prior_len, decode_count, kv_len) points to measure.

Row rules (docs/profile-format.md): the main grid (prior_len == 0) is C x D x K minus the
empty step, with decode_count == 0 rows measured once at kv_len == 0; prior-context rows are
(C \\ {0}) x P with no decodes. Points whose KV footprint plus weights exceed a fraction of
device memory are pruned (absent from the table; the loader extrapolates them), and so are
points longer than the model's RoPE table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chunksim.decoder.config import ModelConfig


@dataclass(frozen=True, order=True)
class GridPoint:
    """One step shape; field order is the table's sort order."""

    prior_len: int
    """Tokens of the chunk's own prompt already cached (0 on the main grid)."""
    chunk_len: int
    """Prefill tokens in the step's one chunk (0 = decode-only)."""
    decode_count: int
    """Sequences decoding one token each."""
    kv_len: int
    """Tokens in each decode's cache before the step (0 when decode_count == 0)."""

    def kv_tokens(self) -> int:
        """KV-cache tokens the step touches, new ones included."""
        return self.decode_count * (self.kv_len + 1) + self.prior_len + self.chunk_len

    def key(self) -> tuple[int, int, int, int]:
        """(chunk_len, prior_len, decode_count, kv_len), the CSV's column order."""
        return (self.chunk_len, self.prior_len, self.decode_count, self.kv_len)


@dataclass(frozen=True)
class GridSpec:
    """Axes and timing settings of one profile run."""

    preset: str
    """Preset the axes came from (`quick`, `default`, `fine`), `custom` if overridden."""
    chunk_len: tuple[int, ...]
    """C: prefill chunk lengths, ascending, containing 0."""
    decode_count: tuple[int, ...]
    """D: decode batch sizes, ascending, containing 0."""
    kv_len: tuple[int, ...]
    """K: decode KV lengths, ascending, each >= 1."""
    prior_len: tuple[int, ...]
    """P: prior-context lengths for the prior rows, ascending, each >= 1 (may be empty)."""
    warmup: int = 1
    """Untimed runs per point (one suffices in eager mode: each point's first run pays the
    allocator and kernel-selection costs)."""
    repeats: int = 5
    """Timed runs per point (fewer once `point_budget_s` is spent, never below 3)."""
    point_budget_s: float = 2.0
    """Timed seconds after which a point stops repeating (keeps 8192-token CPU steps cheap)."""
    point_min_s: float = 0.1
    """Timed seconds a fast point repeats for, beyond `repeats` (up to 10 x `repeats`)."""

    def __post_init__(self) -> None:
        _check_axis("--chunk-lens", self.chunk_len, minimum=0, needs_zero=True)
        _check_axis("--decode-counts", self.decode_count, minimum=0, needs_zero=True)
        _check_axis("--kv-lens", self.kv_len, minimum=1, needs_zero=False)
        _check_axis("--prior-lens", self.prior_len, minimum=1, needs_zero=False, empty_ok=True)
        if self.chunk_len == (0,) and self.decode_count == (0,):
            raise ValueError("--chunk-lens and --decode-counts are both just 0: no step to "
                             "measure; add a chunk length or a decode count")
        if self.warmup < 0 or self.repeats < 1:
            raise ValueError(f"--warmup {self.warmup} / --repeats {self.repeats}: need "
                             f"warmup >= 0 and repeats >= 1")
        if not self.point_budget_s > 0 or not self.point_min_s >= 0:
            raise ValueError(f"--point-budget-s {self.point_budget_s} must be > 0 and "
                             f"point_min_s={self.point_min_s} >= 0")

    def points(self) -> list[GridPoint]:
        """Every point the row rules ask for, sorted, before pruning."""
        pts = {GridPoint(0, c, d, k if d else 0)
               for c in self.chunk_len for d in self.decode_count for k in self.kv_len
               if c or d}
        pts |= {GridPoint(p, c, 0, 0) for c in self.chunk_len if c for p in self.prior_len}
        return sorted(pts)

    def as_dict(self) -> dict:
        """The profile JSON's `grid` entry."""
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    def with_overrides(self, **axes: tuple[int, ...] | None) -> GridSpec:
        """A copy with the given axes replaced (None = keep); preset becomes `custom`."""
        given = {k: v for k, v in axes.items() if v is not None}
        if not given:
            return self
        return GridSpec(**{**asdict(self), **given, "preset": "custom"})


def _check_axis(flag: str, values: tuple[int, ...], minimum: int, needs_zero: bool,
                empty_ok: bool = False) -> None:
    if not values and not empty_ok:
        raise ValueError(f"{flag} is empty; give at least one value")
    if any(not isinstance(v, int) or v < minimum for v in values):
        raise ValueError(f"{flag} {','.join(map(str, values))}: values must be integers "
                         f">= {minimum}")
    if list(values) != sorted(set(values)):
        raise ValueError(f"{flag} {','.join(map(str, values))}: list each value once, "
                         f"ascending")
    if needs_zero and 0 not in values:
        raise ValueError(f"{flag} {','.join(map(str, values))} lacks 0; the table format "
                         f"needs it (add 0 to the list)")


def parse_axis(text: str, flag: str) -> tuple[int, ...]:
    """`"0,64,128"` -> (0, 64, 128), sorted and deduplicated; ValueError naming `flag`."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected comma-separated integers like "
                         f"'0,64,128'") from None
    return tuple(sorted(set(values)))


def _fine_chunks() -> tuple[int, ...]:
    # Dense where GPU tile quantisation shows: every 64 to 1024, every 128 to 2048, every 256
    # to 8192, plus both neighbours of each power of two from 128 (the step edges).
    values = {0, 16, 32, 48}
    values |= set(range(64, 1025, 64)) | set(range(1152, 2049, 128)) | set(range(2304, 8193, 256))
    for m in (128, 256, 512, 1024, 2048, 4096, 8192):
        values |= {m - 1, m + 1}
    return tuple(sorted(values))


PRESETS: dict[str, GridSpec] = {
    # `tiny` on one CPU thread in well under 2 minutes, for smoke runs and tests.
    "quick": GridSpec(
        preset="quick", chunk_len=(0, 64, 256, 1024), decode_count=(0, 1, 8, 32),
        kv_len=(1, 256, 1024), prior_len=(256, 1024), warmup=1, repeats=3, point_budget_s=1.0,
    ),
    # What the simulator's scenarios need: chunks to 8192, 256 decodes, 16k contexts.
    "default": GridSpec(
        preset="default", chunk_len=(0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
        decode_count=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256),
        kv_len=(1, 512, 1024, 2048, 4096, 8192, 16384),
        prior_len=(512, 1024, 2048, 4096, 8192, 16384), warmup=1, repeats=5,
    ),
    "fine": GridSpec(
        preset="fine", chunk_len=_fine_chunks(),
        decode_count=(0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256),
        kv_len=(1, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384),
        prior_len=(256, 512, 1024, 2048, 4096, 8192, 12288, 16384), warmup=3, repeats=10,
    ),
}


def grid_preset(name: str) -> GridSpec:
    """The grid preset `name`; ValueError naming `--grid` otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"--grid {name!r} is not a preset; use one of "
                         f"{', '.join(PRESETS)}") from None


@dataclass(frozen=True)
class Pruned:
    """Points kept and dropped by `prune`, with the reason counts."""

    kept: list[GridPoint]
    """Points to measure, sorted."""
    memory: int
    """Dropped: KV footprint + weights over the memory budget."""
    max_position: int
    """Dropped: a sequence longer than the model's RoPE table."""


def prune(points: list[GridPoint], cfg: ModelConfig, dtype: str, memory_bytes: int,
          memory_fraction: float = 0.9) -> Pruned:
    """Drop points that cannot run: too much KV for `memory_fraction` of `memory_bytes`, or
    a sequence past `cfg.max_position`."""
    budget = memory_fraction * memory_bytes - cfg.weights_bytes(dtype)
    per_token = cfg.kv_bytes_per_token(dtype)
    kept, mem, pos = [], 0, 0
    for p in points:
        if max(p.prior_len + p.chunk_len, p.kv_len + 1) > cfg.max_position:
            pos += 1
        elif p.kv_tokens() * per_token > budget:
            mem += 1
        else:
            kept.append(p)
    return Pruned(kept=kept, memory=mem, max_position=pos)

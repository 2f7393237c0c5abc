"""What `sim profile --engine vllm` measures, and how a measured step is checked. Pure.

A point is one engine step of a chosen shape: one prefill chunk of `chunk_len` tokens
after `prior_len` of its own prompt already cached, and `decode_count` decodes whose
contexts hold `kv_len` tokens before the step. Three kinds cover the component grid:
prefill (no decodes), decode (no chunk) and mixed (both, timed as one step, so the cross
term of running them together is measured, not assumed).

A step is only as good as its shape: `check_step` compares what the engine's scheduler
actually scheduled (its `SchedulerOutput.num_scheduled_tokens`, and each request's
context) with the shape asked for, and a point whose step differs is refused with the
reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True, order=True)
class Point:
    """One step shape."""

    chunk_len: int
    prior_len: int
    decode_count: int
    kv_len: int

    @property
    def kind(self) -> str:
        if self.chunk_len and self.decode_count:
            return "mixed"
        return "prefill" if self.chunk_len else "decode"

    @property
    def tokens(self) -> int:
        """Tokens the step schedules."""
        return self.chunk_len + self.decode_count

    def describe(self) -> str:
        parts = []
        if self.chunk_len:
            parts.append(f"a {self.chunk_len}-token chunk after {self.prior_len} cached")
        if self.decode_count:
            parts.append(f"{self.decode_count} decode(s) at context {self.kv_len}")
        return " + ".join(parts)


@dataclass(frozen=True)
class EngineGrid:
    """Axes of an engine profile. Prefill points: every chunk x prior; decode points:
    every decode count x context; mixed points: the `mixed_*` axes' full product."""

    preset: str
    chunk_len: tuple[int, ...]
    prior_len: tuple[int, ...]
    """Contains 0 (a first chunk)."""
    decode_count: tuple[int, ...]
    kv_len: tuple[int, ...]
    mixed_chunk_len: tuple[int, ...]
    mixed_prior_len: tuple[int, ...]
    mixed_decode_count: tuple[int, ...]
    mixed_kv_len: tuple[int, ...]
    repeats: int = 5
    """Timed looks at each point, interleaved over the grid in rounds."""

    def points(self) -> list[Point]:
        pre = [Point(c, p, 0, 0) for c in self.chunk_len for p in self.prior_len]
        dec = [Point(0, 0, d, k) for d in self.decode_count for k in self.kv_len]
        mix = [Point(c, p, d, k) for c in self.mixed_chunk_len for p in self.mixed_prior_len
               for d in self.mixed_decode_count for k in self.mixed_kv_len]
        return pre + dec + mix

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def thin(axis: tuple[int, ...]) -> tuple[int, ...]:
    """The mixed grid's axis from a main one: its first, middle and last values (a mixed
    point costs a product of four axes)."""
    return tuple(sorted({axis[0], axis[len(axis) // 2], axis[-1]}))


def grid_from_axes(preset: str, chunk_len, prior_len, decode_count, kv_len,
                   repeats: int) -> EngineGrid:
    """A grid over the given main axes, mixed axes thinned from them; ValueError naming
    the flag for a bad axis."""
    axes = {"--chunk-lens": chunk_len, "--prior-lens": prior_len,
            "--decode-counts": decode_count, "--kv-lens": kv_len}
    clean = {}
    for flag, values in axes.items():
        values = tuple(sorted(set(int(v) for v in values)))
        # a decode's context: at least 2 (its step before the timed one decodes too)
        low = {"--prior-lens": 0, "--kv-lens": 2}.get(flag, 1)
        if flag == "--prior-lens":
            values = tuple(sorted({0, *values}))
        if not values or values[0] < low:
            raise ValueError(f"{flag} {','.join(map(str, values)) or '(none)'}: give values "
                             f">= {low} as a comma list, e.g. {low + 16},{low + 256}")
        clean[flag] = values
    if repeats < 1:
        raise ValueError(f"--repeats {repeats}: give at least 1")
    c, p, d, k = (clean[f] for f in axes)
    return EngineGrid(preset, c, p, d, k, thin(c), thin(p), thin(d), thin(k), repeats)


_FIELD = {"--chunk-lens": "chunk_len", "--prior-lens": "prior_len",
          "--decode-counts": "decode_count", "--kv-lens": "kv_len"}

_QUICK_AXES = dict(chunk_len=(16, 64, 256, 1024), prior_len=(0, 512, 2048),
                   decode_count=(1, 2, 4, 6, 8, 12, 16, 24, 32),
                   kv_len=(16, 256, 512, 768, 1024, 1536, 2048))
"""Decode steps are dense on both axes: on a CPU a decode batch's cost is convex in its
count and context (the batch's KV outgrows the caches), where a coarse axis reads high in
between."""
_DEFAULT_AXES = dict(chunk_len=(1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
                     prior_len=(0, 512, 2048, 8192),
                     decode_count=(1, 2, 4, 8, 16, 32, 64, 128),
                     kv_len=(16, 512, 1024, 2048, 4096))
PRESETS: dict[str, EngineGrid] = {}
PRESETS["quick"] = EngineGrid("quick", **_QUICK_AXES,
                              **{f"mixed_{k}": thin(v) for k, v in _QUICK_AXES.items()})
"""A tiny model on a CPU in a few minutes."""
PRESETS["default"] = EngineGrid("default", **_DEFAULT_AXES,
                                **{f"mixed_{k}": thin(v) for k, v in _DEFAULT_AXES.items()})
"""A GPU: steps to 8192 tokens, 128 decodes, 4096-token contexts."""


def held_out(grid: EngineGrid, per_kind: int, seed: int) -> list[Point]:
    """`per_kind` step shapes of each kind drawn inside the grid's ranges and off its
    points (seeded): where the profile interpolates, to report how far it is off."""
    import random

    rng = random.Random(seed + 7)
    on = set(grid.points())

    def draw(axis: tuple[int, ...]) -> int:
        return rng.randint(axis[0], axis[-1])

    out: list[Point] = []
    kinds = (
        lambda: Point(draw(grid.chunk_len), draw(grid.prior_len), 0, 0),
        lambda: Point(0, 0, draw(grid.decode_count), draw(grid.kv_len)),
        lambda: Point(draw(grid.mixed_chunk_len), draw(grid.mixed_prior_len),
                      draw(grid.mixed_decode_count), draw(grid.mixed_kv_len)),
    )
    for make in kinds:
        got: list[Point] = []
        for _ in range(50 * per_kind):
            if len(got) == per_kind:
                break
            p = make()
            if p not in on and p not in got:
                got.append(p)
        out += got
    return out


def engine_grid(preset: str, chunk_lens: str | None = None, prior_lens: str | None = None,
                decode_counts: str | None = None, kv_lens: str | None = None,
                repeats: int | None = None) -> EngineGrid:
    """The preset (`fine` maps to `default`), its axes replaced by any given as comma
    lists; ValueError naming the flag."""
    try:
        base = PRESETS["default" if preset == "fine" else preset]
    except KeyError:
        raise ValueError(f"--grid {preset!r}: use one of {', '.join(PRESETS)}") from None
    given = {"--chunk-lens": chunk_lens, "--prior-lens": prior_lens,
             "--decode-counts": decode_counts, "--kv-lens": kv_lens}
    if all(v is None for v in given.values()) and repeats is None:
        return base
    axes = []
    for flag, text in given.items():
        if text is None:
            axes.append(getattr(base, _FIELD[flag]))
            continue
        try:
            axes.append(tuple(int(x) for x in text.split(",") if x.strip()))
        except ValueError:
            raise ValueError(f"{flag} {text!r}: give whole numbers separated by commas, "
                             f"e.g. {','.join(map(str, getattr(base, _FIELD[flag])[:3]))}"
                             ) from None
    grid = grid_from_axes(base.preset, *axes, repeats=base.repeats if repeats is None
                          else repeats)
    return replace(grid, preset=f"{base.preset} (axes given)" if any(
        v is not None for v in given.values()) else base.preset)


@dataclass(frozen=True)
class Scheduled:
    """What the engine scheduled for one request in a step."""

    role: str
    """`chunk` or `decode`: what the look asked of this request."""
    tokens: int
    """Its `num_scheduled_tokens`."""
    context: int
    """Tokens it had computed (in the KV cache) before the step."""


def check_step(point: Point, scheduled: dict[str, Scheduled], others: int = 0) -> str | None:
    """None if the step the engine scheduled is `point`'s shape, else why not (one line).

    `scheduled`: the look's own requests, as the scheduler's output and the requests'
    counters state them; `others`: requests scheduled that the look did not add."""
    why = []
    chunks = [s for s in scheduled.values() if s.role == "chunk"]
    decodes = [s for s in scheduled.values() if s.role == "decode"]
    if others:
        why.append(f"{others} other request(s) in the step")
    if point.chunk_len:
        if len(chunks) != 1:
            why.append(f"{len(chunks)} chunk request(s) scheduled, not 1")
        else:
            ch = chunks[0]
            if ch.tokens != point.chunk_len:
                why.append(f"the chunk got {ch.tokens} tokens, not {point.chunk_len}")
            if ch.context != point.prior_len:
                why.append(f"the chunk came after {ch.context} cached tokens, not "
                           f"{point.prior_len}")
    elif chunks:
        why.append(f"{len(chunks)} chunk request(s) scheduled in a decode step")
    if len(decodes) != point.decode_count:
        why.append(f"{len(decodes)} decode(s) scheduled, not {point.decode_count}")
    wrong_tokens = [s.tokens for s in decodes if s.tokens != 1]
    if wrong_tokens:
        why.append(f"{len(wrong_tokens)} decode(s) got {sorted(set(wrong_tokens))} tokens, "
                   f"not 1")
    wrong_ctx = sorted({s.context for s in decodes if s.context != point.kv_len})
    if wrong_ctx:
        why.append(f"decode context(s) {wrong_ctx[:4]} instead of {point.kv_len}")
    if not why:
        return None
    return f"asked for {point.describe()}; " + "; ".join(why)

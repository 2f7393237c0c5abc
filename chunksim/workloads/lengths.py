"""Token-length distributions for prompts and outputs, each a small frozen config.

Every distribution returns integers clamped to its [min_tokens, max_tokens]; clamping
shifts the realised mean a little, which `describe_workload` reports honestly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

import numpy as np


class LengthKind(str, Enum):
    """Length distribution family (the value doubles as the CLI choice)."""

    CONSTANT = "constant"
    UNIFORM = "uniform"
    LOGNORMAL = "lognormal"
    NORMAL = "normal"
    EMPIRICAL = "empirical"


class LengthDist(Protocol):
    """Anything that draws `n` integer token lengths >= 1."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray: ...

    def to_params(self) -> dict: ...


def _check_bounds(what: str, min_tokens: int, max_tokens: int) -> None:
    if min_tokens < 1:
        raise ValueError(f"{what}: min_tokens={min_tokens} must be >= 1")
    if max_tokens < min_tokens:
        raise ValueError(
            f"{what}: max_tokens={max_tokens} < min_tokens={min_tokens}; swap or widen them"
        )


@dataclass(frozen=True)
class Constant:
    """Every request has the same length."""

    tokens: int
    """The length, tokens (>= 1)."""

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"constant length tokens={self.tokens} must be >= 1")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.tokens, dtype=np.int64)

    def to_params(self) -> dict:
        return {"dist": "constant", "tokens": self.tokens}


@dataclass(frozen=True)
class Uniform:
    """Integers uniform on [min_tokens, max_tokens], both ends included."""

    min_tokens: int
    """Smallest length, tokens (>= 1)."""
    max_tokens: int
    """Largest length, tokens (>= min_tokens)."""

    def __post_init__(self) -> None:
        _check_bounds("uniform length", self.min_tokens, self.max_tokens)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.min_tokens, self.max_tokens, size=n, endpoint=True)

    def to_params(self) -> dict:
        return {"dist": "uniform", "min_tokens": self.min_tokens, "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class _MeanStd:
    mean_tokens: float
    """Mean of the unclamped distribution, tokens (> 0)."""
    std_tokens: float
    """Standard deviation of the unclamped distribution, tokens (>= 0)."""
    min_tokens: int = 1
    """Draws below this are raised to it (>= 1)."""
    max_tokens: int = 1 << 20
    """Draws above this are lowered to it."""

    def __post_init__(self) -> None:
        name = type(self).__name__.lower()
        if not (math.isfinite(self.mean_tokens) and self.mean_tokens > 0):
            raise ValueError(f"{name} length mean_tokens={self.mean_tokens} must be > 0")
        if not (math.isfinite(self.std_tokens) and self.std_tokens >= 0):
            raise ValueError(f"{name} length std_tokens={self.std_tokens} must be >= 0")
        _check_bounds(f"{name} length", self.min_tokens, self.max_tokens)

    def _finish(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(x), self.min_tokens, self.max_tokens).astype(np.int64)

    def to_params(self) -> dict:
        return {
            "dist": type(self).__name__.lower(),
            "mean_tokens": self.mean_tokens,
            "std_tokens": self.std_tokens,
            "min_tokens": self.min_tokens,
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class LogNormal(_MeanStd):
    """Log-normal with the given mean and std (of the lengths, not of their logs), clamped.

    Real prompt/output lengths are right-skewed; Azure conv fits sigma ~0.8-1.0 in log space.
    """

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        # Moment matching: sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2 / 2.
        sigma2 = math.log1p((self.std_tokens / self.mean_tokens) ** 2)
        mu = math.log(self.mean_tokens) - sigma2 / 2
        return self._finish(rng.lognormal(mu, math.sqrt(sigma2), size=n))


@dataclass(frozen=True)
class Normal(_MeanStd):
    """Normal with the given mean and std, rounded and clamped."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self._finish(rng.normal(self.mean_tokens, self.std_tokens, size=n))


@dataclass(frozen=True)
class Empirical:
    """Sample with replacement from observed lengths (e.g. one column of a CSV).

    Two `Empirical`s with the same `source` and row count (see `empirical_pair_from_csv`)
    are sampled as pairs from the same rows, keeping the prompt/output correlation.
    """

    values: tuple[int, ...] = field(repr=False)
    """The observed lengths, tokens (each >= 1)."""
    source: str = "inline"
    """File the values came from (paired sampling keys on it)."""
    column: str = ""
    """Column of `source` the values came from."""
    min_tokens: int = 1
    """Draws below this are raised to it (>= 1)."""
    max_tokens: int = 1 << 20
    """Draws above this are lowered to it."""

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"empirical lengths from {self.source} are empty; give >= 1 value")
        if min(self.values) < 1:
            raise ValueError(f"empirical lengths from {self.source} include {min(self.values)} < 1")
        _check_bounds("empirical length", self.min_tokens, self.max_tokens)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.take(rng.integers(0, len(self.values), size=n))

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The clamped lengths at the given row indices (used for paired sampling)."""
        arr = np.asarray(self.values, dtype=np.int64)
        return np.clip(arr[rows], self.min_tokens, self.max_tokens)

    def pairs_with(self, other: object) -> bool:
        """True when `other` holds the matching column of the same rows of the same file."""
        return (
            isinstance(other, Empirical)
            and other.source == self.source
            and self.source != "inline"
            and len(other.values) == len(self.values)
        )

    def to_params(self) -> dict:
        return {
            "dist": "empirical",
            "source": self.source,
            "column": self.column,
            "count": len(self.values),
            "min_tokens": self.min_tokens,
            "max_tokens": self.max_tokens,
        }


# Column names of the length files people usually have, tried in order when none is named:
# (prompt, output) for Azure, ShareGPT/arXiv (sarathi/vidur), Mooncake, BurstGPT, chunksim.
KNOWN_LENGTH_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ContextTokens", "GeneratedTokens"),
    ("num_prefill_tokens", "num_decode_tokens"),
    ("input_length", "output_length"),
    ("Request tokens", "Response tokens"),
    ("prompt_tokens", "output_tokens"),
)


def _read_columns(path: Path, columns: dict[str, str | None]) -> dict[str, np.ndarray]:
    """Read named integer columns (role -> name, None = guess); drop rows with any < 1."""

    if not path.is_file():
        raise ValueError(f"lengths CSV {path} does not exist; check --lengths-csv")
    from chunksim.core.errors import reading

    with reading(path, "lengths CSV"):  # a malformed file: one line naming it
        return _read_named(path, columns)


def _read_named(path: Path, columns: dict[str, str | None]) -> dict[str, np.ndarray]:
    import pandas as pd

    header = list(pd.read_csv(path, nrows=0).columns)
    resolved: dict[str, str] = {}
    for role, col in columns.items():
        if col is None:
            guesses = [p if role == "prompt" else o for p, o in KNOWN_LENGTH_COLUMNS]
            col = next((g for g in guesses if g in header), None)
        if col is None or col not in header:
            raise ValueError(
                f"{path}: {role} column {col!r} not found (columns present: {header}); "
                f"name it with --{role}-column"
            )
        resolved[role] = col
    df = pd.read_csv(path, usecols=list(set(resolved.values())))
    for c in resolved.values():
        if df[c].dtype == bool:
            raise ValueError(f"{path}: column {c!r} holds booleans (True/False), not token "
                             "counts")
    cols = {
        role: pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64)
        for role, c in resolved.items()
    }
    ok = np.logical_and.reduce([np.isfinite(v) & (v >= 1) for v in cols.values()])
    if not ok.any():
        raise ValueError(f"{path}: no row has {list(resolved.values())} all >= 1")
    return {role: (v[ok].astype(np.int64), resolved[role]) for role, v in cols.items()}


def empirical_from_csv(
    path: str | Path,
    column: str | None = None,
    *,
    role: str = "prompt",
    min_tokens: int = 1,
    max_tokens: int = 1 << 20,
) -> Empirical:
    """One column of a lengths CSV as an `Empirical` (role `prompt`/`output` guides the
    column guess when `column` is None; rows with a missing or < 1 value are skipped)."""
    path = Path(path)
    values, col = _read_columns(path, {role: column})[role]
    return Empirical(tuple(values.tolist()), str(path), col, min_tokens, max_tokens)


def empirical_pair_from_csv(
    path: str | Path,
    prompt_column: str | None = None,
    output_column: str | None = None,
    *,
    prompt_bounds: tuple[int, int] = (1, 1 << 20),
    output_bounds: tuple[int, int] = (1, 1 << 20),
) -> tuple[Empirical, Empirical]:
    """Prompt and output columns of the same rows, sampled jointly by the generator."""
    path = Path(path)
    cols = _read_columns(path, {"prompt": prompt_column, "output": output_column})
    (p, pc), (o, oc) = cols["prompt"], cols["output"]
    return (
        Empirical(tuple(p.tolist()), str(path), pc, *prompt_bounds),
        Empirical(tuple(o.tolist()), str(path), oc, *output_bounds),
    )

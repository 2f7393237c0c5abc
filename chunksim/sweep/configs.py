"""Configuration identity for comparisons, capacity searches and sweeps.

A configuration is a policy (family plus optional variant), a chunk size and, for fleet
grids, a fleet layout (`sweep.fleets.FleetSpec`). `whole` ignores the chunk size, so it
appears once per grid, with `chunk=None`. Every table and
figure orders configurations by `Config.sort_key`, never by completion order.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.core.knobs import flag_name
from chunksim.policies import POLICIES, VARIANTS, knob_owners
from chunksim.sweep.fleets import FleetSpec

FAMILIES: tuple[str, ...] = tuple(POLICIES)
"""Policy families in display order (the registry's)."""
DEFAULT_POLICIES = "whole,chunk,budget"
DEFAULT_CHUNKS = "256,512,1024,2048"


@dataclass(frozen=True)
class PolicySpec:
    """A policy family and, optionally, one of its variants (`whole:mixed`)."""

    family: str
    """A `--policy` name (`chunksim.policies.POLICIES`)."""
    variant: str | None = None
    """A variant name from `chunksim.policies.VARIANTS`; None = the family's default."""

    @property
    def label(self) -> str:
        return self.family if self.variant is None else f"{self.family}:{self.variant}"

    @property
    def chunked(self) -> bool:
        """Whether the chunk size is a knob of this policy."""
        return POLICIES[self.family].chunk_knob is not None

    @classmethod
    def parse(cls, text: str, flag: str = "--policies") -> PolicySpec:
        family, _, variant = text.strip().partition(":")
        if family not in FAMILIES:
            raise ValueError(
                f"{flag}: unknown policy {family!r}; use a comma list of {', '.join(FAMILIES)}"
                ", each optionally with :VARIANT (e.g. whole:mixed, chunk:two-pass)")
        if variant and variant not in VARIANTS[family]:
            raise ValueError(
                f"{flag}: {family} has no variant {variant!r}; "
                + (f"choose one of {', '.join(VARIANTS[family])}" if VARIANTS[family]
                   else "it has none"))
        # The default variant is spelled without a suffix so `whole` and
        # `whole:prefill-first` are one configuration, not two.
        if VARIANTS[family] and variant == VARIANTS[family][0]:
            variant = ""
        return cls(family, variant or None)


@dataclass(frozen=True)
class Config:
    """One point of a comparison: a policy with a chunk size (None for `whole`)."""

    policy: PolicySpec
    chunk: int | None = None
    """chunk: prefill tokens per request per step; budget: tokens per step."""
    fleet: FleetSpec | None = None
    """The fleet layout it runs on (None: the run's own flags, one engine by default)."""
    spec_tokens: int | None = None
    """Speculative decoding's draft tokens per step (None: the run's own flags; a grid
    axis of `--num-speculative-tokens 0,2,4`)."""

    @property
    def policy_label(self) -> str:
        """The policy and chunk size, without the fleet: `budget 512`."""
        return self.policy.label if self.chunk is None else f"{self.policy.label} {self.chunk}"

    @property
    def label(self) -> str:
        """`budget 512`, or with a fleet `4x · budget 512`, `P/D 2:2 · budget 512`; on a
        speculative grid axis `budget 512 · spec 2`."""
        label = self.policy_label if self.fleet is None else \
            f"{self.fleet.label} · {self.policy_label}"
        return label if self.spec_tokens is None else f"{label} · spec {self.spec_tokens}"

    @property
    def sort_key(self) -> tuple:
        p = self.policy
        variants = VARIANTS[p.family]
        own = (FAMILIES.index(p.family), variants.index(p.variant) if p.variant else 0,
               self.chunk or 0)
        if self.spec_tokens is not None:
            own = (*own, self.spec_tokens)
        return own if self.fleet is None else (*self.fleet.sort_key, *own)


def parse_policies(text: str, flag: str = "--policies") -> list[PolicySpec]:
    """`whole,chunk:two-pass,budget` -> PolicySpecs, deduplicated, in the given order."""
    out: list[PolicySpec] = []
    for part in _items(text, flag):
        spec = PolicySpec.parse(part, flag)
        if spec not in out:
            out.append(spec)
    return out


def parse_ints(text: str, flag: str, minimum: int = 1, example: str = "256,512") -> list[int]:
    """`256,512` -> [256, 512] (sorted, unique, each >= `minimum`); `example` is what the
    error suggests."""
    values = set()
    for part in _items(text, flag):
        try:
            v = int(part)
        except ValueError:
            raise ValueError(
                f"{flag}: {part!r} is not an integer (e.g. {flag} {example})") from None
        if v < minimum:
            raise ValueError(f"{flag}: {v} must be >= {minimum}")
        values.add(v)
    return sorted(values)


def parse_floats(text: str, flag: str) -> list[float]:
    """`0.5,1,2` -> [0.5, 1.0, 2.0] (sorted, unique, each > 0)."""
    values = set()
    for part in _items(text, flag):
        try:
            v = float(part)
        except ValueError:
            raise ValueError(f"{flag}: {part!r} is not a number (e.g. {flag} 1,2,4)") from None
        if not v > 0 or v == float("inf"):
            raise ValueError(f"{flag}: {v} must be a finite number > 0")
        values.add(v)
    return sorted(values)


def make_configs(policies: list[PolicySpec], chunks: list[int],
                 fleets: list[FleetSpec] | None = None,
                 spec_tokens: list[int] | None = None) -> list[Config]:
    """The grid policies x chunks (x fleets, x draft tokens, when given), `whole` once per
    fleet, sorted by configuration."""
    if not policies:
        raise ValueError("--policies: give at least one policy (e.g. whole,chunk,budget)")
    if not chunks and any(p.chunked for p in policies):
        raise ValueError("--chunks: give at least one chunk size (e.g. 256,512)")
    drafts = [k for k in spec_tokens or [] if k > 0]
    for p in policies:
        if drafts and not POLICIES[p.family].speculative:
            raise ValueError(
                f"--num-speculative-tokens {drafts[0]}: speculative decoding runs under vLLM "
                f"V1's token-budget scheduler only (budget, sjf); --policies {p.label} has no "
                "place for draft tokens: drop it from --policies or give "
                "--num-speculative-tokens 0")
    out = {Config(p, c if p.chunked else None, f, k) for p in policies
           for c in chunks or [None] for f in fleets or [None] for k in spec_tokens or [None]}
    return sorted(out, key=lambda c: c.sort_key)


def parse_spec_tokens(text: str | None, run) -> list[int] | None:
    """`--num-speculative-tokens 0,2,4` of a grid command -> [0, 2, 4] (None: not given),
    each checked against the run's speculative flags now rather than mid-grid."""
    if text is None:
        run.engine.speculative.check_set()
        return None
    ks = parse_ints(text, "--num-speculative-tokens", minimum=0, example="0,2,4")
    for k in ks:
        with_spec_tokens(run, k)
    return ks


def with_spec_tokens(run, k: int):
    """`run` (a RunConfig) with k draft tokens per step."""
    from dataclasses import replace

    engine = run.engine
    return replace(run, engine=replace(engine, speculative=replace(
        engine.speculative, num_speculative_tokens=k)))


def refuse_unused_knobs(policies: list[PolicySpec], knobs) -> None:
    """A policy knob that no policy of the grid has would be silently ignored: refuse it."""
    families = {p.family for p in policies}
    owners = knob_owners()
    for name, _ in knobs:
        if not families & set(owners.get(name, ())):
            flag = flag_name(POLICIES[owners[name][0]], name)
            raise ValueError(
                f"{flag} applies to none of --policies {','.join(p.label for p in policies)} "
                f"(it is a knob of {', '.join(owners[name])}); drop it or add such a policy")


def _items(text: str, flag: str) -> list[str]:
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{flag}: empty list; give comma-separated values")
    return parts

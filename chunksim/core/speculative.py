"""Speculative decoding as vLLM V1 schedules it: the knobs, and the acceptance model.

A running request past its prompt holds draft tokens proposed after its last step (vLLM's
`spec_token_ids`); its next step schedules 1 + drafts new tokens (`num_tokens_with_spec -
num_computed_tokens`), which take token budget and KV slots like any other token. The
target model verifies them in one forward pass: the first `m` drafts are accepted and one
more token is sampled, so the step emits m + 1 tokens, and the rejected drafts give back
their computed-token count (`num_computed_tokens -= num_rejected`, vLLM's
`update_from_output`); their slots are reused by the next step's tokens (the blocks stay
with the request, as in vLLM). EAGLE, MTP and draft models also reserve `k` lookahead
slots in every KV allocation (vLLM's `num_lookahead_tokens`); ngram does not. EAGLE and
MTP prefix-cache hits give up their last matched block (`drops_last_hit_block`).

Acceptance is drawn per request per step from a dedicated seeded stream: `rates[i]` is
the probability that draft position i + 1 is accepted, i.e. that at least i + 1 drafts
are accepted. That is exactly what vLLM reports as its per-position acceptance rate
(accepted at position i / drafts), so its numbers are taken as given.

vLLM's acceptance rate R (`vllm bench serve`'s "Acceptance rate (%)", the logger's "Avg
Draft acceptance rate": accepted / drafted tokens) is converted at k drafts to the
probability `a` that a draft is accepted when the ones before it were, solving
(a + a^2 + ... + a^k) / k = R (`per_draft_probability`): position i is then accepted with
probability a^i, the acceptance rate comes back out as R, and the acceptance length (mean
tokens a verified decode emits, its accepted drafts plus the one token sampled after them)
is 1 + k R.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from chunksim.core.knobs import knob

_S = "Speculative decoding"


class SpecMethod(str, Enum):
    """vLLM's speculative methods (`--speculative-config method`)."""

    NGRAM = "ngram"
    EAGLE = "eagle"
    MTP = "mtp"
    DRAFT_MODEL = "draft-model"


def _fraction(text: str, flag: str, example: str) -> float:
    """`0.44` or `44%` -> 0.44 (a bare number above 1 is refused: 44 is neither)."""
    t = str(text).strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"{flag} {text!r} is not a number; give a fraction or a "
                         f"percentage, e.g. {example}") from None
    if not t.endswith("%") and value > 1.0:
        raise ValueError(f"{flag} {t}: a rate is a fraction in [0, 1] or a percentage "
                         f"with %, e.g. {t}% as vLLM prints it")
    return value


def _rates(text: str) -> tuple[float, ...]:
    """`0.8,0.6,0.4` or `80%,60%,40%` -> (0.8, 0.6, 0.4)."""
    return tuple(_fraction(part, "--spec-acceptance", "0.8,0.6,0.4 or 80%,60%,40%")
                 for part in str(text).replace(" ", ",").split(",") if part)


def _rate(text) -> float | None:
    """`--spec-acceptance-rate 44%` or `0.44` -> 0.44."""
    if text is None or isinstance(text, float | int):
        return text
    return _fraction(text, "--spec-acceptance-rate", "44% or 0.44")


def per_draft_probability(rate: float, k: int) -> float:
    """The probability a that a draft is accepted when the ones before it were, such that
    vLLM's acceptance rate (accepted / drafted tokens) at k drafts per decode is `rate`:
    (a + a^2 + ... + a^k) / k = rate. The left side rises from 0 to 1 with a, so the root
    is found by bisection (to 1e-15)."""
    if k <= 1 or rate <= 0.0 or rate >= 1.0:
        return min(max(rate, 0.0), 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        if sum(a ** i for i in range(1, k + 1)) / k < rate:
            lo = a
        else:
            hi = a
    return (lo + hi) / 2


def _method(value: str | None) -> str | None:
    if value is None:
        return None
    names = [m.value for m in SpecMethod]
    v = str(getattr(value, "value", value)).lower().replace("_", "-")
    if v == "draft":
        v = "draft-model"
    if v not in names:
        raise ValueError(f"--speculative-method {value!r} is unknown; choose one of "
                         f"{', '.join(names)}")
    return v


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding (off unless --num-speculative-tokens >= 1)."""

    speculative_method: str | None = knob(None, "--speculative-method", panel=_S,
                                          parse=_method)
    """How drafts are proposed (vLLM's speculative_config method): ngram (prompt lookup, no
    GPU cost), eagle or mtp (a small head on the target's hidden states, one pass per draft
    position), draft-model (a second model, priced by --draft-profile)."""
    num_speculative_tokens: int | None = knob(None, "--num-speculative-tokens", panel=_S)
    """Draft tokens k proposed per request per step (default: as many as --spec-acceptance
    gives rates, else 0 = off). Each decode then schedules 1 + k tokens against the token
    budget and KV. `sim compare` / `sim capacity` take a comma list (a grid axis)."""
    spec_acceptance_rate: float | None = knob(None, "--spec-acceptance-rate", panel=_S,
                                              cli_type=str, parse=_rate)
    """vLLM's acceptance rate R at these k drafts: accepted / drafted tokens, as `vllm bench
    serve` prints it ("Acceptance rate (%)": give 44%, or 0.44). Converted to a per-draft
    probability a with (a + a^2 + ... + a^k) / k = R (position i accepted with probability
    a^i), so the run's acceptance rate is R and its acceptance length 1 + k R. With a grid
    of k, give --spec-acceptance instead (a rate R holds at one k only)."""
    spec_acceptance: tuple[float, ...] = knob(
        (), "--spec-acceptance", panel=_S, cli_type=str, parse=_rates)
    """vLLM's per-position acceptance rates (accepted at position i / drafts, "Per-position
    acceptance (%)"), comma-separated fractions or percentages, non-increasing, taken as
    given; instead of --spec-acceptance-rate. --num-speculative-tokens defaults to their
    count."""
    draft_profile: str | None = knob(None, "--draft-profile", panel=_S)
    """Latency profile of the draft model (draft-model only): a bundled name or a CSV."""
    draft_head_layers: float | None = knob(None, "--draft-head-layers", panel=_S)
    """Cost of one eagle/mtp head pass, in target decoder layers over the same batch
    (default 1: EAGLE and DeepSeek's MTP module are one decoder layer each)."""

    def __post_init__(self) -> None:
        rates = self.spec_acceptance
        k = self.num_speculative_tokens
        if k is None and rates and self.speculative_method is not None:
            k = len(rates)  # unset: one draft per rate given
            object.__setattr__(self, "num_speculative_tokens", k)
        if k is not None and k < 0:
            raise ValueError(f"--num-speculative-tokens {k}: must be >= 0 (0 turns "
                             "speculative decoding off)")
        a = _rate(self.spec_acceptance_rate)  # (as the flag takes it: 44% or 0.44)
        object.__setattr__(self, "spec_acceptance_rate", a)
        if a is not None and not 0.0 <= a <= 1.0:
            raise ValueError(f"--spec-acceptance-rate {a}: an acceptance rate must be in "
                             "[0, 1] (or 0% to 100%)")
        for i, r in enumerate(rates):
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"--spec-acceptance position {i + 1} is {r}: each rate "
                                 "must be in [0, 1]")
            if i and r > rates[i - 1]:
                raise ValueError(
                    f"--spec-acceptance {','.join(f'{x:g}' for x in rates)}: position "
                    f"{i + 1} ({r:g}) exceeds position {i} ({rates[i - 1]:g}); a draft is "
                    "accepted only after the ones before it, so vLLM's per-position rates "
                    "never increase")
        object.__setattr__(self, "speculative_method", _method(self.speculative_method))
        if self.draft_head_layers is not None:
            if self.draft_head_layers < 0:
                raise ValueError(f"--draft-head-layers {self.draft_head_layers}: must be >= 0")
            if self.speculative_method not in ("eagle", "mtp"):
                raise ValueError("--draft-head-layers prices an eagle or mtp head; it needs "
                                 "--speculative-method eagle or mtp")
        if self.draft_profile is not None and self.speculative_method != "draft-model":
            raise ValueError("--draft-profile prices a draft model; it needs "
                             "--speculative-method draft-model")
        if self.speculative_method is None and (a is not None or rates):
            raise ValueError("--spec-acceptance-rate / --spec-acceptance describe drafts; "
                             "they need --speculative-method and --num-speculative-tokens")
        if not k:
            # off (a grid's k = 0 point keeps the method and acceptance it shares; unset,
            # a grid sets it per configuration, and `check_set` refuses it left so)
            return
        if self.speculative_method is None:
            raise ValueError(f"--num-speculative-tokens {k} needs --speculative-method "
                             "(ngram, eagle, mtp or draft-model)")
        if a is not None and rates:
            raise ValueError("--spec-acceptance-rate and --spec-acceptance both set the "
                             "acceptance; give one")
        if a is None and not rates:
            raise ValueError(f"--num-speculative-tokens {k} needs the acceptance: give "
                             "--spec-acceptance-rate A (mean) or --spec-acceptance "
                             "R1,R2,... (vLLM's per-position rates)")
        if rates and k > len(rates):
            raise ValueError(f"--num-speculative-tokens {k} but --spec-acceptance has "
                             f"{len(rates)} positions; give a rate for each draft position")
        if self.speculative_method == "draft-model" and self.draft_profile is None:
            raise ValueError("--speculative-method draft-model needs --draft-profile (the "
                             "draft model's latency profile)")

    @property
    def head_layers(self) -> float:
        """An eagle/mtp head pass in target layers (--draft-head-layers, default 1)."""
        return 1.0 if self.draft_head_layers is None else self.draft_head_layers

    @property
    def enabled(self) -> bool:
        return bool(self.num_speculative_tokens)

    def check_set(self) -> None:
        """Refuse a method left without its draft count (the flag would do nothing)."""
        if self.speculative_method is not None and self.num_speculative_tokens is None:
            raise ValueError(f"--speculative-method {self.speculative_method} needs "
                             "--num-speculative-tokens K (or --spec-acceptance with one rate "
                             "per draft)")

    @property
    def lookahead_tokens(self) -> int:
        """KV slots reserved beyond a decode's scheduled tokens (vLLM's
        `num_lookahead_tokens`: k for eagle, mtp and draft models, 0 for ngram)."""
        if not self.enabled or self.speculative_method == "ngram":
            return 0
        return self.num_speculative_tokens

    @property
    def per_draft_probability(self) -> float | None:
        """a: a draft's acceptance given the ones before it were, converted from vLLM's
        acceptance rate (`per_draft_probability`); None when per-position rates are given."""
        if self.spec_acceptance or self.spec_acceptance_rate is None:
            return None
        return per_draft_probability(self.spec_acceptance_rate, self.num_speculative_tokens)

    @property
    def drops_last_hit_block(self) -> bool:
        """A prefix-cache hit gives up its last matched block (vLLM's `use_eagle()`:
        eagle and mtp; the drafter needs the KV right before the generation point
        recomputed)."""
        return self.enabled and self.speculative_method in ("eagle", "mtp")

    @property
    def position_rates(self) -> tuple[float, ...]:
        """P(draft position i is accepted) for i = 1..k (= P(at least i accepted))."""
        k = self.num_speculative_tokens
        if self.spec_acceptance:
            return tuple(self.spec_acceptance[:k])
        a = self.per_draft_probability or 0.0
        return tuple(a ** i for i in range(1, k + 1))

    @property
    def mean_tokens_per_step(self) -> float:
        """vLLM's acceptance length expected of a decode verifying k drafts: 1 + the sum of
        the position rates (= 1 + k R for an acceptance rate R)."""
        return 1.0 + sum(self.position_rates)

    def params(self) -> dict:
        """What the summary echoes."""
        return {"method": self.speculative_method,
                "num_speculative_tokens": self.num_speculative_tokens,
                "acceptance_rate": self.spec_acceptance_rate,
                "per_draft_probability": self.per_draft_probability,
                "position_rates": list(self.position_rates),
                "lookahead_tokens": self.lookahead_tokens,
                "draft_profile": self.draft_profile,
                "draft_head_layers": (self.head_layers
                                      if self.speculative_method in ("eagle", "mtp")
                                      else None)}


class Acceptance:
    """Draws how many of a decode's drafts the target accepts, from a seeded stream of its
    own (so a run without drafts draws nothing and stays what it was).

    One uniform u per verified decode; the count accepted out of d scheduled drafts is the
    number of positions i <= d with u < rates[i-1] (the rates never increase, so this is
    P(count >= i) = rates[i-1], exactly)."""

    _BLOCK = 4096

    def __init__(self, rates: tuple[float, ...], seed) -> None:
        self.rates = np.asarray(rates, dtype=np.float64)
        self.rng = np.random.default_rng(seed)
        self.buf = np.empty(0)
        self.i = 0
        self.drafts = 0
        """Verified decodes so far (vLLM's num_drafts)."""
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.per_position = np.zeros(len(rates), dtype=np.int64)
        """Accepted drafts at each position."""

    def draw(self, drafts: int) -> int:
        """Accepted drafts of a decode that verifies `drafts` of them; counts it."""
        if self.i >= len(self.buf):
            self.buf = self.rng.random(self._BLOCK)
            self.i = 0
        u = self.buf[self.i]
        self.i += 1
        m = 0
        rates = self.rates
        while m < drafts and u < rates[m]:
            m += 1
        self.drafts += 1
        self.draft_tokens += drafts
        self.accepted_tokens += m
        if m:
            self.per_position[:m] += 1
        return m

    def summary(self) -> dict:
        """vLLM's spec-decode metrics (`spec_summary`) of the decodes verified so far."""
        return spec_summary(self.drafts, self.draft_tokens, self.accepted_tokens,
                            self.per_position.tolist())


def spec_summary(drafts: int, draft_tokens: int, accepted_tokens: int,
                 per_position: list[int]) -> dict:
    """vLLM's spec-decode metrics from the counts: mean acceptance length (tokens per
    verified decode, the token sampled after the accepted drafts included), acceptance
    rate (accepted / drafted tokens) and the per-position acceptance rates achieved
    (accepted at position i / verified decodes)."""
    n = drafts
    return {
        "spec_drafts": n,
        "spec_draft_tokens": draft_tokens,
        "spec_accepted_tokens": accepted_tokens,
        "spec_accepted_per_position": list(per_position),
        "spec_mean_acceptance_length": 1.0 + accepted_tokens / n if n else None,
        "spec_acceptance_rate": accepted_tokens / draft_tokens if draft_tokens else None,
        "spec_position_acceptance": [c / n for c in per_position] if n else [],
    }


def merge_spec(metas: list[dict]) -> dict:
    """The spec-decode metrics of several engines (a fleet) from their own; {} when none
    speculated."""
    parts = [m for m in metas if "spec_drafts" in m]
    if not parts:
        return {}
    width = max(len(m["spec_accepted_per_position"]) for m in parts)
    per = [sum(m["spec_accepted_per_position"][i] for m in parts
               if i < len(m["spec_accepted_per_position"])) for i in range(width)]
    return spec_summary(sum(m["spec_drafts"] for m in parts),
                        sum(m["spec_draft_tokens"] for m in parts),
                        sum(m["spec_accepted_tokens"] for m in parts), per)

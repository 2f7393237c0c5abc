"""What proposing draft tokens costs after a step (speculative decoding). Pure.

The target's side needs nothing here: a decode verifying d drafts is one query of d + 1
tokens over its context, which the engine hands the latency model as d + 1 decode rows at
contexts c, c + 1, ..., c + d. The linear layers, the all-reduce and the LM head then see
the right token count (the target samples at every position); attention reads each row's
context apart, where a real kernel reads the sequence's KV once for the whole query, so
the verify attention is priced as an upper bound (exact for d = 0). That holds for both
profile kinds: a whole-step table has no finer handle on a short query over a long
context than its decode rows.

The drafter runs after the step, for every request that sampled (its decodes and the
prompts that finished), before the next step can start:

- ngram: proposals come from a lookup in the request's own tokens on the host; no GPU
  time is priced.
- eagle / mtp: k sequential passes of a head of `--draft-head-layers` decoder layers
  (EAGLE and DeepSeek's MTP module are one layer each), each priced as that many layers'
  share of the target's decode step over the same requests and contexts.
- draft-model: k sequential decode passes of the draft model's own profile over the same
  requests and contexts, plus its pass over the step's prefill chunks (the draft model
  keeps its own KV of every prompt).

Memory is not priced: the head's or draft model's weights and KV are not taken from the
default KV capacity (vLLM sizes its cache after loading both); give --kv-blocks for what
is left.
"""

from __future__ import annotations

from chunksim.core.shape import BatchShape, StepShape
from chunksim.core.speculative import SpecConfig
from chunksim.latency.base import StepCosts


class Drafter:
    """Seconds the drafter adds to a step, from the target's (or the draft model's)
    latency model."""

    def __init__(self, spec: SpecConfig, target: StepCosts, target_layers: int | None = None,
                 draft: StepCosts | None = None, warning: str | None = None) -> None:
        self.warning = warning
        """Said in the run's summary (a draft model of another tokenizer family)."""
        self.method = spec.speculative_method
        self.k = spec.num_speculative_tokens
        self.target = target
        self.draft = draft
        self.share = 0.0
        if self.method in ("eagle", "mtp"):
            if not target_layers:
                raise ValueError(
                    f"--speculative-method {self.method} prices its head as a share of one "
                    "target layer, and the profile records no model.n_layers; use a profile "
                    "that does")
            self.share = spec.head_layers / float(target_layers)
        if self.method == "draft-model" and draft is None:
            raise ValueError("--speculative-method draft-model needs --draft-profile")

    def draft_s(self, shape: StepShape, drafting: int) -> float:
        """Time to propose k drafts for `drafting` requests after a step of `shape`."""
        if not drafting or self.method == "ngram" or not self.k:
            return 0.0
        if shape.decodes:
            kv = shape.decode_kv_tokens
        else:  # only prompts sampled: their contexts are their whole prompts
            chunks = shape.chunks or ((shape.prefill_tokens, shape.prior_tokens),)
            kv = sum(c + n for n, c in chunks) / len(chunks)
        dec = BatchShape(decode_count=drafting, decode_kv_tokens=float(kv))
        if self.draft is None:  # eagle / mtp: a head over the target's hidden states
            return self.k * self.share * self.target.step_s(dec)[0]
        t = self.k * self.draft.step_s(dec)[0]
        if shape.prefill_tokens:
            t += self.draft.step_s(BatchShape(shape.prefill_tokens, shape.prior_tokens, 0, 0.0,
                                              shape.chunks))[0]
        return t


def model_layers(provenance: dict) -> int | None:
    """The profiled model's decoder layer count, None when the provenance lacks it."""
    comp = provenance.get("components") or {}
    model = provenance.get("model") or {}
    n = comp.get("layers", model.get("n_layers") if isinstance(model, dict) else None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def tokenizer_mismatch(target: dict, draft: dict) -> str | None:
    """A warning when the draft profile's model cannot share the target's tokenizer (its
    vocabulary size differs), None when it can or the profiles do not say."""
    t, d = target.get("model") or {}, draft.get("model") or {}
    tv, dv = t.get("vocab_size"), d.get("vocab_size")
    if tv is None or dv is None or tv == dv:
        return None
    return (f"draft profile model {d.get('name', '?')!r} has vocab_size {dv}, the target "
            f"{t.get('name', '?')!r} has {tv}: a draft model must share the target's "
            "tokenizer (another family's drafts would all be rejected)")

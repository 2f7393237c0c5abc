"""Request state as counters, not phases (vLLM V1's `num_computed_tokens` chases `num_tokens`).

A step gives a request `n` new tokens: `num_computed_tokens += n`. If that covers its last
uncomputed token the step samples one output token (`num_output_tokens += 1`, so
`num_tokens` grows by one). Hence the step holding the last prompt chunk emits the first
token, a non-final chunk emits nothing, each decode emits one, and the last output token's
KV is never computed. Preemption by recompute sets `num_computed_tokens = 0`; the request
then re-prefills prompt + generated tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.core.spec import RequestSpec


@dataclass(slots=True, eq=False)
class Request:
    """Mutable per-request scheduling state. Only the engine mutates it."""

    spec: RequestSpec
    """The immutable request as the workload defines it."""
    num_computed_tokens: int = 0
    """Tokens whose KV is in the cache (reset to 0 on preemption)."""
    num_output_tokens: int = 0
    """Output tokens sampled so far (kept across preemptions)."""
    num_blocks: int = 0
    """KV blocks held."""
    num_cached_tokens: int = 0
    """Tokens of this round served by the prefix cache (counted in num_computed_tokens)."""
    num_preemptions: int = 0
    """Times this request was preempted (recompute)."""
    first_scheduled_s: float = -1.0
    """Start of the first step that scheduled it, seconds (-1 = never)."""
    first_token_s: float = -1.0
    """End of the step that emitted its first output token, seconds."""
    last_token_s: float = -1.0
    """End of the step that emitted its latest output token, seconds."""
    max_itl_s: float = 0.0
    """Largest gap between two of its consecutive output tokens, seconds."""
    class_idx: int = 0
    """Index of its request class in the engine's sorted class list (for per-class ITL)."""
    kv_carried: bool = False
    """It arrived with its prompt's KV, all but the last token's, from a prefill instance
    (P/D): its first admission computes none of it, and its first step is a decode that
    computes the last prompt token and samples the first output token."""
    block_keys: tuple | None = None
    """Prefix-cache identities of its shareable prompt blocks (set by the cache on first use)."""
    num_spec_tokens: int = 0
    """Draft tokens proposed after its last step, to be verified by its next one (vLLM's
    `len(spec_token_ids)`; 0 without speculative decoding). A decode schedules 1 + these."""

    @property
    def request_id(self) -> int:
        return self.spec.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return self.spec.prompt_tokens

    @property
    def max_output_tokens(self) -> int:
        return self.spec.output_tokens

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what `num_computed_tokens` chases."""
        return self.spec.prompt_tokens + self.num_output_tokens

    @property
    def num_remaining(self) -> int:
        """Tokens still to compute before the next token can be sampled (1 for a decode)."""
        return self.spec.prompt_tokens + self.num_output_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.num_output_tokens >= self.spec.output_tokens


def is_decode(req: Request, admitted_now: bool = False) -> bool:
    """The decode rule (the one definition; `Plan.is_decode` applies it to a plan's
    entries): a request decodes when it has sampled a token and every token before the last
    sampled one is computed, so its step computes that token and samples the next (with
    speculative decoding, verifying its drafts in the same query), and it ran before this
    step. A prompt's 1-token tail is prompt work until its first token is out. A request
    admitted by this step runs a prompt (vLLM V0 runs a resumed request as one, and the
    prefill-only steps of `whole prefill-first` and `chunk alternate` take it as one), unless
    it arrived with KV carried from a P/D prefill instance and was never preempted: its
    one-token query over that KV is a decode row (vLLM's attention runs it as one).

    The simulator's hot loops inline it (`EngineCore.begin_step` and `take_slots`,
    `fast_forward.BulkDecoder.steady`, the budget and chunk policies' running loops);
    tests/test_decode_rule.py binds each of those copies to it."""
    if admitted_now:
        return req.kv_carried and not req.num_preemptions
    return req.num_output_tokens > 0 and (
        req.spec.prompt_tokens + req.num_output_tokens - req.num_computed_tokens == 1)

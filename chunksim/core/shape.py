"""A step's composition: what the latency model prices and the step records hold."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What the latency model needs to know about one forward pass.

    The first four fields are what a whole-step profile prices. The last three are the
    detail a component profile prices (`chunksim.latency.composed`); their defaults
    describe the whole-step table's own points: one chunk, equal decode contexts, logits for
    every decode and for the chunk."""

    prefill_tokens: int = 0
    """Prefill tokens over all chunks of the step."""
    prior_tokens: float = 0.0
    """Effective prior context of the prefill part (see `chunksim.latency.model`), tokens."""
    decode_count: int = 0
    """Requests decoding one token."""
    decode_kv_tokens: float = 0.0
    """Mean context (tokens already in KV) of the decodes."""
    chunks: tuple[tuple[int, int], ...] = ()
    """Each prefill chunk's (length, prior context) in tokens; () = one chunk of
    `prefill_tokens` after `prior_tokens`."""
    decode_kv_max: float = 0.0
    """Longest decode context, tokens; 0 = every decode at the mean."""
    logits: int = -1
    """Sequences needing logits (LM head rows); -1 = every decode and every chunk."""


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step's composition, as the latency model and the step records see it."""

    prefill_tokens: int
    prefill_requests: int
    prior_tokens: float
    decodes: int
    decode_kv_tokens: float
    two_pass: bool
    chunks: tuple[tuple[int, int], ...] = ()
    """Each prefill chunk's (length, prior context)."""
    decode_kv_max: int = 0
    """Longest decode context, tokens."""
    prefill_logits: int = -1
    """Prefill chunks that finish their prompt (sample a token); -1 = all of them."""
    running: int = 0
    """Requests running in the step (after admission and preemption); for the records."""
    waiting: int = 0
    """Requests left waiting when the step starts; for the records."""
    kv_blocks_used: int = 0
    """KV blocks in use during the step (its slots allocated); for the records."""

    def batch_shapes(self) -> tuple[BatchShape, ...]:
        """The forward pass(es) this step runs: two when a two-pass step has both parts."""
        pl = self.prefill_logits
        if self.two_pass and self.prefill_tokens and self.decodes:
            return (BatchShape(self.prefill_tokens, self.prior_tokens, 0, 0.0, self.chunks,
                               0.0, pl),
                    BatchShape(0, 0.0, self.decodes, self.decode_kv_tokens, (),
                               self.decode_kv_max, self.decodes))
        return (BatchShape(self.prefill_tokens, self.prior_tokens, self.decodes,
                           self.decode_kv_tokens, self.chunks, self.decode_kv_max,
                           -1 if pl < 0 else pl + self.decodes),)

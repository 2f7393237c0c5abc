"""A step's composition: what the latency model prices and the step records hold."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What the latency model needs to know about one forward pass."""

    prefill_tokens: int = 0
    """Prefill tokens over all chunks of the step."""
    prior_tokens: float = 0.0
    """Effective prior context of the prefill part (see `chunksim.latency.model`), tokens."""
    decode_count: int = 0
    """Requests decoding one token."""
    decode_kv_tokens: float = 0.0
    """Mean context (tokens already in KV) of the decodes."""


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step's composition, as the latency model and the step records see it."""

    prefill_tokens: int
    prefill_requests: int
    prior_tokens: float
    decodes: int
    decode_kv_tokens: float
    two_pass: bool

    def batch_shapes(self) -> tuple[BatchShape, ...]:
        """The forward pass(es) this step runs: two when a two-pass step has both parts."""
        if self.two_pass and self.prefill_tokens and self.decodes:
            return (BatchShape(self.prefill_tokens, self.prior_tokens, 0, 0.0),
                    BatchShape(0, 0.0, self.decodes, self.decode_kv_tokens))
        return (BatchShape(self.prefill_tokens, self.prior_tokens, self.decodes,
                           self.decode_kv_tokens),)

"""Token ids of every request: a seeded random prompt, then the greedily sampled outputs.

Latency does not depend on token values, but a real serving loop feeds real ids: each
decode's input is the token the previous step sampled, and a recompute after preemption
re-feeds prompt + generated ids, so the book keeps both.
"""

from __future__ import annotations

import numpy as np

from chunksim.core.spec import Workload


class TokenBook:
    """Per-request id buffers of `prompt + output` slots, filled as tokens are sampled."""

    def __init__(self, workload: Workload, vocab_size: int, seed: int = 0) -> None:
        self.ids: list[np.ndarray] = []
        self.filled: list[int] = []
        for spec in workload.requests:
            rng = np.random.default_rng((seed, spec.request_id))
            buf = np.zeros(spec.prompt_tokens + spec.output_tokens, dtype=np.int64)
            buf[: spec.prompt_tokens] = rng.integers(0, vocab_size, spec.prompt_tokens)
            self.ids.append(buf)
            self.filled.append(spec.prompt_tokens)

    def inputs(self, request_id: int, start: int, count: int) -> np.ndarray:
        """Ids at positions `start .. start + count - 1` (all must be known already)."""
        end = start + count
        if end > self.filled[request_id]:
            raise RuntimeError(
                f"request {request_id}: step wants input ids up to position {end - 1}, only "
                f"{self.filled[request_id]} are known (a token-accounting bug)")
        return self.ids[request_id][start:end]

    def append(self, request_id: int, token_id: int) -> int:
        """Store a sampled token; returns its position in the sequence."""
        pos = self.filled[request_id]
        self.ids[request_id][pos] = token_id
        self.filled[request_id] = pos + 1
        return pos

    def outputs(self, request_id: int, prompt_tokens: int) -> np.ndarray:
        """The sampled ids of a request so far."""
        return self.ids[request_id][prompt_tokens : self.filled[request_id]]

"""A trace as read from disk, before ordering, windowing and rescaling."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True, eq=False)
class RawTrace:
    """Column arrays of one trace file, one entry per kept row, in file order."""

    path: str
    """The file read."""
    format: str
    """Layout it was read as (`azure`, `mooncake`, `burstgpt`, `generic`)."""
    time_s: np.ndarray
    """Arrival times in seconds on the file's own clock (any origin)."""
    prompt_tokens: np.ndarray
    """Prompt lengths, tokens (>= 1)."""
    output_tokens: np.ndarray
    """Output lengths, tokens (>= 1)."""
    line: np.ndarray
    """1-based line of each row in the file, for messages."""
    prefix_hashes: list[tuple[int, ...]] | None = None
    """Prefix block hashes per row (Mooncake), else None."""
    request_class: list[str] | None = None
    """Traffic class per row, else None."""
    priority: np.ndarray | None = None
    """Priority per row, else None."""
    conversation_id: list[str | None] | None = None
    """Conversation (session) id per row, else None."""
    prefix_block_tokens: int = 0
    """Tokens per hash block (Mooncake: 512)."""
    notes: tuple[str, ...] = field(default=())
    """What the reader did that a user must know (dropped rows with counts, ...)."""
    rows_read: int = 0
    """Data rows in the file, before any row was dropped."""

    def __len__(self) -> int:
        return len(self.time_s)

    def take(self, idx: np.ndarray) -> RawTrace:
        """The rows at `idx`, in that order."""
        idx_l = idx.tolist()
        return replace(
            self,
            time_s=self.time_s[idx],
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            line=self.line[idx],
            prefix_hashes=[self.prefix_hashes[i] for i in idx_l]
            if self.prefix_hashes is not None
            else None,
            request_class=[self.request_class[i] for i in idx_l]
            if self.request_class is not None
            else None,
            priority=self.priority[idx] if self.priority is not None else None,
            conversation_id=[self.conversation_id[i] for i in idx_l]
            if self.conversation_id is not None
            else None,
        )

    def with_notes(self, *notes: str) -> RawTrace:
        return replace(self, notes=self.notes + tuple(notes))

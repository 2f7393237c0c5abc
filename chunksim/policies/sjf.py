"""Shortest job first: the token budget of vLLM V1, with the waiting queue ordered on the
tokens a request still has to compute before its next token (shortest first, then
arrival) instead of arrival.

Not a vLLM policy: the classic remedy for head-of-line blocking by long prompts (as in
FastServe's skip-join MLFQ and the SJF baselines of the scheduling literature), here to
show a queue discipline other than FCFS and priority. Short prompts overtake a queued
long one, so the long prompt's TTFT is what pays; preemption evicts the most recently
admitted request, as `budget` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chunksim.core.queues import SJF, QueueDiscipline
from chunksim.policies.budget import TokenBudgetPolicy


@dataclass(frozen=True)
class ShortestJobFirstPolicy(TokenBudgetPolicy):
    """Token budget, shortest remaining prompt first in the waiting queue."""

    name: ClassVar[str] = "sjf"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.priority_scheduling:
            raise ValueError("--priority does not apply to --policy sjf: its waiting queue "
                             "is ordered by remaining prompt; drop --priority")

    @property
    def queue(self) -> QueueDiscipline:  # type: ignore[override]
        return SJF

"""Queue disciplines: the order of the waiting queue and who is preempted first.

A policy names its discipline (`Policy.queue`); the engine keeps the waiting queue in that
order and a policy's preemption picks `queue.victim`. One object holds both rules, so the
sort key is written once.

- FCFS (vLLM V1's default): arrivals join the back, a preempted request goes to the front
  (V1 prepends it); the victim is the most recently admitted running request.
- Priority (vLLM's `--scheduling-policy priority`): the waiting queue is ordered on
  (priority, arrival); the victim is the running request with the largest (priority,
  arrival), i.e. the least urgent, latest arrival.
- SJF: the waiting queue is ordered on the tokens a request still has to compute before
  its next token (shortest first, then arrival); victims as FCFS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chunksim.core.request import Request


@dataclass(frozen=True)
class QueueDiscipline:
    """Waiting order and preemption victim."""

    name: str
    """As reported in the summary's `waiting_order`."""
    key: Callable[[Request], tuple] | None = None
    """Sort key of the waiting queue (smallest first); None = FIFO, preempted to the front."""
    victim_key: Callable[[Request], tuple] | None = None
    """The running request with the largest key is preempted first; None = the most
    recently admitted."""

    def victim_index(self, running: Sequence[Request]) -> int:
        """Index in `running` (admission order) of the request to preempt next."""
        if self.victim_key is None:
            return len(running) - 1
        key = self.victim_key
        return max(range(len(running)), key=lambda i: key(running[i]))


def _priority_key(req: Request) -> tuple:
    return (req.spec.priority, req.spec.arrival_s, req.spec.request_id)


def _remaining_key(req: Request) -> tuple:
    return (req.num_remaining, req.spec.arrival_s, req.spec.request_id)


FCFS = QueueDiscipline("fcfs")
PRIORITY = QueueDiscipline("priority", key=_priority_key, victim_key=_priority_key)
SJF = QueueDiscipline("sjf", key=_remaining_key)

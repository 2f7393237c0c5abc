"""Which capacity searches start from another's answer (`search.RateSearch.aim`).

Configurations that differ only in policy and chunk size (the same fleet layout and draft
tokens) form a group. In each group the first search in configuration order *leads*: it
runs from the search's start. The others wait until it ends and start from its capacity,
where their own usually lies, so each ends in a few probes instead of a full bracket and
bisection. A lead that finds no capacity (nothing met, or the SLOs held up to the maximum
rate) hands the lead to the next waiting search, which then runs from the start.

Which search leads and what hint a search gets depend on the configurations and the
probes' verdicts only, never on which job finished first, so the probes (and the report)
are the same whatever the number of workers.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from chunksim.sweep.configs import Config
from chunksim.sweep.search import RateSearch


def group_key(config: Config) -> Hashable:
    """What a configuration shares with those whose capacity it may start from."""
    return config.fleet, config.spec_tokens


class Leads:
    """The order in which searches may start; `share=False` starts them all at once."""

    def __init__(self, configs: Sequence[Config], searches: Sequence[RateSearch],
                 share: bool = True) -> None:
        self.searches = searches
        self.waiting: dict[Hashable, list[int]] = {}
        self.first: list[int] = []
        for i, c in enumerate(configs):
            key = group_key(c) if share else i
            if key in self.waiting:
                self.waiting[key].append(i)
            else:
                self.waiting[key] = []
                self.first.append(i)
        self.key = {i: (group_key(c) if share else i) for i, c in enumerate(configs)}
        self.source: dict[int, int] = {}
        """Search -> the lead whose capacity it started from."""

    def start(self) -> list[int]:
        """The searches that run from the start: one per group."""
        return list(self.first)

    def finished(self, i: int) -> list[int]:
        """Search `i` has ended: the searches it releases. A lead with a capacity below
        the maximum rate releases every waiting search of its group, aimed at that
        capacity; one without hands the lead on to the next. Others release nothing."""
        waiting = self.waiting[self.key[i]]
        if not waiting or i in waiting:
            return []
        s = self.searches[i]
        if s.capacity > 0 and not s.capped:
            released = list(waiting)
            waiting.clear()
            for j in released:
                self.searches[j].aim(s.capacity)
                self.source[j] = i
            return released
        return [waiting.pop(0)]

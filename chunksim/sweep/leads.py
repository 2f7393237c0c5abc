"""Which capacity searches start from another's answer (`search.RateSearch.aim`).

Configurations that differ only in policy and chunk size (the same fleet layout and draft
tokens) form a group. In each group the first search in configuration order *leads*: it
runs from the search's start. The others wait for its capacity and start there,
where their own usually lies, so each ends in a few probes instead of a full bracket and
bisection. They start once the lead's bisection has converged, while it checks the rates
above its bracket. A lead that finds no capacity (nothing met, or the SLOs held up to the
maximum rate) hands the lead to the next waiting search, which then runs from the start.
A search whose first probe would fail on rejections alone (requests too long for its
policy, KV cache or --max-model-len on some seed, `sim.build.static_rejections`) would
lead to nothing: it runs alone from the start, beside the lead, and the next one leads.

Which search leads and what hint a search gets depend on the configurations, the
requests' lengths and the probes' verdicts only, never on which job finished first, so
the probes (and the report) are the same whatever the number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from chunksim.sweep.configs import Config
from chunksim.sweep.search import RateSearch


def group_key(config: Config) -> Hashable:
    """What a configuration shares with those whose capacity it may start from."""
    return config.fleet, config.spec_tokens


class Leads:
    """The order in which searches may start; `share=False` starts them all at once."""

    def __init__(self, configs: Sequence[Config], searches: Sequence[RateSearch],
                 share: bool = True, fails_at_start: Callable[[int], bool] | None = None
                 ) -> None:
        """`fails_at_start(i)`: search i's first probe fails whatever its latencies (it
        rejects too many requests on their lengths alone): asked, in configuration order,
        of each search before its group has a lead; such a search runs alone from the
        start, beside the others, and does not lead."""
        self.searches = searches
        self.waiting: dict[Hashable, list[int]] = {}
        self.lead: dict[Hashable, int] = {}  # group -> its lead now
        self.first: list[int] = []
        self.key: dict[int, Hashable] = {}
        for i, c in enumerate(configs):
            key = group_key(c) if share else i
            if key not in self.waiting and fails_at_start is not None and share and \
                    fails_at_start(i):
                key = ("alone", i)
            self.key[i] = key
            if key in self.waiting:
                self.waiting[key].append(i)
            else:
                self.waiting[key] = []
                self.lead[key] = i
                self.first.append(i)
        self.source: dict[int, int] = {}
        """Search -> the lead whose capacity it started from."""

    def start(self) -> list[int]:
        """The searches that run from the start: one per group."""
        return list(self.first)

    def release(self, i: int) -> list[int]:
        """Search `i` has judged a probe, or ended: the searches it releases. A lead whose
        bisection has converged (`RateSearch.converged`, before its checks above) on a
        capacity releases every waiting search of its group, aimed at that capacity; one
        that ended without a capacity below the maximum rate hands the lead on to the
        next. Others, and a lead still searching, release nothing."""
        key = self.key[i]
        waiting = self.waiting[key]
        if not waiting or self.lead[key] != i:
            return []
        s = self.searches[i]
        if s.capacity > 0 and (s.converged or s.done and not s.capped):
            released = list(waiting)
            waiting.clear()
            for j in released:
                self.searches[j].aim(s.capacity)
                self.source[j] = i
            return released
        if not s.done:
            return []
        self.lead[key] = waiting.pop(0)
        return [self.lead[key]]

"""Many engines in one SimPy environment behind a router.

Each replica is a full `Engine` (its own KV cache, policy instance, step records) fed
through a `ReplicaInbox`. The fleet walks the workload in arrival order with two cursors:
a request is *decided* (its replica chosen) at its read time, and *delivered* (queued at
that replica) at its arrival. A router that reads replica state decides at arrival minus
`--router-staleness-ms` (so it sees state that old, as a router scraping metrics does);
one that reads none decides every request up front, which changes nothing (its choices
depend on the request stream alone) but lets each replica know its own next arrival.

Bulk decode stays exact. A router that reads only request and token counts (least-requests,
least-tokens: `Router.reads_mid_stretch`) reads them mid-stretch: each replica applies its
bulk decode one segment at a time, at the segment's end (a segment's steps and the tokens
each computes are known in closed form, so a read subtracts the steps done by then:
`Engine.decoded_by`), and only the replica a request is delivered to cuts its segment,
after the step in flight; a step that would end exactly at a read is stepped (who comes
first there is SimPy's event order). Any other router (prefix, which reads the prefix
cache, and any new one unless it opts in) ends every replica's stretch before the step
that would end at or after its next read (`core.Inbox.next_read_s`). Either way, whenever
the router looks, it sees what stepping would have left; a replica's own next delivery
bounds its stretch as an arrival bounds a lone engine's. A replica pulling arrivals first
delivers every request due by then (any replica's clock may reach an arrival time before
the router's own process does), so a one-replica fleet replays exactly the events of a
lone engine.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

import numpy as np
import simpy

from chunksim.core.request import Request
from chunksim.core.spec import RequestSpec, Workload, arrival_times
from chunksim.sim.engine.core import Inbox
from chunksim.sim.engine.engine import Engine, SimResult
from chunksim.sim.fleet.routers import Router


class ReplicaInbox(Inbox):
    """A replica's inbox: what its router has delivered, and when the next may come."""

    def __init__(self, fleet: Fleet, replica: int) -> None:
        super().__init__([])
        self.fleet = fleet
        self.replica = replica

    def sync(self, now: float) -> None:
        self.fleet.advance(now)

    def next_s(self, pulled: int) -> float | None:
        if pulled < len(self.specs):
            return self.specs[pulled].arrival_s
        return self.fleet.next_for(self.replica)

    def next_read_s(self) -> float | None:
        return None if self.fleet.live else self.fleet.next_read_s()

    def live_reads(self) -> bool:
        return self.fleet.live

    def read_tie(self, start_s: float, ends) -> int:
        return self.fleet.read_tie(start_s, ends)

    def closed(self, pulled: int) -> bool:
        return pulled >= len(self.specs) and self.fleet.closed_for(self.replica)


class Replica:
    """One engine of the fleet, and what a router may read of it (`routers.ReplicaView`)."""

    def __init__(self, engine: Engine, inbox: ReplicaInbox, token_time: float = 1.0) -> None:
        self.engine = engine
        self.inbox = inbox
        self.token_time = token_time

    def relative_token_time(self) -> float:
        return self.token_time

    def outstanding_requests(self) -> int:
        c = self.engine.core
        return (len(c.running) + len(c.waiting) + len(c.loading) + len(self.inbox.specs)
                - c.next_arrival)

    def outstanding_tokens(self) -> int:
        c = self.engine.core
        # the held requests' work as the core counts it (`EngineCore.work_in`), less what
        # a segment in flight has decoded, plus what was delivered but not pulled yet
        work = c.work_in - c.running_computed - self.engine.decoded_by()
        specs = self.inbox.specs
        for j in range(c.next_arrival, len(specs)):
            work += specs[j].prompt_tokens + specs[j].output_tokens - 1
        return work

    def cached_prefix_tokens(self, spec: RequestSpec) -> int:
        kv = self.engine.core.kv
        return kv.reachable_tokens(Request(spec)) if kv.prefix_caching else 0


class Fleet:
    """N engines on one workload behind `router`; `run()` returns each replica's records
    and `dest`, the replica of every request."""

    def __init__(self, workload: Workload, engines: list[Engine], router: Router,
                 staleness_s: float = 0.0, token_times: list[float] | None = None) -> None:
        """`token_times`: each replica's time per token relative to the fastest (a mixed
        fleet, `routers.ReplicaView.relative_token_time`); None: all equal, 1.0."""
        router.check(workload)
        self.workload = workload
        self.router = router
        self.specs = workload.requests
        self.n = len(self.specs)
        self.arrival = arrival_times(self.specs)
        times = token_times or [1.0] * len(engines)
        self.replicas = [Replica(e, ReplicaInbox(self, r), times[r])
                         for r, e in enumerate(engines)]
        self.dest = np.full(self.n, -1, dtype=np.int64)
        self.pending: list[deque[int]] = [deque() for _ in engines]
        self.delivered = 0
        # with one replica there is nothing to choose: no read can change a choice
        self.reads_state = router.reads_state and len(engines) > 1
        self.live = self.reads_state and router.reads_mid_stretch
        """The router reads only what stays exact mid-stretch (module docstring)."""
        self.advancing = False
        self.gate = None  # spec -> why the fleet refuses it (None: deliver), e.g. P/D
        if self.reads_state:
            self.read_s = [max(t - staleness_s, 0.0) for t in self.arrival]
            self.decided = 0
        else:  # choices independent of replica state: all made now, in arrival order
            self.decided = 0
            while self.decided < self.n:
                self._decide()

    # ------------------------------------------------------------------ routing
    def _decide(self) -> None:
        i = self.decided
        r = self.router.pick(self.specs[i], self.replicas) if len(self.replicas) > 1 else 0
        self.dest[i] = r
        self.pending[r].append(i)
        self.decided = i + 1

    def _deliver(self, now: float) -> None:
        i = self.delivered
        r = int(self.dest[i])
        self.pending[r].popleft()
        self.delivered = i + 1
        rep = self.replicas[r]
        why = self.gate(self.specs[i]) if self.gate is not None else None
        if why is not None:  # refused on arrival, recorded by the replica it was sent to
            rep.engine.core.rejected[i] = why
            return
        rep.inbox.specs.append(self.specs[i])
        rep.engine.core.pull_arrivals(now)
        rep.engine.wake_up()

    def advance(self, now: float) -> None:
        """Decide and deliver every request whose read time / arrival is <= `now`, in
        time order (a read before the delivery of the same request)."""
        if self.advancing:  # a delivery's pull_arrivals calls back here
            return
        self.advancing = True
        try:
            n, arrival = self.n, self.arrival
            while True:
                d = self.delivered
                can_deliver = d < self.decided and arrival[d] <= now
                i = self.decided
                if self.reads_state and i < n and self.read_s[i] <= now and (
                        not can_deliver or (self.read_s[i], i) < (arrival[d], d)):
                    self._decide()
                elif can_deliver:
                    self._deliver(now)
                else:
                    return
        finally:
            self.advancing = False

    def next_event_s(self) -> float | None:
        """Time of the next read or delivery (None: all delivered)."""
        t = None
        if self.delivered < self.decided:
            t = self.arrival[self.delivered]
        if self.reads_state and self.decided < self.n:
            r = self.read_s[self.decided]
            t = r if t is None or r < t else t
        return t

    def next_for(self, r: int) -> float | None:
        """Arrival of the next request decided for replica r (later ones are decided at
        reads, which end its bulk stretches: `next_read_s`)."""
        p = self.pending[r]
        return self.arrival[p[0]] if p else None

    def next_read_s(self) -> float | None:
        """Next time the router reads replica state (None: it reads none)."""
        return self.read_s[self.decided] if self.reads_state and self.decided < self.n else None

    def read_tie(self, start_s: float, ends) -> int:
        """Index of the first of `ends` (ascending, after `start_s`) equal to a read time
        still to come, len(ends) if none (`core.Inbox.read_tie`)."""
        reads = self.read_s
        lo = bisect_right(reads, start_s, self.decided)
        hi = bisect_right(reads, float(ends[-1]), lo)
        if lo == hi:
            return len(ends)
        k = len(ends)
        for i, r in zip(ends.searchsorted(reads[lo:hi]).tolist(), reads[lo:hi], strict=True):
            if i < k and ends[i] == r:
                return i  # the reads ascend: the first tie is the earliest
        return k

    def closed_for(self, r: int) -> bool:
        return self.decided >= self.n and not self.pending[r]

    def _router(self, env: simpy.Environment):
        while (t := self.next_event_s()) is not None:
            if t > env.now:
                yield env.timeout(t - env.now)
            self.advance(max(env.now, t))

    # ------------------------------------------------------------------ run
    def start(self, env: simpy.Environment) -> None:
        env.process(self._router(env))  # created first, as a lone engine's arrivals
        for r, rep in enumerate(self.replicas):
            rep.engine.start(env, rep.inbox, noise_key=r if r else None)

    def results(self) -> list[SimResult]:
        if self.delivered < self.n:
            raise RuntimeError("fleet stopped with requests not delivered (a bug)")
        return [rep.engine.result() for rep in self.replicas]

    def run(self) -> list[SimResult]:
        env = simpy.Environment()
        self.start(env)
        env.run()
        return self.results()

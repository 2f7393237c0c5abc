"""Fleet routers: which replica serves a request, decided when it arrives from what a real
router could see then. `ROUTERS` is the registry (a router is a small class plus one line
there); `make_router` builds one.

A router either reads no replica state (`reads_state = False`: round-robin, random,
conversation; its choices depend on the request stream alone) or reads it through a
`ReplicaView` (least-requests, least-tokens, prefix), possibly an old one
(`--router-staleness-ms`, see `sim.fleet.fleet`). Ties go to the first tied replica at or after
a pointer that moves past each choice, so an idle fleet is filled evenly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

import numpy as np

from chunksim.core.spec import RequestSpec, Workload


class ReplicaView(Protocol):
    """What a router may read of one replica (`sim.fleet.fleet.Replica`)."""

    def outstanding_requests(self) -> int:
        """Requests routed to it and not finished: running, waiting or not yet pulled."""

    def outstanding_tokens(self) -> int:
        """Tokens its routed, unfinished requests still have to compute (prompt chunks not
        yet prefilled, output tokens not yet decoded, recomputation after preemption)."""

    def cached_prefix_tokens(self, spec: RequestSpec) -> int:
        """Prompt tokens of `spec` its prefix cache holds now, a CPU KV tier's included (0
        without prefix caching)."""

    def relative_token_time(self) -> float:
        """Its time per token over the fastest replica's (1.0 in a fleet of one profile;
        a mixed fleet's slower GPU > 1): a static fact of its hardware, as a router's
        configuration would state it."""


class Router:
    """Base: the registry name, whether the router reads replica state, and tie-breaking."""

    name: ClassVar[str] = ""
    reads_state: ClassVar[bool] = False
    reads_mid_stretch: ClassVar[bool] = False
    """It reads only what a replica keeps exact in the middle of a bulk decode stretch
    (`sim.fleet.fleet.Replica`: outstanding requests and tokens), so the fleet may let stretches
    run through its reads. Off (the default), every replica ends its stretch before each
    read, so the router sees exactly what stepping would have left, whatever it reads."""

    def __init__(self, replicas: int, seed: int = 0) -> None:
        self.n = replicas
        self.next = 0  # tie-break pointer

    def check(self, workload: Workload) -> None:
        """Raise if this router cannot route `workload` (default: it can)."""

    def pick(self, spec: RequestSpec, views: Sequence[ReplicaView]) -> int:
        raise NotImplementedError

    def _argmin(self, scores: Sequence) -> int:
        """Index of the smallest score, ties to the first at or after the pointer."""
        n, start = self.n, self.next
        best, best_i = None, start
        for k in range(n):
            i = (start + k) % n
            if best is None or scores[i] < best:
                best, best_i = scores[i], i
        self.next = (best_i + 1) % n
        return best_i


class RoundRobin(Router):
    """Replica 0, 1, ..., N-1, 0, ... in arrival order."""

    name = "round-robin"

    def pick(self, spec, views):
        i = self.next
        self.next = (i + 1) % self.n
        return i


class RandomRouter(Router):
    """Uniformly at random, seeded by --seed (a Poisson stream splits into N Poisson
    streams of rate lambda/N)."""

    name = "random"

    def __init__(self, replicas: int, seed: int = 0) -> None:
        super().__init__(replicas, seed)
        self.rng = np.random.default_rng([seed, 0x5EED])
        self.draws: list[int] = []

    def pick(self, spec, views):
        if not self.draws:
            self.draws = self.rng.integers(0, self.n, 4096).tolist()[::-1]
        return self.draws.pop()


class LeastRequests(Router):
    """Fewest outstanding requests (running + waiting), as Vidur's least-outstanding."""

    name = "least-requests"
    reads_state = True
    reads_mid_stretch = True

    def pick(self, spec, views):
        return self._argmin([v.outstanding_requests() for v in views])


class LeastTokens(Router):
    """Least outstanding work (prefill still to run plus decodes still to come), in tokens
    times the replica's relative time per token: in a mixed fleet a replica twice as fast
    takes twice the tokens (in a fleet of one profile every weight is 1.0, plain tokens)."""

    name = "least-tokens"
    reads_state = True
    reads_mid_stretch = True

    def pick(self, spec, views):
        return self._argmin([v.outstanding_tokens() * v.relative_token_time() for v in views])


class PrefixAffinity(Router):
    """The replica whose prefix cache holds the longest prefix of the prompt, among those
    within `load_cap` outstanding requests of the least-loaded one (so one replica never
    takes everything, as cache-aware routers balance: SGLang's router, llm-d's scorers);
    no hit anywhere: the least loaded."""

    name = "prefix"
    reads_state = True

    def __init__(self, replicas: int, seed: int = 0, load_cap: int = 8) -> None:
        super().__init__(replicas, seed)
        self.load_cap = load_cap

    def pick(self, spec, views):
        loads = [v.outstanding_requests() for v in views]
        cap = min(loads) + self.load_cap
        # longest hit first, then least load (ties: the pointer)
        scores = [(-v.cached_prefix_tokens(spec), load) if load <= cap else (1, load)
                  for v, load in zip(views, loads, strict=True)]
        return self._argmin(scores)


class Conversation(Router):
    """Sticky by conversation id: a conversation's first request goes round-robin over new
    conversations, the rest follow it (session affinity, keeping its KV on one replica); a
    request without an id is a conversation of its own."""

    name = "conversation"

    def __init__(self, replicas: int, seed: int = 0) -> None:
        super().__init__(replicas, seed)
        self.home: dict[str, int] = {}

    def check(self, workload: Workload) -> None:
        if not any(s.conversation_id is not None for s in workload.requests):
            raise ValueError(
                f"--router conversation: workload {workload.name!r} has no conversation ids; "
                "replay a trace that has one (--conversation-column COLUMN for a generic "
                "trace; BurstGPT v3's Session ID) or choose another --router")

    def pick(self, spec, views):
        cid = spec.conversation_id
        if cid is not None and cid in self.home:
            return self.home[cid]
        i = self.next
        self.next = (i + 1) % self.n
        if cid is not None:
            self.home[cid] = i
        return i


ROUTERS: dict[str, type[Router]] = {
    r.name: r for r in (RoundRobin, RandomRouter, LeastRequests, LeastTokens, PrefixAffinity,
                        Conversation)
}
"""Every router by its `--router` name."""


def check_router_name(name: str, flag: str = "--router") -> str:
    if name not in ROUTERS:
        raise ValueError(f"{flag} {name!r} is unknown; choose one of {', '.join(ROUTERS)}")
    return name


def make_router(name: str, replicas: int, seed: int = 0, prefix_load_cap: int = 8,
                flag: str = "--router") -> Router:
    """Router `name` for `replicas` replicas."""
    cls = ROUTERS[check_router_name(name, flag)]
    if cls is PrefixAffinity:
        return PrefixAffinity(replicas, seed, prefix_load_cap)
    return cls(replicas, seed)

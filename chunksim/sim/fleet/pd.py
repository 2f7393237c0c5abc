"""Prefill/decode disaggregation (`--pd P:D`) as vLLM V1 serves it (instances with a KV
connector such as `NixlConnector` behind its disaggregated-serving proxy; DistServe and
Splitwise split a model's serving the same way): P prefill instances run each prompt
under the policy as a one-token request; its KV then moves to one of D decode instances,
which makes every token the client sees, the first included (TTFT ends there, not at the
prefill).

How a handoff is modelled:
- The prefill pool is a `Fleet` over the workload with every output cut to one token
  (vLLM's proxy sends the prefill `max_tokens=1` and drops its token); a request that
  wants one token never leaves it, and its TTFT ends at the prefill.
- When the prefill's token is out, the decode router (reading the decode instances'
  state at that moment) picks the decode instance, and the prompt's KV starts over the
  link: transfer = prompt tokens x the profile's kv_bytes_per_token / bandwidth +
  latency. The prefill instance frees the blocks at once (the KV is copied out as the
  step ends); transfers overlap with compute on both sides and with each other (no link
  contention).
- The KV lands in the decode instance's waiting queue; the decode instance admits the
  request when its blocks are free, holding all but the last prompt token's KV without
  computing it (`KVCache.carry`: to the policy, a prefix hit). As vLLM's scheduler does
  when the remote KV covers the whole prompt (`_update_waiting_for_remote_kv`), its
  first step there computes that last token, a one-token query over the carried KV
  priced as a decode row, and samples the first token; then it decodes. So the first
  token comes one prefill, one transfer, any queueing at the decode instance and one
  step after the arrival: a decode instance that falls behind shows in TTFT, as a client
  of the proxy sees it.

Bulk decode stays exact. Where the decode router reads only what a bulk segment keeps
exact (least-requests, least-tokens) or nothing at all, a decode instance runs its
stretches live (`core.Inbox.live_reads`): a landing cuts the segment in flight after its
step, and the requests that landed join the stretch when the policy admits them all
(`fast_forward.BulkDecoder.join_step`). Under any other router a decode instance's stretch ends
before the earliest moment a prefill step can end (the decode router may read it then),
and its own next landing bounds it as an arrival does.
"""

from __future__ import annotations

import heapq

import numpy as np
import simpy

from chunksim.core.request import Request
from chunksim.core.spec import Workload
from chunksim.sim.engine.core import Inbox
from chunksim.sim.engine.engine import Engine, SimResult
from chunksim.sim.fleet.fleet import Fleet, Replica
from chunksim.sim.fleet.routers import Router


class DecodeInbox(Inbox):
    """A decode instance's inbox: requests whose prompt KV has landed."""

    def __init__(self, pd: Disaggregated, replica: int) -> None:
        super().__init__([])
        self.pd = pd
        self.replica = replica
        self.engine: Engine | None = None

    def sync(self, now: float) -> None:
        self.pd.land_due(now)

    def next_s(self, pulled: int) -> float | None:
        if pulled < len(self.specs):
            return self.specs[pulled].arrival_s
        return self.pd.next_landing(self.replica)

    def next_read_s(self) -> float | None:
        return None if self.pd.decode_live else self.pd.next_handoff_s()

    def live_reads(self) -> bool:
        return self.pd.decode_live

    def delivers_decodes(self) -> bool:
        return self.pd.decode_live

    def closed(self, pulled: int) -> bool:
        return pulled >= len(self.specs) and self.pd.closed_for(self.replica)

    def prepare(self, req: Request) -> None:
        """The request arrives with its prompt's KV, less the last token's, which its
        first step computes to sample the first token (the prefill's is dropped)."""
        req.kv_carried = True
        self.engine.core.kv.carry(req, req.spec.prompt_tokens - 1)


def first_tokens(workload: Workload) -> Workload:
    """`workload` with every output cut to its first token: the prefill pool's work."""
    reqs = workload.requests
    return Workload(workload.name, reqs.with_outputs(np.ones(len(reqs), dtype=np.int64)),
                    workload.prefix_block_tokens, workload.notes, workload.params)


class Disaggregated:
    """A prefill `Fleet` (engines built on `first_tokens(workload)`) and a pool of
    decode engines (on `workload`) linked by KV transfers."""

    def __init__(self, workload: Workload, prefill: list[Engine], decode: list[Engine],
                 prefill_router: Router, decode_router: Router, staleness_s: float,
                 kv_bytes_per_token: float, link_bytes_per_s: float,
                 link_latency_s: float) -> None:
        self.workload = workload
        n = len(workload.requests)
        self.prefill = Fleet(prefill[0].workload, prefill, prefill_router, staleness_s)
        self.decoders = [Replica(e, DecodeInbox(self, r)) for r, e in enumerate(decode)]
        for rep in self.decoders:
            rep.inbox.engine = rep.engine
        self.decode_router = decode_router
        self.decode_live = (len(decode) == 1 or not decode_router.reads_state
                            or decode_router.reads_mid_stretch)
        """The decode router reads nothing a bulk segment leaves inexact (or nothing at
        all): a decode instance's stretch runs through handoffs, a landing cuts it after
        the step in flight, and landed requests join it (`fast_forward.BulkDecoder.join_step`)."""
        self.kv_bytes_per_token = kv_bytes_per_token
        self.link = (link_bytes_per_s, link_latency_s)
        self.transfer_s = np.full(n, np.nan)
        self.kv_bytes = np.zeros(n, dtype=np.int64)
        self.ddest = np.full(n, -1, dtype=np.int64)
        self.landings: list[tuple[float, int]] = []  # heap of (time, request id)
        self.next_landing_of: list[list[tuple[float, int]]] = [[] for _ in decode]
        self.landing = False

    # ------------------------------------------------------------------ handoff
    def _handoff(self, req: Request, end_s: float) -> None:
        """A prefill instance finished `req`'s prompt (its one token) at `end_s`: pick
        its decode instance and start the KV transfer."""
        rid = req.request_id
        spec = self.workload.requests[rid]
        if spec.output_tokens <= 1:
            return
        views = self.decoders
        r = self.decode_router.pick(spec, views) if len(views) > 1 else 0
        nbytes = spec.prompt_tokens * self.kv_bytes_per_token
        bw, lat = self.link
        t = nbytes / bw + lat
        self.ddest[rid], self.kv_bytes[rid], self.transfer_s[rid] = r, nbytes, t
        when = end_s + t
        heapq.heappush(self.landings, (when, rid))
        heapq.heappush(self.next_landing_of[r], (when, rid))
        env = self.env
        env.process(self._land_at(env, when))

    def _land_at(self, env: simpy.Environment, when: float):
        if when > env.now:
            yield env.timeout(when - env.now)
        self.land_due(max(env.now, when))

    def land_due(self, now: float) -> None:
        """Deliver every transfer that has landed by `now`, in landing order."""
        if self.landing:
            return
        self.landing = True
        try:
            while self.landings and self.landings[0][0] <= now:
                _, rid = heapq.heappop(self.landings)
                r = int(self.ddest[rid])
                heapq.heappop(self.next_landing_of[r])
                rep = self.decoders[r]
                rep.inbox.specs.append(self.workload.requests[rid])
                rep.engine.core.pull_arrivals(now)
                rep.engine.wake_up()
        finally:
            self.landing = False

    def next_landing(self, r: int) -> float | None:
        q = self.next_landing_of[r]
        return q[0][0] if q else None

    def next_handoff_s(self) -> float | None:
        """Earliest time a prefill step can end (and the decode router read): the end of
        a step in flight, else the next arrival at the prefill pool."""
        now = self.env.now
        t = None
        for rep in self.prefill.replicas:
            e = rep.engine
            if e.busy_until >= now:
                b = e.busy_until
            elif not e.core.idle:  # between steps: the next one starts now
                b = now
            else:  # asleep: woken by an arrival
                continue
            if t is None or b < t:
                t = b
        f = self.prefill
        if f.delivered < f.n:
            a = f.arrival[f.delivered]
            t = a if t is None or a < t else t
        return t

    def closed_for(self, r: int) -> bool:
        """Nothing in flight to r and no prefill instance left to hand anything off."""
        return not self.next_landing_of[r] and all(
            rep.engine.core.done for rep in self.prefill.replicas)

    # ------------------------------------------------------------------ run
    def run(self) -> tuple[list[SimResult], list[SimResult]]:
        env = self.env = simpy.Environment()
        self.prefill.start(env)
        for rep in self.prefill.replicas:
            rep.engine.core.on_retire = self._handoff
        for r, rep in enumerate(self.decoders):
            rep.engine.start(env, rep.inbox, noise_key=len(self.prefill.replicas) + r)
        # a request no decode instance could ever hold is refused before its prefill
        core = self.decoders[0].engine.core
        self.prefill.gate = lambda spec: core.reject_reason(self.workload.requests[
            spec.request_id])
        env.run()
        return self.prefill.results(), [rep.engine.result() for rep in self.decoders]

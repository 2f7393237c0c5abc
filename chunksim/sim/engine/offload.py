"""Loads from the CPU KV tier, as the engine schedules and times them (the block
accounting is `core.kv_offload`).

vLLM V1 with a KV connector (the OffloadingConnector): when the scheduler
reaches a waiting request whose prefix continues on the host after its GPU hit, it
allocates GPU blocks for those tokens, starts the load and skips the request
(WAITING_FOR_REMOTE_KVS); later requests are scheduled as if it were not there. The
request is scheduled again only after its load finished. Here: after the policy plans,
each admitted request with a host hit starts its load (if the free blocks left by the
plan's running entries and earlier admissions hold it) and leaves the waiting queue, and
the policy plans again without it. A load that does not fit stops admission at that
request, as vLLM's scheduler stops when `allocate_slots` fails: the request keeps its
place at the head and tries again at the next plan. A request whose host run reaches a
block another load is bringing back (write-through) is skipped for the plan, as vLLM's
connector defers its lookup, and the policy plans again without it. A load takes no
lookahead slots (vLLM allocates them only once the KV has arrived).

Timing: one link, loads in start order (one copy stream): a load of b blocks starts when
the link is free and lasts b x block bytes / bandwidth, then the link latency; it
overlaps whatever steps run meanwhile. The request rejoins the head of the waiting queue
at the first plan at or after its end.
"""

from __future__ import annotations

from chunksim.core.kv_offload import BUSY, Load, OffloadKVCache
from chunksim.core.plan import Plan
from chunksim.sim.records.records import KIND_LOAD, KIND_LOADED


class Offloads:
    """The loads of one engine: in flight (by end time) and done."""

    def __init__(self, kv: OffloadKVCache) -> None:
        self.kv = kv
        self.loads: list[Load] = []
        """Loads in flight, by end time (ties: start order)."""
        self.link_free_s = 0.0
        self.waits_s: list[float] = []
        """Each finished load's wait, start to end, seconds."""
        self.blocks_loaded = 0
        self.stalled = False
        """The last plan was empty because loads hold the blocks it needs."""

    @property
    def next_end_s(self) -> float | None:
        return self.loads[0].end_s if self.loads else None

    def plan_loads(self, core, plan: Plan, waiting, now: float) -> Plan:
        """`plan` with every admission that needs a host load replaced by the load
        (started now), re-planned until none is left (see the module docstring)."""
        kv, policy = self.kv, core.policy
        waiting = list(waiting)
        while True:
            changed = False
            used = 0  # free blocks the plan's entries before this admission consume
            admitted = set(plan.admitted)
            look = core.lookahead  # every entry also takes its lookahead slots
            for req, n in plan.scheduled:
                if req not in admitted:
                    used += kv.extra_blocks(req, n + look)
                    continue
                found = kv.find_load(req)
                if found is BUSY:
                    # vLLM: a hit block is being loaded already, the request is skipped
                    # this step and later ones are scheduled (it stays waiting)
                    changed = True
                    waiting.remove(req)
                    break
                if found is None:
                    cached, from_free = kv.prefix_hit(req)
                    bs = kv.block_size
                    used += -(-(cached + n + look) // bs) - cached // bs + from_free
                    continue
                gpu_tokens, blocks, need = found
                changed = True
                if need > kv.free_blocks - used:
                    # no room: admission stops here (vLLM: allocate_slots failed -> break)
                    del waiting[waiting.index(req):]
                    break
                waiting.remove(req)
                self._start(core, req, gpu_tokens, blocks, now)
                # later admissions saw blocks this load now holds: plan again
                break
            if not changed:
                return plan
            plan = policy.plan(core.scheduler_state(waiting))
            if not plan.admitted:
                return plan

    def _start(self, core, req, gpu_tokens: int, blocks: int, now: float) -> None:
        kv = self.kv
        load = kv.start_load(req, gpu_tokens, blocks)
        begin = max(now, self.link_free_s)
        self.link_free_s = begin + kv.load_s(blocks)
        load.start_s = now
        load.end_s = self.link_free_s + kv.latency_s
        core.waiting.remove(req)
        self.blocks_loaded += blocks
        loads = self.loads
        i = len(loads)
        while i and loads[i - 1].end_s > load.end_s:
            i -= 1
        loads.insert(i, load)
        log = core.schedule_log
        if log is not None:  # logged against the step it precedes
            log.add(core.steps.n, req.request_id, KIND_LOAD, blocks * kv.block_size, -1,
                    gpu_tokens, 0, len(load.pinned) + blocks)

    def finish(self, core, now: float) -> None:
        """Land every load due by `now`: their requests rejoin the head of the queue, the
        first landed foremost."""
        loads = self.loads
        due = 0
        while due < len(loads) and loads[due].end_s <= now:
            due += 1
        landed, self.loads = loads[:due], loads[due:]
        for load in landed:
            self.kv.finish_load(load)
            self.waits_s.append(load.end_s - load.start_s)
        log = core.schedule_log
        for load in reversed(landed):
            req = load.req
            core._enqueue(req, front=True)
            if log is not None:
                log.add(core.steps.n, req.request_id, KIND_LOADED, 0, -1,
                        load.gpu_tokens + len(load.keys) * self.kv.block_size, 0, 0)

    def meta(self) -> dict:
        """Run facts of the tier (summary keys)."""
        return offload_meta([self])


def offload_meta(tiers: list[Offloads]) -> dict:
    """Summary keys of one engine's tier, or a fleet's (each replica its own tier; the
    capacity is per replica, the rest over all of them)."""
    import numpy as np

    kv = tiers[0].kv
    waits = np.concatenate([np.asarray(t.waits_s, dtype=float) for t in tiers]) * 1000.0
    queries = sum(t.kv.query_tokens for t in tiers)
    host_hits = sum(t.kv.host_hit_tokens for t in tiers)
    blocks = sum(t.blocks_loaded for t in tiers)
    return {
        "kv_offload_blocks": kv.host.capacity,
        "kv_offload_link_gb_per_s": kv.bytes_per_s / 1e9,
        "kv_offload_link_latency_us": kv.latency_s * 1e6,
        "host_cache_hit_rate": host_hits / queries if queries else None,
        "host_cache_hit_tokens": host_hits,
        "prefix_cache_hit_tokens": sum(t.kv.hit_tokens for t in tiers),
        "kv_loads": len(waits),
        "kv_loaded_blocks": blocks,
        "kv_loaded_bytes": blocks * kv.block_bytes,
        "mean_kv_load_wait_ms": float(waits.mean()) if len(waits) else None,
        "p99_kv_load_wait_ms": float(np.percentile(waits, 99)) if len(waits) else None,
        "host_blocks_dropped": sum(t.kv.host.dropped for t in tiers),
        "host_blocks_stored": sum(t.kv.host.stored for t in tiers),
        "kv_offload_write_policy": "write-back" if kv.write_back else "write-through",
    }

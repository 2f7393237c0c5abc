"""Engine bookkeeping shared by the simulator and the live serving loop: the waiting and
running queues, the KV cache, applying a plan to request counters, and the records.

Knows nothing of time sources: callers pass step start/end times in seconds (simulated
time in `engine.Engine`, wall-clock time in a live loop).
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Sequence

import numpy as np

from chunksim.core.kv_cache import NULL_BLOCKS, KVConfig, blocks_for, prefix_hit_rate
from chunksim.core.kv_factory import make_kv_cache
from chunksim.core.plan import Plan, Policy, SchedulerState
from chunksim.core.request import Request
from chunksim.core.shape import StepShape
from chunksim.core.spec import SpecTable, Workload
from chunksim.core.speculative import Acceptance, SpecConfig
from chunksim.sim.engine.offload import Offloads
from chunksim.sim.records.records import (
    KIND_DECODE,
    KIND_NEW,
    KIND_PREEMPTED,
    KIND_PREFILL,
    KIND_RESUMED,
    GapLog,
    ScheduleLog,
    StepLog,
    StepRow,
)


def _class_names(specs: SpecTable) -> list[str]:
    """The request classes present, sorted."""
    # (np.unique would import numpy.ma, a start-up cost of every run)
    used = np.flatnonzero(np.bincount(specs.class_codes, minlength=1))
    return sorted(specs.class_names[c] for c in used.tolist())


class Inbox:
    """The requests sent to one engine, in the order they reach it. A lone engine's inbox
    is its workload; a fleet replica's is filled by the fleet's router as requests arrive
    (`sim.fleet.fleet`), which also says when the next one may come."""

    def __init__(self, specs) -> None:
        self.specs = specs
        # columnar specs: read the next arrival from its column (asked every event)
        self._arrivals = specs.arrival_s if isinstance(specs, SpecTable) else None

    def sync(self, now: float) -> None:
        """Bring every request due by `now` into `specs`."""

    def next_s(self, pulled: int) -> float | None:
        """Earliest time a request after the first `pulled` may come (None: none will)."""
        arrivals = self._arrivals
        if arrivals is not None:
            return arrivals.item(pulled) if pulled < len(arrivals) else None
        specs = self.specs
        return specs[pulled].arrival_s if pulled < len(specs) else None

    def next_read_s(self) -> float | None:
        """Next time someone else reads the engine's state (a fleet's router), None if
        nobody does: the engine's bulk decode ends every stretch before it."""
        return None

    def live_reads(self) -> bool:
        """Whether someone else (a fleet's router) reads the engine's request counts at
        any moment, mid-step included. The engine then runs its bulk decode one segment at
        a time, applied at its end; meanwhile the reader subtracts the steps done
        (`Engine.decoded_by`), and a request delivered mid-segment cuts it after the step
        in flight (`Engine.wake_up`)."""
        return False

    def read_tie(self, start_s: float, ends) -> int:
        """Index of the first of `ends` (ascending ends of steps starting at `start_s`) at
        which someone reads the engine (`live_reads`): which of the two comes first there
        is SimPy's event order, so the bulk path stops before it. len(ends) if none."""
        return len(ends)

    def closed(self, pulled: int) -> bool:
        """Nothing after the first `pulled` requests will ever come."""
        return pulled >= len(self.specs)

    def delivers_decodes(self) -> bool:
        """Whether its requests come with their prompt's KV, ready to decode (a P/D decode
        instance's), and the engine reads its state live (`live_reads`): a bulk decode
        stretch may then take them in as they land, where the policy would admit them
        (`fast_forward.BulkDecoder.join_step`)."""
        return False

    def prepare(self, req: Request) -> None:
        """Give `req` the state it brings along before it is queued (none here)."""


def request_rejection(spec, policy: Policy, block_size: int, num_blocks: int,
                      max_model_len: int | None) -> tuple[str, str] | None:
    """(kind, why) if `spec` can never run on an engine with this policy, KV cache and
    --max-model-len, else None (`EngineCore.rejection`): a function of its lengths alone,
    so the same at any load."""
    cap = max_model_len
    total = spec.prompt_tokens + spec.output_tokens
    if cap is not None and total > cap:
        return "max_model_len", (f"prompt+output {total} tokens > max_model_len {cap} "
                                 f"(--max-model-len {cap})")
    need = blocks_for(total - 1, block_size)
    if need > num_blocks:
        return "kv_blocks", (f"needs {need} KV blocks for {total - 1} tokens, the cache "
                             f"holds {num_blocks} (raise --kv-blocks, now "
                             f"{num_blocks + NULL_BLOCKS} with vLLM's null block)")
    why = policy.rejection_reason(spec.prompt_tokens, spec.output_tokens)
    return None if why is None else ("policy", why)


class EngineCore:
    """Queues, KV cache, request counters and records for one run."""

    def __init__(self, workload: Workload, policy: Policy, kv: KVConfig,
                 max_model_len: int | None = None, schedule_log: bool = False,
                 inbox: Inbox | None = None, steps: StepLog | None = None,
                 speculative: SpecConfig | None = None, spec_seed=0) -> None:
        self.workload = workload
        self.inbox = inbox if inbox is not None else Inbox(workload.requests)
        self._arrivals = self.inbox._arrivals if type(self.inbox) is Inbox else None
        """The arrival times `pull_arrivals` reads without asking the inbox, where it is a
        plain `Inbox` of columnar specs (whose `sync` does nothing); None: ask it."""
        self.on_retire = None  # called with (request, end time) as it finishes (fleets)
        self.policy = policy
        self.max_model_len = max_model_len
        n = len(workload.requests)
        self.kv = make_kv_cache(kv)
        self.running: list[Request] = []
        # the policy's queue discipline orders the waiting queue: FIFO (a deque, preempted
        # requests prepended) or a list kept sorted on the discipline's key
        self.queue = policy.queue
        self.waiting: deque[Request] | list[Request] = (
            deque() if self.queue.key is None else [])
        classes = _class_names(workload.requests)
        self.class_names = classes
        self.class_of = {c: i for i, c in enumerate(classes)}
        self.gaps = GapLog(len(classes))
        self.next_arrival = 0
        self.last_prefill = False
        self.steps = steps if steps is not None else StepLog()
        """Step records (kept, thinned or streamed as the StepLog was made)."""
        self.finish_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.first_sched_s = np.full(n, np.nan)
        self.max_itl_s = np.zeros(n)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.computed = [0] * n  # a list: every step adds to it per entry (numpy scalar
        # updates cost several times a list's); a column in `request_frame`
        self.recomputed = np.zeros(n, dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64)
        self.outputs = np.zeros(n, dtype=np.int64)
        self.rejected: dict[int, str] = {}
        self.rejected_kinds: dict[str, int] = {}
        """Rejected requests per kind of reason (`rejection`)."""
        self.rejected_examples: dict[str, str] = {}
        """The first rejected request's reason, per kind."""
        self.finished = 0
        """Requests that completed so far."""
        self.empty_preempt_steps = 0
        self.work_in = 0
        """Tokens still to compute and to sample of the requests held (running, waiting,
        loading) as they arrived: the sum of their prompt + output - 1."""
        self.running_computed = 0
        """The running requests' computed tokens, summed (a waiting request has computed
        none: a request gets its prefix hit or carried KV as it is admitted, and a
        preempted one loses all it computed). `work_in - running_computed` is the work
        they hold, in tokens, which a router reads (`fleet.Replica.outstanding_tokens`);
        a bulk stretch adds each segment's tokens as it applies it."""
        self.finishing: list[Request] = []
        """Async scheduling: requests that finished in the step in flight, holding their
        seats and blocks until its output is processed (`release_finishing`)."""
        self.schedule_log: ScheduleLog | None = ScheduleLog() if schedule_log else None
        """One row per (step, request) and per preemption, when asked for."""
        on = speculative is not None and speculative.enabled
        self.speculative = speculative if on else None
        self.spec_k = speculative.num_speculative_tokens if on else 0
        """Drafts proposed per request after each step that samples (0: off)."""
        self.lookahead = speculative.lookahead_tokens if on else 0
        self.acceptance = Acceptance(speculative.position_rates, spec_seed) if on else None
        """Draws each verified decode's accepted drafts (None: no speculative decoding)."""
        self.drafting = 0
        """Requests that sample in the step begun last (they propose drafts after it)."""
        self.offload: Offloads | None = Offloads(self.kv) if kv.host_blocks else None
        """The KV loads from the CPU tier, when the cache has one (`sim.engine.offload`)."""

    # ------------------------------------------------------------------ arrivals / queues
    def rejection(self, spec) -> tuple[str, str] | None:
        """(kind, why) if `spec` can never run here, else None. Kinds: `max_model_len`,
        `kv_blocks` (the whole request does not fit the cache), `policy` (the policy's own
        limit, e.g. whole prefill's token cap)."""
        return request_rejection(spec, self.policy, self.kv.block_size, self.kv.num_blocks,
                                 self.max_model_len)

    def reject_reason(self, spec) -> str | None:
        """Why `spec` can never run here (None if it can)."""
        r = self.rejection(spec)
        return None if r is None else r[1]

    def pull_arrivals(self, now: float) -> None:
        """Queue every request that has arrived by `now` (or reject it)."""
        i = self.next_arrival
        arrivals = self._arrivals
        if arrivals is not None:  # a lone engine's inbox: its workload's arrival column
            if i >= len(arrivals) or arrivals.item(i) > now:  # (the common case)
                return
        inbox = self.inbox
        inbox.sync(now)
        due = inbox.next_s(i)
        if due is None or due > now:  # (the common case: nothing new)
            return
        specs = inbox.specs
        while i < len(specs) and specs[i].arrival_s <= now:
            spec = specs[i]
            rejection = self.rejection(spec)
            if rejection is None:
                req = Request(spec, class_idx=self.class_of[spec.request_class])
                inbox.prepare(req)
                self._enqueue(req)
                self.work_in += spec.prompt_tokens + spec.output_tokens - 1
            else:
                kind, self.rejected[spec.request_id] = rejection
                self.rejected_kinds[kind] = self.rejected_kinds.get(kind, 0) + 1
                self.rejected_examples.setdefault(kind, self.rejected[spec.request_id])
            i += 1
        self.next_arrival = i

    @property
    def next_arrival_s(self) -> float | None:
        return self.inbox.next_s(self.next_arrival)

    @property
    def idle(self) -> bool:
        """Nothing running or waiting (requests finishing in the step in flight aside)."""
        return not self.running and not self.waiting

    @property
    def loading(self) -> list[Request]:
        """Requests waiting for a KV load from the CPU tier (out of the waiting queue)."""
        off = self.offload
        return [ld.req for ld in off.loads] if off is not None and off.loads else []

    @property
    def done(self) -> bool:
        """Nothing in flight and nothing left to arrive."""
        return (self.idle and self.inbox.closed(self.next_arrival)
                and (self.offload is None or not self.offload.loads))

    def _enqueue(self, req: Request, front: bool = False) -> None:
        """New arrivals join the back; preempted requests the front (vLLM V1's prepend) —
        or, under an ordered discipline (priority, SJF), their place in its order."""
        key = self.queue.key
        if key is not None:
            insort(self.waiting, req, key=key)
        elif front:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)

    # ------------------------------------------------------------------ one step
    def plan(self, now: float, visible_s: float | None = None) -> Plan | None:
        """The policy's next plan, or None when it only preempted (applied at once, no
        forward pass) or, planning ahead (`visible_s`: async scheduling sees the arrivals up
        to then), when nothing is schedulable before the step in flight's output is
        processed (then released). Raises if the policy would hang."""
        waiting = self.waiting
        if visible_s is not None:
            waiting = [r for r in waiting if r.spec.arrival_s <= visible_s]
        plan = self.policy.plan(self.scheduler_state(waiting))
        if self.offload is not None and plan.admitted:
            plan = self.offload.plan_loads(self, plan, waiting, now)
        if plan.scheduled:
            return plan
        if not plan.preempted:
            if self.finishing or len(waiting) < len(self.waiting):
                self.release_finishing()
                return None
            if self.offload is not None and self.offload.loads:
                self.offload.stalled = True  # what is left waits for blocks loads hold
                return None
            raise RuntimeError(
                f"policy {self.policy.name} planned nothing with {len(self.running)} running "
                f"and {len(self.waiting)} waiting at t={now:.6f} s: a policy bug (it would hang)")
        self.preempt(plan)
        self.empty_preempt_steps += 1
        return None

    def scheduler_state(self, waiting) -> SchedulerState:
        """What the policy sees when it plans: running, `waiting` (those it may see), the
        KV cache, and the step's context."""
        return SchedulerState(self.running, waiting, self.kv, self.last_prefill,
                              len(self.finishing), self.lookahead, self.spec_k)

    def release_finishing(self) -> None:
        """Free the blocks of requests that finished in the step in flight (async)."""
        for req in self.finishing:
            self.kv.free(req)
        self.finishing.clear()

    def preempt(self, plan: Plan) -> None:
        log = self.schedule_log
        for victim in plan.preempted:
            self.running.remove(victim)
            if log is not None:
                free = self.kv.free_blocks
                held = victim.num_blocks
                computed = victim.num_computed_tokens
            self.kv.free(victim, reusable=True)
            if log is not None:
                # logged against the step it precedes (the next StepLog row)
                log.add(self.steps.n, victim.request_id, KIND_PREEMPTED, 0, -1, computed, 0,
                        held, self.kv.free_blocks - free)
            self.recomputed[victim.request_id] += victim.num_computed_tokens
            self.running_computed -= victim.num_computed_tokens
            victim.num_computed_tokens = 0
            victim.num_spec_tokens = 0  # its drafts go with its KV
            victim.num_preemptions += 1
            self._enqueue(victim, front=True)

    def begin_step(self, plan: Plan, start_s: float) -> StepShape:
        """Preempt, then per entry in batch order: admit (taking prefix hits), allocate the
        step's slots and register the blocks they will fill (vLLM V1's `allocate_slots`:
        a later entry of the same step hits them). Returns the step's shape."""
        self.preempt(plan)
        admitted = plan.admitted
        self.admit(admitted)
        kv = self.kv
        bs = kv.block_size
        # admissions are the batch's tail in every policy here; any order is accepted
        sched = plan.scheduled
        first_new = len(sched) - len(admitted)
        new = (() if not admitted else None if all(
            a is r for a, (r, _) in zip(admitted, sched[first_new:], strict=True))
            else set(admitted))
        decodes = kv_sum = kv_max = 0
        start = 0
        if new is None and not self.lookahead and self.schedule_log is None:
            # the leading running one-token decodes (most of a large batch): their slot,
            # and nothing to register, as a running decode's prompt blocks are all
            # registered already (tests/test_decode_commit.py) and it was scheduled before
            for req, n in sched[:first_new]:
                c = req.num_computed_tokens
                # request.is_decode(req), inlined (tests/test_decode_rule.py)
                if n != 1 or not req.num_output_tokens or (
                        c + 1 != req.spec.prompt_tokens + req.num_output_tokens):
                    break
                if -(-(c + 1) // bs) > req.num_blocks:
                    kv.grow(req, 1)
                decodes += 1
                kv_sum += c
                if c > kv_max:
                    kv_max = c
                start += 1
        return self.take_slots(sched, start, first_new, new, start_s, plan.two_pass, decodes,
                               kv_sum, kv_max)

    def admit(self, admitted) -> None:
        """Move `admitted` (in admission order) from the waiting queue to the end of the
        running list."""
        waiting = self.waiting
        for req in admitted:
            # a policy may admit any waiting request; in queue order this is the head
            if waiting and waiting[0] is req and isinstance(waiting, deque):
                waiting.popleft()
            elif waiting and waiting[0] is req:
                waiting.pop(0)
            else:
                try:
                    waiting.remove(req)
                except ValueError:
                    raise RuntimeError(
                        f"policy {self.policy.name} admitted request {req.request_id}, "
                        "which is not waiting: a policy bug") from None
            self.running.append(req)

    def take_slots(self, sched, start: int, first_new: int, new, start_s: float,
                   two_pass: bool, decodes: int = 0, kv_sum: int = 0,
                   kv_max: int = 0) -> StepShape:
        """`begin_step` for the entries of `sched` from `start` on, in batch order (those
        from `first_new` on are admitted now, or those in the set `new`): admit (taking
        prefix hits), allocate the step's slots and register the blocks they will fill.
        The entries before `start` are one-token decodes whose slots are taken already,
        counted in `decodes`, `kv_sum` (their contexts' sum) and `kv_max`. Returns the
        step's shape (`fast_forward.BulkDecoder.mixed_step` calls it for a stretch's tail)."""
        kv = self.kv
        bs = kv.block_size
        caching = kv.prefix_caching
        log = self.schedule_log
        step = self.steps.n
        prefill = prefill_reqs = prefill_logits = 0
        lookahead = self.lookahead
        extra_rows = 0  # verify rows beyond one per decode (speculative decoding)
        work = 0.0
        chunks = []
        for pos, (req, n) in enumerate(sched[start:] if start else sched, start):
            is_new = pos >= first_new if new is None else req in new
            padded = False
            if is_new:
                self.take_hits(req)  # as earlier entries left the cache
                # an admission with one token left may be padded to 1 + k (vLLM pad_spec_decode)
                padded = n > 1 and n == 1 + self.spec_k and req.num_remaining == 1
                if n > req.num_remaining and not padded:
                    raise RuntimeError(
                        f"policy {self.policy.name} planned {n} tokens for request "
                        f"{req.request_id}, {req.num_remaining} are left after its prefix "
                        "hit: the plan saw another cache than the engine (a bug)")
            c = req.num_computed_tokens
            # request.is_decode(req, is_new), inlined (tests/test_decode_rule.py)
            decode = ((padded or req.kv_carried and not req.num_preemptions) if is_new
                      else req.num_output_tokens > 0
                      and c + 1 == req.spec.prompt_tokens + req.num_output_tokens)
            # every entry also takes its lookahead slots (vLLM allocate_slots)
            g = n + lookahead
            if -(-(c + g) // bs) > req.num_blocks:  # else kv.grow has nothing to do
                kv.grow(req, g)
            if caching and (req.block_keys != () or kv.commit_all):  # (): none shareable
                kv.commit(req, c + 1 if padded else c + n)  # (padding is never cached)
            if decode and n == 1:
                decodes += 1
                kv_sum += c
                if c > kv_max:
                    kv_max = c
            elif decode:
                # a decode verifying n - 1 drafts: one query of n tokens over its context,
                # priced as n decode rows at contexts c .. c + n - 1 (`latency.drafter`)
                extra_rows += n - 1
                decodes += n
                kv_sum += n * c + n * (n - 1) // 2
                if c + n - 1 > kv_max:
                    kv_max = c + n - 1
            else:
                prefill += n
                prefill_reqs += 1
                work += n * (c + (n + 1) / 2)
                chunks.append((n, c))
                if c + n == req.spec.prompt_tokens + req.num_output_tokens:  # num_tokens
                    prefill_logits += 1
            if log is not None:
                kind = ((KIND_RESUMED if req.num_preemptions else KIND_NEW) if is_new
                        else KIND_DECODE if decode else KIND_PREFILL)
                log.add(step, req.request_id, kind, n, pos, c,
                        req.num_cached_tokens if is_new else 0, req.num_blocks)
            if req.first_scheduled_s < 0:
                req.first_scheduled_s = start_s
        prior = max(0.0, work / prefill - (prefill + 1) / 2) if prefill else 0.0
        if self.spec_k:  # the decoding requests and the prompts that sample will draft
            self.drafting = decodes - extra_rows + prefill_logits
        kv_mean = kv_sum / decodes if decodes else 0.0
        return StepShape(prefill, prefill_reqs, prior, decodes, kv_mean, two_pass,
                         tuple(chunks), kv_max, prefill_logits, len(self.running),
                         len(self.waiting), kv.used_blocks)

    def take_hits(self, req: Request) -> None:
        """Admit `req` into the KV cache with its prefix hits (or its carried KV) and
        count them: computed without a step, cached for its record."""
        self.kv.admit(req)
        self.running_computed += req.num_computed_tokens
        self.cached[req.request_id] += req.num_cached_tokens

    def end_step(self, plan: Plan, shape: StepShape, start_s: float, end_s: float,
                 extrapolated: bool = False, duration_s: float | None = None,
                 defer_free: bool = False) -> list[Request]:
        """Advance counters, emit tokens at `end_s`, record the step (its duration is
        `duration_s`, default end - start); retire finished requests (with `defer_free`,
        keep their blocks until `release_finishing`). Returns the requests that sampled a
        token, in batch order."""
        emitted, finished, accepted, given_back = self.advance(plan.scheduled, end_s)
        # every entry computed its scheduled tokens (prefill and decode rows: the shape's
        # two counts), less the drafts it had rejected
        self.running_computed += shape.prefill_tokens + shape.decodes - given_back
        self.steps.append(StepRow(  # (positional, in STEP_COLUMNS' order: no kwargs dict)
            start_s, end_s - start_s if duration_s is None else duration_s,  # start, duration
            shape.prefill_tokens, shape.prefill_requests, shape.prior_tokens,
            shape.decodes, shape.decode_kv_tokens,
            len(emitted) + accepted,  # tokens_emitted
            shape.kv_blocks_used, shape.running, shape.waiting,
            len(plan.preempted), extrapolated))
        self.last_prefill = shape.prefill_tokens > 0
        if finished:
            self.retire(end_s, finished, defer_free)
        return emitted

    def advance(self, scheduled, end_s: float) -> tuple[list[Request], list[Request], int,
                                                         int]:
        """Advance each (request, tokens) entry by its tokens, in batch order: each one
        that has then computed every token it holds samples the next at `end_s` (its
        first, or one after a gap recorded for ITL), and with speculative decoding keeps
        the drafts it verified that are accepted. Returns those that sampled and those
        that sampled their last token (batch order), the drafts accepted and the computed
        tokens the rejected ones give back (`end_step`, `fast_forward.BulkDecoder.mixed_step`)."""
        emitted: list[Request] = []
        finished: list[Request] = []  # those that sampled their last token, batch order
        computed = self.computed
        gaps: list[float] = []  # this step's token gaps, and their requests' classes
        classes: list[int] = []
        k = self.spec_k
        split = self.gaps.split  # (one class: the gaps' classes are not kept)
        accepted = 0  # drafts accepted in this step (speculative decoding)
        given_back = 0  # computed tokens of rejected drafts
        for req, n in scheduled:
            c = req.num_computed_tokens + n
            req.num_computed_tokens = c
            spec = req.spec
            computed[spec.request_id] += n
            out = req.num_output_tokens
            if k and c > spec.prompt_tokens + out:
                # verified drafts (scheduled past the request's own tokens): the first m
                # are accepted, plus the token sampled after them; the rejected ones give
                # back their computed-token count (vLLM: num_computed_tokens -= rejected).
                # A padded admission had no drafts: its placeholders are all rejected and
                # are not drafts in vLLM's metrics (`strip_speculative_padding`)
                given_back += c
                drafts = c - spec.prompt_tokens - req.num_output_tokens
                m = self.acceptance.draw(drafts) if req.num_spec_tokens else 0
                c -= drafts - m
                out = req.num_output_tokens + m
                if out >= spec.output_tokens:  # past max_tokens: dropped (vLLM's stop check)
                    out = spec.output_tokens - 1
                    c = spec.prompt_tokens + out
                req.num_computed_tokens = c
                given_back -= c
                accepted += out - req.num_output_tokens
                req.num_output_tokens = out  # the m accepted; the sampled one follows
            if c == spec.prompt_tokens + out:  # req.num_tokens
                emitted.append(req)
                out += 1
                req.num_output_tokens = out
                if req.first_token_s < 0:
                    req.first_token_s = end_s
                else:
                    gap = end_s - req.last_token_s
                    gaps.append(gap)
                    if split:
                        classes.append(req.class_idx)
                    if gap > req.max_itl_s:
                        req.max_itl_s = gap
                req.last_token_s = end_s
                if out >= spec.output_tokens:
                    finished.append(req)
                elif k:  # the drafter proposes k more, within --max-model-len
                    cap = self.max_model_len
                    req.num_spec_tokens = k if cap is None else max(
                        0, min(k, cap - 1 - req.num_tokens))
        if gaps:
            self.gaps.extend(gaps, classes)
        return emitted, finished, accepted, given_back

    def retire(self, end_s: float, finished: Sequence[Request],
               defer_free: bool = False) -> None:
        """Free and record `finished`: exactly the running requests that have all their
        tokens, in any order (a step's end and a bulk segment know them), found by
        identity and retired in running order (`defer_free`: free later, see
        `finishing`)."""
        running = self.running
        at = sorted(map(running.index, finished))
        done = [running[i] for i in at]
        keep = running.copy()
        for i in reversed(at):
            del keep[i]
        for req in done:  # in running order
            spec = req.spec
            self.work_in -= spec.prompt_tokens + spec.output_tokens - 1
            self.running_computed -= req.num_computed_tokens
            if defer_free:
                self.finishing.append(req)
            else:
                self.kv.free(req)
            self._record(req, end_s)
            if self.on_retire is not None:
                self.on_retire(req, end_s)
        self.running = keep
        self.gaps.maybe_pack()

    def _record(self, req: Request, end_s: float) -> None:
        self.finished += 1
        rid = req.request_id
        self.finish_s[rid] = end_s
        self.first_token_s[rid] = req.first_token_s
        self.first_sched_s[rid] = req.first_scheduled_s
        self.max_itl_s[rid] = req.max_itl_s
        self.preemptions[rid] = req.num_preemptions
        self.outputs[rid] = req.num_output_tokens

    # ------------------------------------------------------------------ results
    def request_frame(self):
        """One row per request, as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.request_columns())

    def request_columns(self) -> dict:
        """One row per request: its columns by name (what `request_frame` holds)."""
        specs = self.workload.requests
        ids = np.arange(len(specs))
        classes, arrival = specs.request_classes(), specs.arrival_s
        prompt, output = specs.prompt_tokens, specs.output_tokens
        rejected = np.zeros(len(specs), dtype=bool)
        rejected[list(self.rejected)] = True
        reason = [""] * len(specs)
        for rid, why in self.rejected.items():
            reason[rid] = why
        return {
            "request_id": ids,
            "request_class": classes,
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "first_scheduled_s": self.first_sched_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "generated_tokens": self.outputs,
            "computed_tokens": np.array(self.computed, dtype=np.int64),
            "recomputed_tokens": self.recomputed,
            "cached_tokens": self.cached,
            "preemptions": self.preemptions,
            "max_itl_s": self.max_itl_s,
            "rejected": rejected,
            "reject_reason": reason,
        }

    def meta(self) -> dict:
        """Run facts that do not depend on the time source."""
        meta = {
            "policy": self.policy.name,
            "policy_params": self.policy.params(),
            "workload": self.workload.name,
            "workload_params": dict(self.workload.params),
            "workload_notes": list(self.workload.notes),
            "kv_blocks": self.kv.num_blocks + NULL_BLOCKS,  # as --kv-blocks: vLLM's count
            "max_model_len": self.max_model_len,
            "rejected_reasons": dict(sorted(self.rejected_kinds.items())),
            "block_size": self.kv.block_size,
            "preemption_only_steps": self.empty_preempt_steps,
            "prefix_caching": self.kv.prefix_caching,
            "prefix_cache_hit_rate": prefix_hit_rate([self.kv]),
            "priority_scheduling": self.queue.name == "priority",
            "waiting_order": self.queue.name,
            **self.spec_meta(),
        }
        if self.offload is not None:
            meta.update(self.offload.meta())
        return meta

    def spec_meta(self) -> dict:
        """Speculative decoding's settings and achieved acceptance (nothing when off)."""
        if self.acceptance is None:
            return {}
        return {"speculative": self.speculative.params(), **self.acceptance.summary()}

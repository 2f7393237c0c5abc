"""The simulator's fast path: a stretch of decode-all steps priced and applied in bulk,
bit-identical to stepping them one by one (tests/test_composed.py,
test_bulk_decode_is_bit_identical_to_stepping, compares with atol=0).

When a plan decodes every running request, nothing waits and nothing is mid-prefill
(`BulkDecoder.steady`), every policy's next plans are the same decode-all steps until a
request finishes, a request arrives or KV runs short. The engine then runs
`BulkDecoder.run`, which prices those steps with the `StepPricer`'s vector path and
applies them with `apply_run`; the requests' own counters are written back in one place,
`DecodeStretch.settle`. The engine owns one `BulkDecoder` and reaches the fast path only
through it; the decoder reaches the engine only through `BulkHost` (when the engine is
busy until, and the SLO watch's turns). Steps right after an idle wait are priced with
their wake-up ratios, as the step path prices them, and record their token gaps one by
one as stepping would, so the pooled gaps keep stepping's order.

A lone engine's stretch, and a fleet replica's read live, carry on through arrivals:
while anything waits or a prompt is mid-prefill, each step is one `mixed_step`, in which
the policy plans what comes after the stretch's decodes, pinned (tests/test_mixed_step.py
checks the records against stepping). A P/D decode instance's stretch takes in requests
that land ready to decode (`join_step`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import simpy

from chunksim.core.plan import Plan, SchedulerState
from chunksim.core.request import Request
from chunksim.sim.engine.pricing import MAX_RUN, StepPricer
from chunksim.sim.engine.pricing import steps as _steps
from chunksim.sim.records.records import StepRow

if TYPE_CHECKING:
    from chunksim.sim.engine.core import EngineCore

MAX_BULK_STEPS = MAX_RUN
"""The longest stretch priced at once (a longer one continues in the next)."""


class DecodeStretch:
    """The running requests of a bulk decode stretch (every one decodes each step): the
    segments between finishes are priced from it (`stretch`) and applied (`apply_run`)
    with a few scalar updates, not a pass over the requests; each request's own counters
    catch up in `settle` (when it finishes or the stretch ends).

    Every request gains one token a step, so the order in which they finish never changes:
    they are held sorted by tokens left (ties in batch order), those still running are
    `first` onwards, and a request's context is its context at the stretch's start plus
    `done`, the steps applied since. The longest context of those running is a suffix
    maximum read by index.

    The phase `q` of a request is the step of the segment (counted from 0) whose token
    opens its next KV block (and every `block_size` steps after): a decoding request holds
    exactly the blocks its context fills, so the growth of the whole batch is periodic
    (`growth`). `phase2[(shift + q) % block_size]` counts the requests of phase `q`, held
    twice over (`phase2[i] == phase2[i + block_size]`) so that any `block_size` phases in
    order are one slice; a segment of k steps only moves `shift` on by k."""

    __slots__ = ("reqs", "ctx", "left", "since", "first", "n", "done", "bs", "computed",
                 "peak_at", "peak", "end", "ctx_sum", "suffix_max", "phase2", "shift", "periodic",
                 "singles")

    def __init__(self, running: list[Request], block_size: int,
                 computed: list[int]) -> None:
        bs = self.bs = block_size
        lefts = [r.spec.output_tokens - r.num_output_tokens for r in running]
        order = sorted(range(len(running)), key=lefts.__getitem__)  # stable
        reqs = self.reqs = [running[i] for i in order]
        ctx = self.ctx = [r.num_computed_tokens for r in reqs]
        self.left = [lefts[i] for i in order]
        self.since = [0] * len(reqs)
        """The step (a `done` count) from which each one's gaps are the batch's: 0, or
        the step after it joined (`insert`)."""
        self.first = 0
        self.n = len(reqs)
        self.done = 0
        self.computed = computed  # the engine's per-request computed-token counts
        acc, suffix = 0, [0] * len(ctx)
        for i in range(len(ctx) - 1, -1, -1):
            acc = ctx[i] if ctx[i] > acc else acc
            suffix[i] = acc
        self.suffix_max = suffix
        self.ctx_sum = sum(ctx)
        self.peak_at: list[int] = []
        self.peak: list[float] = []
        """The largest common gap from step `peak_at[j]` on is `peak[j]` (`note_gaps`)."""
        self.end = -1.0  # end of the last step applied
        phase = [0] * bs
        periodic = True
        for r, c in zip(reqs, ctx, strict=True):
            phase[(-c) % bs] += 1
            if r.num_blocks != -(-c // bs):
                periodic = False
        self.phase2 = np.array(phase + phase, dtype=np.int64)
        self.shift = 0
        self.periodic = periodic
        """Every request holds exactly the blocks its context fills (else `growth` takes
        the general path)."""
        self.singles = 1
        """How many of the next steps record their gaps one by one, as stepping would:
        the stretch's first (each request's gap from its own last token) and the steps of
        a wake-up (`apply_run`)."""

    def running(self) -> list[Request]:
        """The requests still running, sorted by tokens left."""
        return self.reqs[self.first:]

    def steps_left(self) -> int:
        """Steps until the next request has all its tokens."""
        return self.left[self.first] - self.done

    def longest(self) -> int:
        """The longest context of those running."""
        return self.suffix_max[self.first] + self.done

    def contexts(self) -> np.ndarray:
        """The contexts of those running, in `running()` order."""
        return np.array(self.ctx[self.first:], dtype=np.int64) + self.done

    def held(self) -> np.ndarray:
        return np.array([r.num_blocks for r in self.running()], dtype=np.int64)

    def growth(self, k: int) -> np.ndarray:
        """Extra blocks the batch holds during each of its next k steps (cumulative)."""
        if not self.periodic:
            return _block_growth(self.contexts(), self.held(), self.bs, k)
        bs, s = self.bs, self.shift
        if k <= bs:
            return self.phase2[s:s + k].cumsum()
        div, mod = _cycles(bs, k)
        return div * self.n + self.phase2[s:s + bs].cumsum()[mod]

    def opening(self) -> int:
        """How many of those running open a new KV block with the next step."""
        return int(self.phase2[self.shift])

    def _count(self, ctx: int, by: int) -> None:
        """Count a request at context `ctx` now in (by=1) or out (by=-1) of its phase."""
        bs = self.bs
        i = (self.shift - ctx) % bs
        p = self.phase2
        p[i] += by
        p[i + bs] += by

    def advance(self, k: int, end: float) -> None:
        """k decode steps ran, the last ending at `end`."""
        self.done += k
        self.ctx_sum += k * self.n
        self.end = end
        bs = self.bs
        if self.periodic:
            self.shift = (self.shift + k) % bs
        else:  # after a step every request holds exactly what its context fills
            self.periodic = True
            phase = [0] * bs
            d = self.done
            for c in self.ctx[self.first:]:
                phase[(-(c + d)) % bs] += 1
            self.phase2 = np.array(phase + phase, dtype=np.int64)
            self.shift = 0

    def finishing(self) -> int:
        """How many of those running (from `first` on) have all their tokens."""
        left, d, i, end = self.left, self.done, self.first, len(self.left)
        while i < end and left[i] <= d:
            i += 1
        return i - self.first

    def note_gaps(self, step: int, largest: float) -> None:
        """The batch's gaps from step `step` (a `done` count) on, shared by every request
        running then, reach `largest` (kept as a staircase: each entry the largest gap
        from its step on)."""
        at, peak = self.peak_at, self.peak
        while peak and peak[-1] <= largest:
            at.pop()
            peak.pop()
        at.append(step)
        peak.append(largest)

    def largest_gap_since(self, step: int) -> float:
        """The largest of the batch's gaps from step `step` on (0 if none)."""
        j = bisect_left(self.peak_at, step)
        return self.peak[j] if j < len(self.peak) else 0.0

    def settle(self, upto: int | None = None) -> None:
        """Bring the own counters of the running requests before index `upto` (default:
        all, the stretch's end) up to date, and their computed-token counts: the one place
        a stretch writes back to requests. (`EngineCore.running_computed` counts their
        tokens as each segment is applied.)"""
        reqs, ctx, d, computed, since = self.reqs, self.ctx, self.done, self.computed, \
            self.since
        end, bs = self.end, self.bs
        last, largest = -1, 0.0
        for i in range(self.first, len(reqs) if upto is None else upto):
            req = reqs[i]
            c = ctx[i] + d
            gained = c - req.num_computed_tokens
            if not gained:
                continue
            req.num_computed_tokens = c
            req.num_output_tokens += gained
            req.num_blocks = -(-c // bs)
            req.last_token_s = end
            computed[req.spec.request_id] += gained
            if since[i] != last:
                last = since[i]
                largest = self.largest_gap_since(last)
            if largest > req.max_itl_s:
                req.max_itl_s = largest

    def unsettled(self) -> int:
        """Tokens those running computed in the stretch that their own counters do not
        show yet (`settle`)."""
        d = self.done
        return sum(self.ctx[i] + d - self.reqs[i].num_computed_tokens
                   for i in range(self.first, len(self.reqs)))

    def insert(self, req: Request, ctx: int) -> None:
        """Take in `req` between segments (it joined the batch, `join_step`) at context
        `ctx`, which its own counters show, holding exactly the blocks that fill (so the
        growth stays periodic); it finishes after the tokens its counters leave."""
        d = self.done
        left = req.spec.output_tokens - req.num_output_tokens + d
        c = ctx - d  # stored as the others: context at the stretch's start, less `done`
        at = bisect_right(self.left, left, self.first)
        self.reqs.insert(at, req)
        self.ctx.insert(at, c)
        self.left.insert(at, left)
        self.since.insert(at, d)
        suffix = self.suffix_max
        suffix.insert(at, max(c, suffix[at]) if at < len(suffix) else c)
        i = at - 1
        while i >= self.first and suffix[i] < c:
            suffix[i] = c
            i -= 1
        self.n += 1
        self.ctx_sum += ctx
        self._count(ctx, 1)

    def drop(self, m: int, running: list[Request], tail: int = 0) -> None:
        """Forget the first m of those running (they finished); `running` is the engine's
        running list left, the stretch's then `tail` more (`mixed_step`)."""
        d, ctx = self.done, self.ctx
        for i in range(self.first, self.first + m):
            c = ctx[i] + d
            self.ctx_sum -= c
            self._count(c, -1)
        self.first += m
        self.n -= m
        if len(running) - tail != self.n:
            raise RuntimeError("bulk decode: the finished requests are not those retired "
                               "(a bug)")



_CYCLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _cycles(bs: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(j // bs, j % bs) for j = 0 .. k-1, k <= MAX_BULK_STEPS (views of arrays kept per
    block size)."""
    got = _CYCLES.get(bs)
    if got is None:
        got = _CYCLES[bs] = np.divmod(_steps(MAX_BULK_STEPS), bs)
    return got[0][:k], got[1][:k]


def _block_growth(ctx: np.ndarray, held: np.ndarray, block_size: int, k: int) -> np.ndarray:
    """Extra KV blocks the running set holds during decode step j = 1..k (slots for step
    j's token are allocated before it): sum_i max(ceil((ctx_i + j) / bs) - held_i, 0)."""
    j = np.arange(1, k + 1, dtype=np.int64)
    if len(ctx) * k <= 65536:  # small: one broadcast is cheapest
        need = -(-(ctx[:, None] + j) // block_size) - held[:, None]
        return np.maximum(need, 0).sum(axis=0)
    out = np.zeros(k, dtype=np.int64)
    for c, h in zip(ctx.tolist(), held.tolist(), strict=True):
        out += np.maximum(-(-(c + j) // block_size) - h, 0)
    return out





class BulkHost(Protocol):
    """What the bulk path needs of the engine that owns it, and nothing more."""

    busy_until: float
    """End of the step or bulk segment in flight (the decoder sets it for its own)."""

    def stretch_budget(self) -> int:
        """The most steps a stretch may run from here (up to the SLO watch's turn)."""
        ...

    def watch_due(self) -> bool:
        """Whether the SLO watch's turn has come (False: it has none, or not yet)."""
        ...

    def check_watch(self, now: float) -> None:
        """Let the SLO watch check the run at `now` (it may raise `settle.Settled`)."""
        ...


@dataclass(slots=True)
class _Cursor:
    """Where a stretch stands between its steps."""

    t: float
    """End of the last step run (the next one's start)."""
    budget: int
    """Steps the stretch may still run before the watch's turn or its cap."""
    arrival: float | None
    """The next arrival known at the last boundary (a step sees arrivals up to its start)."""
    read: float | None
    """The next time a fleet's router reads the engine (None: nobody does)."""
    first: bool = True
    """No segment or single step has run yet (its first step's gaps are per request)."""

    def stepped(self, end: float) -> None:
        """One step (`join_step`, `mixed_step`) ran, ending at `end`."""
        self.t, self.first = end, False
        self.budget -= 1


_STOP, _SEGMENT, _MIXED, _JOIN = "stop", "segment", "mixed", "join"
"""What a step boundary says (`BulkDecoder._boundary`): end the stretch, run a segment of
decode-all steps, or run one `mixed_step` or `join_step`."""


def fit_kv(grown: np.ndarray, free: int, first: bool, vetted: bool) -> int | None:
    """How many of the next steps fit in `free` blocks, `grown[j-1]` (ascending) the extra
    blocks held during step j: 0 when the next does not fit and this is not a stretch's
    first step; None when it is the first and the policy did not plan it (`vetted`: it
    did, and preempted nothing, so it runs)."""
    k = len(grown)
    if int(grown[k - 1]) <= free:
        return k
    k_kv = int(np.searchsorted(grown, free, side="right"))
    if k_kv == 0:
        # the next step does not fit: the policy must plan it (preempt), unless it
        # planned this very step (a stretch's first, when `vetted`)
        if not first:
            return 0
        if not vetted:
            return None
        k_kv = 1
    return k_kv


def cut_at(times: np.ndarray, k: int, arrival: float | None, read: float | None,
           tie=None) -> int:
    """How many of the k steps starting at `times[:k]` (ending at `times[1:k+1]`) run
    before what ends a segment: at least one before the next `arrival` (a step sees the
    arrivals up to its start), only those that end before a `read` of the engine, or
    before the first end at which `tie(ends)` (a live reader's `Inbox.read_tie`) says a
    read falls. 0: none may run."""
    if arrival is not None and arrival <= times[k - 1]:
        k = max(1, int(times[:k].searchsorted(arrival)))
    if read is not None:  # the steps that end before the read
        return min(k, int(np.searchsorted(times[1 : k + 1], read, side="left")))
    if tie is not None:  # the steps before one that ends exactly at a read
        return min(k, tie(times[1 : k + 1]))
    return k


class BulkDecoder:
    """The engine's fast path: runs decode-all stretches in bulk (`run`) where stepping
    them would give the same records. Owned by one engine (`BulkHost`)."""

    def __init__(self, core: EngineCore, pricer: StepPricer, env: simpy.Environment,
                 host: BulkHost, ahead: bool, live: bool) -> None:
        self.core = core
        self.pricer = pricer
        self.env = env
        self.host = host
        self.ahead = ahead
        """A lone engine's: it runs ahead of the clock (no SimPy event per stretch)."""
        self.live = live
        """Someone reads the engine's state at any moment (`Inbox.live_reads`): a stretch
        runs a segment at a time, each applied at its end."""
        self.joins = live and core.inbox.delivers_decodes()
        """A stretch may take in requests that land ready to decode (P/D, `join_step`)."""
        self.mixes = ahead or (live and not self.joins)
        """A stretch may carry on through prefills, the policy planning the requests
        after its members (`mixed_step`): a lone engine's, and a fleet replica's read live
        (a P/D decode instance takes landings in by `join_step` instead)."""
        self.segment: list | None = None
        """Live reads: [times, steps, requests] of the segment in flight."""
        self.stretch: DecodeStretch | None = None
        """The stretch in flight, None outside one: its requests' own counters catch up
        as they finish or it ends."""

    def steady(self, plan: Plan) -> bool:
        """True if this plan decodes every running request and nothing else can change
        the next plans but a finish, an arrival or KV growth: a stretch may start. (A
        cheap check the engine makes before every step, apart from `run` so that a step
        that is not steady pays no generator.)"""
        c = self.core
        if plan.admitted or plan.preempted or c.waiting or (
                c.offload is not None and c.offload.loads):  # a load lands mid-stretch
            return False
        running = c.running
        if len(plan.scheduled) != len(running) or len(running) == 0:
            return False
        for (req, n), r in zip(plan.scheduled, running, strict=True):
            # a one-token decode of a running request: request.is_decode(req), inlined
            # (tests/test_decode_rule.py); no output yet is a prompt's 1-token tail
            out_tokens = req.num_output_tokens
            if n != 1 or req is not r or out_tokens == 0 or (
                    req.spec.prompt_tokens + out_tokens - req.num_computed_tokens != 1):
                return False
        return True

    def cut(self, now: float) -> bool:
        """A request was delivered at `now` mid-segment (live reads): end the segment
        after the step in flight. True if that cut it (the engine interrupts its wait)."""
        if self.segment is None:
            return False
        times, k, _ = self.segment
        cut = max(1, int(times[:k].searchsorted(now)))
        if cut >= k:
            return False
        self.segment[1] = cut
        self.host.busy_until = float(times[cut])
        return True

    def decoded_by(self, now: float) -> int:
        """Tokens the segment in flight has computed by `now` (its steps that ended),
        which `EngineCore.running_computed` counts only once it ends; 0 outside one."""
        seg = self.segment
        if seg is None:
            return 0
        times, k, n = seg
        return n * int(times[1 : k + 1].searchsorted(now))

    def run(self, now: float, vetted: bool = True):
        """Run decode-all steps from `now` until an arrival is due, KV runs short or the
        stretch's budget is spent; requests finishing on the way leave and the rest decode
        on (each such segment is what stepping one by one would plan, since nothing
        waits). False if nothing ran in bulk (the caller steps instead): a fleet
        replica whose router reads its state ends the stretch before the step that would
        end at or after the next read. `vetted`: the policy planned the first step; else
        the stretch starts only if that step's KV fits (the policy must plan it, and
        preempt).

        Where requests land ready to decode (`joins`, a P/D decode instance), a step
        boundary at which they wait does not end the stretch when the policy would admit
        them all: that step takes them in (`join_step`), and so may the stretch's first.
        On a lone engine or a fleet replica read live (`mixes`) an arrival does not end it
        either: from the next boundary on, while anything waits or runs after the
        stretch's members, each step is a `mixed_step`, until the policy cannot say what
        it plans there. A lone engine's stretch lets the SLO watch check the run when its
        turn comes and goes on; others end at that turn, and any after `MAX_BULK_STEPS`
        steps. (A generator: a lone engine runs ahead of the clock and yields nothing.)"""
        try:
            return (yield from self._run(now, vetted))
        finally:
            self.stretch = None

    def _run(self, now: float, vetted: bool):
        c = self.core
        read = c.inbox.next_read_s()
        if read is not None and read - now < self.pricer.last_s:
            return False  # the first step would likely cross the read: just step
        cur = _Cursor(now, self.host.stretch_budget(), c.next_arrival_s, read)
        st = self.stretch = DecodeStretch(c.running, c.kv.block_size, c.computed)
        pricer = self.pricer
        if pricer.waking:  # stepping ran these and the next alone
            st.singles += pricer.wake_steps - pricer.since_wake
        if c.waiting:  # (the engine starts a stretch with requests waiting only if `joins`)
            end = yield from self.join_step(st, cur.t, True)
            if end is None:
                return False
            cur.stepped(end)
            if not st.n:
                return True
        while True:
            if not cur.first and (self.mixes or self.live):
                said = self._boundary(st, cur)
                if said is _STOP:
                    break
                if said is not _SEGMENT:  # one step that takes in what came
                    end = yield from (self.mixed_step(st, cur.t) if said is _MIXED
                                      else self.join_step(st, cur.t, False))
                    if end is None:
                        break
                    cur.t, cur.first = end, False
                    cur.budget -= 1
                    # it goes on while members are left and the budget lasts (a lone
                    # engine's mixed steps renew it at the watch's turn)
                    if not st.n or (cur.budget <= 0 and (said is _JOIN or self.live)):
                        break
                    continue
            seg = self._segment(st, cur, vetted)
            if seg is None:  # its first step is the policy's to plan
                return False
            if not seg:
                break
            if self.live:  # wait it out, then apply it
                seg[0] = yield from self._wait(seg[1], seg[0], st.n)
                if not self._apply(st, cur, *seg):
                    break
        st.settle()
        if not self.live:
            self.host.busy_until = cur.t
            if not self.ahead:  # to exactly t (now + (t - now) may round: `engine._until`)
                env, t = self.env, cur.t
                while 0.0 < env.now < t / 2:
                    yield env.timeout(env.now)
                yield env.timeout(t - env.now)
        return True

    def _boundary(self, st: DecodeStretch, cur: _Cursor):
        """A step boundary after the first: the SLO watch's turn (a lone engine's), then
        what arrived (or the router sent) by now: while anything waits or runs after the
        members, the policy plans those alone (_MIXED: `mixed_step`), or (P/D) landings
        join (_JOIN: `join_step`); else the next segment is bounded by what comes later
        (_SEGMENT). _STOP: the stretch ends here."""
        c = self.core
        if cur.budget <= 0 and self.mixes and not self.live:
            # the SLO watch's turn (it reads the requests' own counters), unless the
            # stretch reached its cap
            if not self.host.watch_due():
                return _STOP
            st.settle()
            self.host.check_watch(cur.t)
            cur.budget = self.host.stretch_budget()
        c.pull_arrivals(cur.t)
        if self.mixes and (c.waiting or len(c.running) > st.n):
            return _MIXED
        if c.waiting:
            return _JOIN if self.joins else _STOP
        cur.arrival = c.next_arrival_s
        return _SEGMENT

    def _segment(self, st: DecodeStretch, cur: _Cursor, vetted: bool):
        """Price and time the next segment of decode-all steps: up to the next finish,
        the budget, the KV that fits, the next arrival and the next read, and apply it
        (`_apply`: True if the stretch goes on, False if what ran ends it); read live,
        [steps, start times, seconds, mean contexts, blocks grown, flags, steps to the
        next finish], for the caller to wait out and apply. 0 if none runs and the
        stretch ends, None if its first step did not fit unplanned (`fit_kv`) or would
        cross a read (the caller steps instead)."""
        c = self.core
        n, first = st.n, st.first
        k_left = st.left[first] - st.done  # (`steps_left`, `longest`: inlined here)
        k = k_left if k_left < cur.budget else cur.budget
        grown = st.growth(k)  # grown[j-1]: extra blocks in step j
        free = c.kv.free_blocks
        if int(grown[k - 1]) > free:
            k = fit_kv(grown, free, cur.first, vetted)
            if not k:
                return k  # (0: the next step does not fit; None: the policy plans it)
        # the contexts' sums, ctx_sum + j * n, are exact integers: then one division
        kv_mean = np.arange(st.ctx_sum, st.ctx_sum + k * n, n, dtype=np.int64) / n
        # every context grows by one a step: the longest stays the longest
        dur, out = self.pricer.decodes(n, kv_mean, st.suffix_max[first] + st.done,
                                       c.steps.n)
        times = np.concatenate(((cur.t,), dur))
        np.add.accumulate(times, out=times)  # a cumsum: sequential, as stepping adds them
        tie = (lambda ends: c.inbox.read_tie(cur.t, ends)) if self.live else None
        k = cut_at(times, k, cur.arrival, cur.read, tie)
        if k == 0:
            return None if cur.first else 0
        if self.pricer.guard is not None:
            self.pricer.check(k)  # the k steps that run
        if self.live:  # (waited out, then applied, by the caller)
            return [k, times, dur, kv_mean, grown, out, k_left]
        return self._apply(st, cur, k, times, dur, kv_mean, grown, out, k_left)

    def _apply(self, st: DecodeStretch, cur: _Cursor, k: int, times, dur, kv_mean, grown,
               out, k_left: int) -> bool:
        """Apply the k steps of a segment that ran (`apply_run`). True if the stretch goes
        on after it, False if what ran ends it."""
        cur.t = apply_run(self.core, k, times, dur, kv_mean, grown, out, cur.first,
                          retire=k == k_left, st=st)
        pricer = self.pricer
        if pricer.since_wake < pricer.wake_steps:
            pricer.ran(k)
        cur.budget -= k
        if not st.n or (cur.budget <= 0 and not (self.mixes and not self.live)):
            return False
        if not (self.joins or self.mixes) and (
                k < k_left or (cur.arrival is not None and cur.arrival <= cur.t)
                or (cur.read is not None and cur.read <= cur.t)):
            return False  # (else the next boundary takes in what came, or ends it)
        cur.first = False
        return True

    def _wait(self, times: np.ndarray, k: int, n: int):
        """Live reads: wait out a segment of k steps, applied at its end; until then
        readers subtract the steps done (`decoded_by`), and a delivery may cut it short
        (`cut`). Returns the steps that ran."""
        self.segment = seg = [times, k, n]
        self.host.busy_until = float(times[k])
        env = self.env
        while True:
            try:
                yield env.timeout(float(times[seg[1]]) - env.now)
                break
            except simpy.Interrupt:
                continue  # cut: wait for the end of the step in flight
        self.segment = None
        return seg[1]

    def join_step(self, st: DecodeStretch, t: float, first_segment: bool):
        """One decode step of the stretch `st` at `t` that also takes in every waiting
        request, when each landed with its prompt's KV (a P/D decode instance's) and the
        policy would admit them all for the one token that samples their first (its plan
        with the running decodes pinned, `SchedulerState.pinned`): what `EngineCore.begin_step` and
        `end_step` do for that step, in the same order (the running decodes' new blocks,
        then each newcomer's admission, slot and registered blocks), without a pass over
        the running requests.
        Returns the step's end, or None, before anything ran, when the step is not such a
        step: the stretch ends and the policy plans it. On a stretch's first step each
        running request's gap runs from its own last token, as in `apply_run`."""
        c = self.core
        kv = c.kv
        waiting = c.waiting
        pricer = self.pricer
        if (st.singles > first_segment or not st.periodic or c.schedule_log is not None
                or c.offload is not None or pricer.since_wake < pricer.wake_steps):
            return None
        carried = kv.carried
        for req in waiting:
            if (not req.kv_carried or req.num_preemptions or req.request_id not in carried
                    or req.spec.output_tokens < 2):
                return None
        run_blocks = st.opening()  # the running decodes whose token opens a block
        if run_blocks > kv.free_blocks:
            return None  # (the policy preempts)
        plan = c.policy.plan(SchedulerState(c.running, waiting, kv, c.last_prefill,
                                            pinned=st.n, pinned_blocks=run_blocks))
        if (plan.pinned != st.n or plan.preempted or len(plan.admitted) != len(waiting)
                or any(n != 1 for _, n in plan.scheduled)):
            return None
        # admit, as begin_step: the running decodes' blocks first (their own counters
        # catch up as they settle), then each newcomer in queue order
        kv.take(run_blocks)
        news = list(waiting)
        waiting.clear()
        running = c.running
        members = len(running)
        bs, caching = kv.block_size, kv.prefix_caching
        ctx_new = 0
        longest = st.longest() if members else 0
        for req in news:
            running.append(req)
            c.take_hits(req)  # its carried KV
            ctx = req.num_computed_tokens
            if -(-(ctx + 1) // bs) > req.num_blocks:
                kv.grow(req, 1)
            if caching and req.block_keys != ():
                kv.commit(req, ctx + 1)
            if req.first_scheduled_s < 0:
                req.first_scheduled_s = t
            ctx_new += ctx
            if ctx > longest:
                longest = ctx
        # price it as the step path would: every row a decode, the newcomers' at their
        # carried context
        n = members + len(news)
        kv_mean = np.array([(st.ctx_sum + ctx_new) / n])
        dur, out = self.pricer.decodes(n, kv_mean, longest, c.steps.n)
        self.pricer.check(1)
        step_s = float(dur[0])
        end = t + step_s
        times = np.array([t, end])
        self.segment = [times, 1, n]  # readers see its tokens once it ends (`decoded_by`)
        self.host.busy_until = end
        yield self.env.timeout(step_s)  # (a delivery cannot cut a one-step segment)
        self.segment = None
        self.pricer.ran(1)
        # apply, as end_step: the members' gaps (a stretch's first: each from its own last
        # token, one by one in batch order), the newcomers' first tokens
        if first_segment:
            add = c.gaps.add
            for req in running[:members]:
                g0 = end - req.last_token_s
                add(g0, req.class_idx)
                if g0 > req.max_itl_s:
                    req.max_itl_s = g0
            st.singles -= 1
        else:
            gap = times[1:] - times[:1]
            c.gaps.add_run(gap, st.running() if c.gaps.split else members)
            st.note_gaps(st.done, float(gap[0]))
        computed = c.computed
        for req in news:
            req.num_computed_tokens += 1
            computed[req.request_id] += 1
            req.num_output_tokens = 1
            req.first_token_s = req.last_token_s = end
        c.running_computed += n
        c.steps.extend_decodes(times[:1], dur, n, kv_mean,
                               np.array([kv.num_blocks - kv.free_blocks]), out)
        c.last_prefill = False
        st.advance(1, end)
        for req in news:
            st.insert(req, req.num_computed_tokens)
        m = st.finishing()
        if m:
            st.settle(st.first + m)
            c.retire(end, st.reqs[st.first : st.first + m])
            st.drop(m, c.running)
        return end

    def mixed_step(self, st: DecodeStretch, t: float):
        """One step of the stretch `st` at `t` in which the running requests after its
        members (the tail: prompts mid-prefill, and decodes not yet taken in) and the
        waiting ones get what the policy plans for them with the members pinned
        (`SchedulerState.pinned`), when it schedules every member: what `EngineCore.plan`,
        `begin_step`, `Engine._step` and `end_step` do for that step, in the same order
        and with the same float operations, with no pass over the members. The tail's
        requests that sampled in it, from its head on while they decode, join the stretch
        (`DecodeStretch.insert`).
        Returns the step's end, or None, before anything ran, when the policy cannot say
        or the step is not such a step (a wake-up, a schedule log, an offload tier): the
        stretch ends and the policy plans. (A generator: a lone engine runs ahead of the
        clock and the step yields nothing; a fleet replica read live waits out the step,
        as `Engine._step` does, between its admissions and its tokens.)"""
        c = self.core
        kv = c.kv
        pricer = self.pricer
        if (st.singles or not st.periodic or c.schedule_log is not None
                or c.offload is not None or pricer.since_wake < pricer.wake_steps):
            return None
        running = c.running
        members = st.n
        run_blocks = st.opening()  # the members whose token opens a block
        if run_blocks > kv.free_blocks:
            return None  # (the policy preempts)
        plan = c.policy.plan(SchedulerState(c.running, c.waiting, kv, c.last_prefill,
                                            pinned=members, pinned_blocks=run_blocks))
        if plan.pinned != members or plan.preempted:
            return None
        # begin_step: admissions leave the queue for the running list, the members' new
        # blocks come first (their own counters catch up as they settle), then each entry
        # in batch order takes its hits, its slots and registers the blocks they fill
        if plan.admitted:
            c.admit(plan.admitted)
        n_tail = len(running) - members
        kv.take(run_blocks)
        sched = plan.scheduled
        shape = c.take_slots(sched, 0, len(sched) - len(plan.admitted), None, t,
                             plan.two_pass, members, st.ctx_sum,
                             st.longest() if members else 0)
        dur, out = self.pricer.step(shape, c.steps.n, members + len(sched))
        end = self.host.busy_until = t + dur
        if self.live:  # readers see its tokens once it ends (`decoded_by`)
            self.segment = [np.array([t, end]), 1, members]
            yield self.env.timeout(dur)  # (a delivery cannot cut a one-step segment)
            self.segment = None
        # end_step: the members' tokens (one gap each, shared), then the tail's in batch
        # order
        if members:
            gap = np.array([end - t])
            c.gaps.add_run(gap, st.running() if c.gaps.split else members)
            st.note_gaps(st.done, float(gap[0]))
        emitted, done, _, _ = c.advance(sched, end)  # (no drafts: the bulk path is off)
        sampled = {id(req) for req in emitted}
        # every entry computed its tokens
        c.running_computed += shape.prefill_tokens + shape.decodes
        c.steps.append(StepRow(  # (positional, in STEP_COLUMNS' order: no kwargs dict)
            t, dur, shape.prefill_tokens, shape.prefill_requests, shape.prior_tokens,
            shape.decodes, shape.decode_kv_tokens,
            members + len(emitted),  # tokens_emitted
            shape.kv_blocks_used, shape.running, shape.waiting,
            0, out))  # preempted, extrapolated
        c.last_prefill = shape.prefill_tokens > 0
        st.advance(1, end)
        m = st.finishing()
        if m:
            st.settle(st.first + m)
            done = st.reqs[st.first : st.first + m] + done
        if done:
            c.retire(end, done)  # (in running order, whoever finished)
            running = c.running
            if m:
                st.drop(m, running, tail=n_tail - (len(done) - m))
        # the tail's head joins the stretch while it decodes from here on: it sampled
        # now, holding exactly the blocks its context fills (so the growth stays periodic)
        while len(running) > st.n:
            req = running[st.n]
            ctx = req.num_computed_tokens
            if id(req) not in sampled or req.num_blocks != -(-ctx // kv.block_size):
                break
            st.insert(req, ctx)
        return end


def apply_run(core: EngineCore, k: int, times, dur, kv_mean, grown, out,
              first_segment: bool, retire: bool, st: DecodeStretch) -> float:
    """Apply k decode-all plans at once (the simulator's bulk path): every running
    request computes and samples k tokens. Step j starts at `times[j]` and ends at
    `times[j + 1]`, lasting `dur[j]`, with mean context `kv_mean[j]`; `grown[j]` extra
    blocks are held by then and `out[j]` says it was priced outside the table. On the
    first segment of a stretch each request's first gap runs from its own last token.
    Retires finished requests when `retire`. Returns the end time.

    Within the stretch `st` (the engine's segments between finishes) the counters
    advance in its arrays; a request's own fields are brought up to date when it
    finishes or the stretch ends (`DecodeStretch.settle`)."""
    n = st.n
    end = float(times[k])
    if core.schedule_log is not None:  # in batch order, from the requests' own counters
        st.settle()
        reqs = core.running
        ctx = np.array([r.num_computed_tokens for r in reqs], dtype=np.int64)
        held = np.array([r.num_blocks for r in reqs], dtype=np.int64)
        computed = ctx[:, None] + np.arange(k, dtype=np.int64)
        blocks = np.maximum(held[:, None], -(-(computed + 1) // core.kv.block_size))
        ids = np.array([r.request_id for r in reqs], dtype=np.int64)
        core.schedule_log.add_decodes(core.steps.n, ids, computed, blocks)
    # gaps between consecutive ends (the first segment's first gap is per request)
    gaps = times[2 : k + 1] - times[1:k] if first_segment else times[1 : k + 1] - times[:k]
    if k > 1 or not first_segment:
        st.note_gaps(st.done + first_segment, float(gaps.max()))
    if first_segment:  # the first step's gap depends on each one's last token
        e0 = float(times[1])
        add = core.gaps.add
        for req in core.running:  # (in batch order)
            g0 = e0 - req.last_token_s
            add(g0, req.class_idx)
            if g0 > req.max_itl_s:
                req.max_itl_s = g0
    # the steps that stepping would record one by one (`DecodeStretch.singles`): their
    # gaps as single values, per step in batch order, so the pooled gaps keep its order
    ones = k if k < st.singles else st.singles
    st.singles -= ones
    if first_segment:
        ones -= 1  # its first step's gaps are those recorded just above
    if ones > 0:
        classes = [r.class_idx for r in core.running]
        for g in gaps[:ones].tolist():
            core.gaps.extend([g] * len(classes), classes)
        gaps = gaps[ones:]
    # (the computed-token counts catch up in `settle`; no kv.commit: blocks filled by
    # decodes are never shareable, see PrefixKVCache)
    if len(gaps):
        core.gaps.add_run(gaps, st.running() if core.gaps.split else n)
    kv = core.kv
    used_before = kv.num_blocks - kv.free_blocks
    kv.take(int(grown[k - 1]))
    core.steps.extend_decodes(times[:k], dur[:k], n, kv_mean[:k], used_before + grown[:k],
                              out[:k])
    core.last_prefill = False
    st.advance(k, end)
    core.running_computed += n * k  # every one of them computed k tokens
    if retire:
        m = st.finishing()
        st.settle(st.first + m)
        # the first m of those running (sorted by tokens left) are exactly the finished
        core.retire(end, st.reqs[st.first : st.first + m])
        st.drop(m, core.running)
    return end

"""The simulator's fast path: a stretch of decode-all steps priced and applied in bulk,
bit-identical to stepping them one by one (tests/test_composed.py,
test_bulk_decode_is_bit_identical_to_stepping, compares with atol=0).

When a plan decodes every running request, nothing waits and nothing is mid-prefill
(`steady`), every policy's next plans are the same decode-all steps until a request
finishes, a request arrives or KV runs short. The engine then calls `stretch`, which prices
those steps with the latency model's vector path and applies them with `apply_run`; the
requests' own counters are written back in one place, `DecodeStretch.settle`. Nothing
else in the simulator knows the fast path exists. Steps right after an idle wait are
priced with their wake-up ratios, as the step path prices them, and record their token
gaps one by one as stepping would, so the pooled gaps keep stepping's order.

A lone engine's stretch, and a fleet replica's read live, carry on through arrivals:
while anything waits or a prompt is mid-prefill, each step is one `mixed_step`, in which
the policy plans only what comes after the stretch's decodes (`Policy.tail_plan`), and a
prompt that samples its first token joins the stretch (tests/test_mixed_step.py checks
the records against stepping).
A P/D decode instance's stretch takes in requests that land ready to decode
(`join_step`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np
import simpy

from chunksim.core.ledger import KVLedger
from chunksim.core.plan import Plan
from chunksim.core.request import Request
from chunksim.sim.records import StepRow

if TYPE_CHECKING:
    from chunksim.sim.core import EngineCore
    from chunksim.sim.engine import Engine

MAX_BULK_STEPS = 65536
"""The longest stretch priced at once (a longer one continues in the next)."""
_STEPS = np.arange(MAX_BULK_STEPS, dtype=np.int64)


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

    `phase[q]` counts the requests whose next new KV block comes with the segment's step q
    (every `block_size` steps after): a decoding request holds exactly the blocks its
    context fills, so the growth of the whole batch is periodic (`growth`)."""

    __slots__ = ("reqs", "ctx", "left", "since", "first", "n", "done", "bs", "computed",
                 "peak_at", "peak", "end", "ctx_sum", "suffix_max", "phase", "periodic",
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
        self.phase = phase
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
        bs, n = self.bs, self.n
        prefix = list(accumulate(self.phase))
        if k <= bs:
            return np.array(prefix[:k], dtype=np.int64)
        div, mod = _cycles(bs, k)
        return div * n + np.array(prefix, dtype=np.int64)[mod]

    def advance(self, k: int, end: float) -> None:
        """k decode steps ran, the last ending at `end`."""
        self.done += k
        self.ctx_sum += k * self.n
        self.end = end
        bs = self.bs
        if self.periodic:
            r = k % bs
            if r:
                self.phase = self.phase[r:] + self.phase[:r]
        else:  # after a step every request holds exactly what its context fills
            self.periodic = True
            phase = [0] * bs
            d = self.done
            for c in self.ctx[self.first:]:
                phase[(-(c + d)) % bs] += 1
            self.phase = phase

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
        self.phase[(-ctx) % self.bs] += 1

    def drop(self, m: int, running: list[Request], tail: int = 0) -> None:
        """Forget the first m of those running (they finished); `running` is the engine's
        running list left, the stretch's then `tail` more (`mixed_step`)."""
        bs, d, ctx = self.bs, self.done, self.ctx
        for i in range(self.first, self.first + m):
            c = ctx[i] + d
            self.ctx_sum -= c
            self.phase[(-c) % bs] -= 1
        self.first += m
        self.n -= m
        if len(running) - tail != self.n:
            raise RuntimeError("bulk decode: the finished requests are not those retired "
                               "(a bug)")


def _steps(k: int) -> np.ndarray:
    """0, 1, ..., k-1 (a view when it can be)."""
    return _STEPS[:k] if k <= len(_STEPS) else np.arange(k, dtype=np.int64)


_CYCLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _cycles(bs: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(j // bs, j % bs) for j = 0 .. k-1, k <= MAX_BULK_STEPS (views of arrays kept per
    block size)."""
    got = _CYCLES.get(bs)
    if got is None:
        got = _CYCLES[bs] = np.divmod(_STEPS, bs)
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


def steady(core: EngineCore, plan: Plan) -> bool:
    """True if this plan decodes every running request and nothing else can change the
    next plans but a finish, an arrival or KV growth: a stretch may start. (A cheap check
    the engine makes before every step, apart from `stretch` so that a step that is not
    steady pays no generator.)"""
    c = core
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


def stretch(engine: Engine, env: simpy.Environment, now: float, vetted: bool = True):
    """Run decode-all steps until an arrival is due, KV runs short or the stretch cap is
    hit; requests finishing on the way leave and the rest decode on (each such segment
    is what stepping one by one would plan, since nothing waits). Prices and times the
    steps here; `apply_run` applies them. A fleet replica whose router
    reads its state ends the stretch before the step that would end at or after the
    next read; False if that left nothing to run in bulk (the caller steps instead).
    `vetted`: the policy planned the first step; else the stretch starts only if that
    step's KV fits (False otherwise: the policy must plan it, and preempt).

    Where requests land ready to decode (`Engine.joins`, a P/D decode instance), a step
    boundary at which they wait does not end the stretch when the policy would admit
    them all: that step takes them in (`join_step`), and so may the stretch's first.
    On a lone engine or a fleet replica read live (`Engine.mixes`) an arrival does not
    end it either: from the next boundary on, while anything waits or runs after the
    stretch's members, each step is a `mixed_step`, until the policy cannot say what it
    plans there. A lone engine's stretch lets the SLO watch check the run when its turn
    comes (`Engine.check_watch`) and goes on; others end at that turn, and any after
    `MAX_BULK_STEPS` steps."""
    try:
        return (yield from _stretch(engine, env, now, vetted))
    finally:
        engine.stretch = None


def _stretch(engine: Engine, env: simpy.Environment, now: float, vetted: bool):
    c = engine.core
    t = now
    arrival = c.next_arrival_s
    read = c.inbox.next_read_s()
    if read is not None and read - now < engine.step_s:
        return False  # the first step would likely cross the read: just step
    first_segment = True
    budget = engine.stretch_budget()
    st = engine.stretch = DecodeStretch(c.running, c.kv.block_size, c.computed)
    if engine.since_wake < engine.wake_steps:  # stepping ran these and the next alone
        st.singles += engine.wake_steps - engine.since_wake
    latency = engine.latency
    live = engine.live
    joins = engine.joins
    spread = latency.prices_spread
    overhead = latency.overhead(st.n)
    if c.waiting:  # (the engine starts a stretch with requests waiting only if `joins`)
        end = yield from join_step(engine, env, st, t, True)
        if end is None:
            return False
        t, first_segment = end, False
        budget -= 1
        if not st.n:
            return True
    mixes = engine.mixes
    lone_mix = mixes and not live
    while True:
        if (lone_mix or live) and not first_segment:
            if lone_mix and budget <= 0:
                # the SLO watch's turn (it reads the requests' own counters), unless the
                # stretch reached its cap
                if engine.watch is None or c.steps.n < engine.check_at:
                    break
                st.settle()
                engine.check_watch(t)
                budget = engine.stretch_budget()
            # a step boundary: take what arrived (or the router sent) by now; while
            # anything waits or runs after the members, the policy plans those alone
            # (`mixed_step`), or (P/D) landings join; else bound the next segment by what
            # comes later
            c.pull_arrivals(t)
            if mixes and (c.waiting or len(c.running) > st.n):
                end = yield from mixed_step(engine, env, st, t)
                if end is None:
                    break
                t = end
                budget -= 1
                if not st.n or (budget <= 0 and not lone_mix):
                    break
                continue
            if c.waiting:
                end = (yield from join_step(engine, env, st, t, False)) if joins else None
                if end is None:
                    break
                t = end
                budget -= 1
                if budget <= 0 or not st.n:
                    break
                continue
            arrival = c.next_arrival_s
        n = st.n
        k_left = st.steps_left()
        k = min(k_left, budget)
        grown = st.growth(k)  # grown[j-1]: extra blocks in step j
        free = c.kv.free_blocks
        if int(grown[k - 1]) > free:
            k_kv = int(np.searchsorted(grown, free, side="right"))
            if k_kv == 0:
                # the next step does not fit: the policy must plan it (preempt), unless
                # it planned this very step (a stretch's first, when `vetted`)
                if not first_segment:
                    break
                if not vetted:
                    return False
                k_kv = 1
            k = k_kv
        steps = _steps(k)
        # the contexts' sums, ctx_sum + j * n, are exact integers: then one division
        kv_mean = np.arange(st.ctx_sum, st.ctx_sum + k * n, n, dtype=np.int64) / n
        z = engine.noise.range(c.steps.n, k) if engine.noise is not None else None
        if spread:
            # every context grows by one a step: the longest stays the longest
            kv_max = steps + float(st.longest())  # exact: float64 integers
            dur, out = latency.decode_steps_s(n, kv_mean, z, kv_max, stepwise=True)
        else:
            dur, out = latency.decode_steps_s(n, kv_mean, z, stepwise=True)
        fwd = dur
        if not first_segment:
            overhead = latency.overhead(n)
        if overhead:
            dur = dur + overhead  # the same float op as the step-by-step path
        woken = engine.since_wake
        if woken < engine.wake_steps:  # steps right after an idle wait: as `_step`
            dur = dur.copy() if dur is fwd else dur
            wake = latency.wake_ratio
            for i in range(min(k, engine.wake_steps - woken)):
                dur[i] = float(dur[i]) * wake(engine.idle_s, woken + i)
        times = np.concatenate(((t,), dur))
        np.add.accumulate(times, out=times)  # a cumsum: sequential, as step-by-step
        if arrival is not None and arrival <= times[k - 1]:
            # a step sees arrivals up to its start time
            k = max(1, int(times[:k].searchsorted(arrival)))
        if read is not None:  # the steps that end before the read
            k_read = int(np.searchsorted(times[1 : k + 1], read, side="left"))
            if k_read == 0:
                if first_segment:
                    return False
                break
            k = min(k, k_read)
        elif live:  # the steps before one that ends exactly at a read
            k_tie = c.inbox.read_tie(t, times[1 : k + 1])
            if k_tie == 0:
                if first_segment:
                    return False
                break
            k = min(k, k_tie)
        if z is not None and engine.guard is not None:  # the k steps that run
            sp = (kv_max[:k],) if spread else ()
            median, _ = latency.decode_steps_s(n, kv_mean[:k], None, *sp, stepwise=True)
            engine.guard.check_run(c.steps.n, fwd[:k], median, z[:k])
        if live:
            # applied at its end; until then readers subtract the steps done, and a
            # delivery may cut it short (`wake_up`)
            engine.segment = seg = [times, k, n]
            engine.busy_until = float(times[k])
            while True:
                try:
                    yield env.timeout(float(times[seg[1]]) - env.now)
                    break
                except simpy.Interrupt:
                    continue  # cut: wait for the end of the step in flight
            engine.segment = None
            k = seg[1]
        t = apply_run(c, k, times, dur, kv_mean, grown, out, first_segment,
                      retire=k == k_left, st=st)
        if woken < engine.wake_steps:
            engine.since_wake = min(engine.wake_steps, woken + k)
        budget -= k
        if not st.n or (budget <= 0 and not lone_mix):
            break
        if not (joins or mixes) and (k < k_left or (arrival is not None and arrival <= t)
                                     or (read is not None and read <= t)):
            break  # (else the next boundary takes in what came, or ends it)
        first_segment = False
    st.settle()
    if not live:
        engine.busy_until = t
        if not engine.ahead:  # to exactly t (now + (t - now) may round: `engine._until`)
            while 0.0 < env.now < t / 2:
                yield env.timeout(env.now)
            yield env.timeout(t - env.now)
    return True


def join_step(engine: Engine, env: simpy.Environment, st: DecodeStretch, t: float,
              first_segment: bool):
    """One decode step of the stretch `st` at `t` that also takes in every waiting
    request, when each landed with its prompt's KV (a P/D decode instance's) and the
    policy would admit them all for the one token that samples their first
    (`Policy.admits_decodes`): what `EngineCore.begin_step` and `end_step` do for that
    step, in the same order (the running decodes' new blocks, then each newcomer's
    admission, slot and registered blocks), without a pass over the running requests.
    Returns the step's end, or None, before anything ran, when the step is not such a
    step: the stretch ends and the policy plans it. On a stretch's first step each
    running request's gap runs from its own last token, as in `apply_run`."""
    c = engine.core
    kv = c.kv
    waiting = c.waiting
    if (st.singles > first_segment or not st.periodic or c.schedule_log is not None
            or c.offload is not None or engine.since_wake < engine.wake_steps):
        return None
    carried = kv.carried
    for req in waiting:
        if (not req.kv_carried or req.num_preemptions or req.request_id not in carried
                or req.spec.output_tokens < 2):
            return None
    run_blocks = st.phase[0]  # the running decodes whose token opens a block
    if run_blocks > kv.free_blocks:
        return None  # (the policy preempts)
    ledger = KVLedger(kv)
    ledger.take_decodes(run_blocks)
    if not c.policy.admits_decodes(st.n, waiting, ledger):
        return None
    # admit, as begin_step: the running decodes' blocks first (their own counters catch
    # up as they settle), then each newcomer in queue order
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
    latency = engine.latency
    z = engine.noise.range(c.steps.n, 1) if engine.noise is not None else None
    sp = (np.array([float(longest)]),) if latency.prices_spread else ()
    fwd, out = latency.decode_steps_s(n, kv_mean, z, *sp, stepwise=True)
    if z is not None and engine.guard is not None:
        median, _ = latency.decode_steps_s(n, kv_mean, None, *sp, stepwise=True)
        engine.guard.check_run(c.steps.n, fwd, median, z)
    overhead = latency.overhead(n)
    dur = fwd + overhead if overhead else fwd  # the step path's float ops
    step_s = float(dur[0])
    end = t + step_s
    times = np.array([t, end])
    engine.segment = [times, 1, n]  # readers see its tokens once it ends (`decoded_by`)
    engine.busy_until = end
    yield env.timeout(step_s)  # (a delivery cannot cut a one-step segment)
    engine.segment = None
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


def mixed_step(engine: Engine, env: simpy.Environment, st: DecodeStretch, t: float):
    """One step of the stretch `st` at `t` in which the running requests after its
    members (the tail: prompts mid-prefill, and decodes not yet taken in) and the waiting
    ones get what the policy would plan for them (`Policy.tail_plan`) while every member
    decodes: what `EngineCore.plan`, `begin_step`, `Engine._step` and `end_step` do for
    that step, in the same order and with the same float operations, with a pass over
    the tail only. The tail's requests that sampled in it, from its head on while they
    decode, join the stretch (`DecodeStretch.insert`). Returns the step's end, or None,
    before anything ran, when the policy cannot say or the step is not such a step (a
    wake-up, a schedule log, an offload tier): the stretch ends and the policy plans.
    (A generator: a lone engine runs ahead of the clock and the step yields nothing; a
    fleet replica read live waits out the step, as `Engine._step` does, between its
    admissions and its tokens.)"""
    c = engine.core
    kv = c.kv
    if (st.singles or not st.periodic or c.schedule_log is not None or c.offload is not None
            or engine.since_wake < engine.wake_steps):
        return None
    running, waiting = c.running, c.waiting
    members = st.n
    tail = running[members:]
    run_blocks = st.phase[0]  # the members whose token opens a block
    if run_blocks > kv.free_blocks:
        return None  # (the policy preempts)
    ledger = KVLedger(kv)
    ledger.take_decodes(run_blocks)
    plan = c.policy.tail_plan(members, tail, waiting, ledger)
    if plan is None:
        return None
    # begin_step: admissions leave the queue for the running list, the members' new
    # blocks come first (their own counters catch up as they settle), then each entry
    # in batch order takes its hits, its slots and registers the blocks they fill
    c.admit(plan.admitted)
    n_tail = len(running) - members
    kv.take(run_blocks)
    sched = plan.scheduled
    shape = c.take_slots(sched, 0, len(sched) - len(plan.admitted), None, t, plan.two_pass,
                         members, st.ctx_sum, st.longest() if members else 0)
    # Engine._step: price it
    latency = engine.latency
    z = engine.noise.at(c.steps.n) if engine.noise is not None else None
    dur, out = 0.0, False
    for b in shape.batch_shapes():
        s, o = latency.step_s(b, z)
        if z is not None and engine.guard is not None:
            engine.guard.check(c.steps.n, s, latency.step_s(b, None)[0], z)
        dur += s
        out = out or o
    dur += latency.overhead(members + len(sched))
    end = engine.busy_until = t + dur
    engine.step_s = dur
    if engine.live:  # readers see its tokens once it ends (`Engine.decoded_by`)
        engine.segment = [np.array([t, end]), 1, members]
        yield env.timeout(dur)  # (a delivery cannot cut a one-step segment)
        engine.segment = None
    # end_step: the members' tokens (one gap each, shared), then the tail's in batch order
    if members:
        gap = np.array([end - t])
        c.gaps.add_run(gap, st.running() if c.gaps.split else members)
        st.note_gaps(st.done, float(gap[0]))
    emitted, done, _, _ = c.advance(sched, end)  # (no drafts: the bulk path is off)
    sampled = {id(req) for req in emitted}
    # every entry computed its tokens
    c.running_computed += shape.prefill_tokens + shape.decodes
    c.steps.append(StepRow(
        start_s=t, duration_s=dur, prefill_tokens=shape.prefill_tokens,
        prefill_requests=shape.prefill_requests, prior_tokens=shape.prior_tokens,
        decodes=shape.decodes, decode_kv_tokens=shape.decode_kv_tokens,
        tokens_emitted=members + len(emitted), kv_blocks_used=shape.kv_blocks_used,
        running=shape.running,
        waiting=shape.waiting, preempted=0, extrapolated=out))
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
    # the tail's head joins the stretch while it decodes from here on: it sampled now,
    # holding exactly the blocks its context fills (so the growth stays periodic)
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
    ones = min(k, st.singles)
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

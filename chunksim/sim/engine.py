"""The SimPy engine: the only code that touches simulated time. Request state and records
live in `core.EngineCore`, shared with the live serving loop.

Two processes: arrivals (moves requests into the waiting queue at their arrival times and
wakes an idle engine) and the engine (plan -> latency -> timeout -> apply, one step at a
time). Hot-path design: when a plan decodes every running request, nothing waits and
nothing is mid-prefill, every policy's next plans are the same decode-all steps until a
request finishes, a request arrives or KV runs short; the engine then runs that stretch
in one vectorized bulk (`fast_forward`), bit-identical to stepping it one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from chunksim.core.knobs import knob
from chunksim.core.kv_cache import KVConfig
from chunksim.core.plan import Plan, Policy
from chunksim.core.spec import Workload
from chunksim.latency.base import StepCosts
from chunksim.sim.core import EngineCore, Inbox
from chunksim.sim.records import StepLog
from chunksim.sim.spread_guard import SpreadGuard

_NOISE_BLOCK = 4096
_MAX_BULK_STEPS = 65536
PROGRESS_EVERY_STEPS = 4096
"""How often (in engine iterations) a run reports its progress, when asked to."""


_E = "Engine and KV cache"


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs that are not the policy's."""

    jitter: bool = knob(False, "--jitter/--no-jitter", panel=_E)
    """Sample each step's time from the profile's measured spread (seeded by --seed)."""
    seed: int = 0
    """Seed of the step-time jitter (the workload's --seed)."""
    fast_forward: bool = knob(True, "--fast-forward/--no-fast-forward", panel=_E, hidden=True)
    """Bulk-simulate steady decode stretches (same results)."""
    max_model_len: int | None = knob(None, "--max-model-len", panel=_E, min=2)
    """Reject requests with prompt + output above this, as vLLM does (default: the profile
    model's maximum position; no cap when the profile does not record it)."""
    async_scheduling: bool = knob(False, "--async-scheduling", panel=_E)
    """vLLM V1's --async-scheduling (0.10+): the scheduler plans step N+1 while step N runs.
    The host work of a step (the per-step overhead) then hides behind the previous forward
    pass (a step lasts the longer of the two, not their sum); the plan sees the arrivals up
    to step N's start and the state after step N's scheduled tokens (a request whose last
    prompt chunk is in step N decodes in N+1, on a placeholder token); requests finishing in
    step N are not scheduled again but hold their seats and KV blocks until N's output is
    processed. Runs step by step (no bulk decode)."""
    wake_up: bool = knob(True, "--wake-up/--no-wake-up", panel=_E)
    """Price the first steps after the engine idled by the profile's measured wake-up cost
    (cold cores and caches, lower GPU clocks; profiles without a wake-up table are priced
    warm)."""

    def __post_init__(self) -> None:
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len={self.max_model_len} must be >= 2 (--max-model-len)")


@dataclass
class SimResult:
    """Everything a run produced: flat records plus what is needed to summarize them."""

    requests: object
    """pandas DataFrame, one row per request (see `EngineCore.request_frame`)."""
    steps: object
    """pandas DataFrame, one row per step (records.STEP_COLUMNS)."""
    itl_s: np.ndarray
    """Pooled gaps between consecutive output tokens of each request, seconds: an array,
    or past records.EXACT_GAP_SAMPLES a `quantiles.LogHistogram` (`metrics` reads both)."""
    meta: dict = field(default_factory=dict)
    """Run facts: policy, params, profile hash, workload, counters."""
    itl_by_class_s: dict = field(default_factory=dict)
    """Pooled token gaps per request class, seconds (only when there are several)."""
    schedule: object = None
    """pandas DataFrame, one row per (step, request) and per preemption
    (records.SCHEDULE_COLUMNS), when the run was asked for its schedule log; else None."""
    rejected_examples: dict = field(default_factory=dict)
    """The first rejected request's reason per kind of rejection (`EngineCore.rejection`)."""
    step_totals: object = None
    """records.StepTotals of every step (what the summary needs), whatever `steps` kept;
    None when `steps` holds every step (fleets)."""


class _Noise:
    """Standard normals addressed by step index (same value whichever path runs a step)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.blocks: list[np.ndarray] = []

    def _upto(self, i: int) -> None:
        while len(self.blocks) * _NOISE_BLOCK <= i:
            self.blocks.append(self.rng.standard_normal(_NOISE_BLOCK))

    def at(self, i: int) -> float:
        self._upto(i)
        return float(self.blocks[i // _NOISE_BLOCK][i % _NOISE_BLOCK])

    def range(self, i: int, k: int) -> np.ndarray:
        self._upto(i + k)
        return np.concatenate(self.blocks)[i : i + k]


class Engine:
    """Replays a workload through a policy on a latency model and a paged KV cache."""

    def __init__(self, workload: Workload, policy: Policy, latency: StepCosts,
                 kv: KVConfig, config: EngineConfig | None = None,
                 schedule_log: bool = False, spread_guard: SpreadGuard | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 step_log: Callable[[], StepLog] | None = None) -> None:
        self.workload = workload
        self.policy = policy
        self.latency = latency
        self.kv_config = kv
        self.config = config or EngineConfig()
        self.schedule_log = schedule_log
        self.guard = spread_guard
        """Checks every jittered step against its median (None: unchecked)."""
        self.progress = progress
        """Called as progress(requests done, requests) now and then, and at the end;
        with `sim_s=` the simulated time too when it takes that keyword."""
        self.progress_clock = progress is not None and _takes_sim_s(progress)
        self.step_log = step_log
        """Makes the run's StepLog (default: keep every step in memory)."""

    def run(self) -> SimResult:
        """Simulate the whole workload; every request finishes or is reported rejected."""
        env = simpy.Environment()
        self.start(env)
        env.run()
        if self.progress is not None:
            n = len(self.workload.requests)
            self.progress(n, n)
        return self.result()

    def start(self, env: simpy.Environment, inbox: Inbox | None = None,
              noise_key: int | None = None) -> None:
        """Start this engine's processes on `env`. A fleet runs several engines on one
        environment, each fed by its router through `inbox` (and waking it through
        `wake_up`); `noise_key` gives each replica its own jitter stream."""
        self.core = EngineCore(self.workload, self.policy, self.kv_config,
                               self.config.max_model_len, schedule_log=self.schedule_log,
                               inbox=inbox,
                               steps=self.step_log() if self.step_log is not None else None)
        seed = self.config.seed if noise_key is None else [self.config.seed, noise_key]
        self.noise = _Noise(seed) if self.config.jitter else None
        # only a policy that declares decode-all a fixed point is run in bulk (async
        # scheduling plans a step ahead of the state the bulk path extrapolates)
        self.async_ = self.config.async_scheduling
        self.bulk = self.config.fast_forward and self.policy.bulk_decode and not self.async_
        self.plan_at: float | None = None  # async: when the next plan is made
        self.wake: simpy.Event | None = None
        self.wake_steps = self.latency.wake_steps if self.config.wake_up else 0
        self.idle_s = 0.0  # length of the engine's last idle wait
        self.since_wake = self.wake_steps  # steps run since; >= wake_steps: warm
        self.busy_until = 0.0  # end of the step (or bulk stretch) in flight
        self.step_s = 0.0  # duration of the last step run one by one
        if inbox is None:
            env.process(self._arrivals(env))
        env.process(self._engine(env))

    def wake_up(self) -> None:
        """Wake the engine if it sleeps waiting for a request."""
        if self.wake is not None:
            self.wake.succeed()
            self.wake = None

    def result(self) -> SimResult:
        """The records, once the environment has run out."""
        c = self.core
        if not c.done:  # the engine returns only when nothing is left
            raise RuntimeError("engine stopped with requests in flight (a bug)")
        meta = c.meta()
        meta.update(profile_sha256=self.latency.profile_sha256, jitter=self.config.jitter,
                    async_scheduling=self.async_,
                    wake_up_steps=self.wake_steps,
                    seed=self.config.seed, step_overhead_s=self.latency.overhead_s,
                    step_overhead_per_request_s=self.latency.overhead_per_request_s)
        totals = c.steps.close()
        return SimResult(c.request_frame(), c.steps.frame(), c.gaps.values(), meta,
                         c.gaps.by_class(c.class_names),
                         c.schedule_log.frame() if c.schedule_log is not None else None,
                         dict(c.rejected_examples), totals)

    # ------------------------------------------------------------------ processes
    def _arrivals(self, env: simpy.Environment):
        c = self.core
        while (t := c.next_arrival_s) is not None:
            if t > env.now:
                yield env.timeout(t - env.now)
            c.pull_arrivals(max(env.now, t))
            self.wake_up()

    def _engine(self, env: simpy.Environment):
        c = self.core
        progress, total, report_at = self.progress, len(self.workload.requests), 0
        while True:
            if progress is not None and c.steps.n >= report_at:
                report_at = c.steps.n + PROGRESS_EVERY_STEPS
                if self.progress_clock:
                    progress(c.finished + len(c.rejected), total, sim_s=env.now)
                else:
                    progress(c.finished + len(c.rejected), total)
            c.pull_arrivals(env.now)
            if c.idle:
                c.release_finishing()
                self.plan_at = None
                if c.done:
                    return
                self.wake = env.event()  # an idle engine sleeps until a request arrives
                slept_at = env.now
                yield self.wake
                self.idle_s, self.since_wake = env.now - slept_at, 0
                continue
            plan = c.plan(env.now, self.plan_at)
            if plan is None:
                # a preemption-only plan, or (async) nothing schedulable before the step in
                # flight's output is processed: plan again, with everything known
                self.plan_at = None
                continue
            # the wake-up steps run one by one (the bulk path prices steps warm)
            if not (self.bulk and self.since_wake >= self.wake_steps and self._steady(plan)
                    and (yield from self._bulk_decode(env))):
                yield from self._step(env, plan)

    def _step(self, env: simpy.Environment, plan: Plan):
        c = self.core
        start = env.now
        shape = c.begin_step(plan, start)
        z = self.noise.at(c.steps.n) if self.noise is not None else None
        dur, out = 0.0, False
        for bs in shape.batch_shapes():
            t, o = self.latency.step_s(bs, z)
            if z is not None and self.guard is not None:
                self.guard.check(c.steps.n, t, self.latency.step_s(bs, None)[0], z)
            dur += t
            out = out or o
        if self.async_:
            # the previous step's outputs are processed (requests finishing there free
            # their blocks) after this step's slots were allocated, as in vLLM
            c.release_finishing()
            self.plan_at = start  # the next plan is made while this step runs
            dur = max(dur, self.latency.overhead(len(plan.scheduled)))
        else:
            dur += self.latency.overhead(len(plan.scheduled))
        if self.since_wake < self.wake_steps:
            # the whole step wakes up, host work included: the live loop's per-step
            # overhead after an idle wait slows by about the forward pass's own ratios
            dur *= self.latency.wake_ratio(self.idle_s, self.since_wake)
            self.since_wake += 1
        self.busy_until, self.step_s = start + dur, dur
        yield env.timeout(dur)
        c.end_step(plan, shape, start, env.now, out, dur, defer_free=self.async_)

    # ------------------------------------------------------------------ fast-forward
    def _steady(self, plan: Plan) -> bool:
        """True if this plan decodes every running request and nothing else can change the
        next plans but a finish, an arrival or KV growth."""
        c = self.core
        if plan.admitted or plan.preempted or c.waiting:
            return False
        running = c.running
        if len(plan.scheduled) != len(running) or len(running) == 0:
            return False
        for (req, n), r in zip(plan.scheduled, running, strict=True):
            # num_output_tokens == 0 is a prompt's 1-token tail: its step emits a first token
            if n != 1 or req is not r or req.num_remaining != 1 or req.num_output_tokens == 0:
                return False
        return True

    def _bulk_decode(self, env: simpy.Environment):
        """Run decode-all steps until an arrival is due, KV runs short or the stretch cap is
        hit; requests finishing on the way leave and the rest decode on (each such segment
        is what stepping one by one would plan, since nothing waits). Prices and times the
        steps here; `EngineCore.end_decode_run` applies them. A fleet replica whose router
        reads its state ends the stretch before the step that would end at or after the
        next read; False if that left nothing to run in bulk (the caller steps instead)."""
        c = self.core
        now = t = env.now
        bs = c.kv.block_size
        arrival = c.next_arrival_s
        read = c.inbox.next_read_s()
        if read is not None and read - now < self.step_s:
            return False  # the first step would likely cross the read: just step
        first_segment = True
        budget = _MAX_BULK_STEPS
        while True:
            running = c.running
            n = len(running)
            ctx = np.array([r.num_computed_tokens for r in running], dtype=np.int64)
            held = np.array([r.num_blocks for r in running], dtype=np.int64)
            k_left = min(r.spec.output_tokens - r.num_output_tokens for r in running)
            k = min(k_left, budget)
            grown = _block_growth(ctx, held, bs, k)  # grown[j-1]: extra blocks in step j
            k_kv = int(np.searchsorted(grown, c.kv.free_blocks, side="right"))
            if k_kv == 0:
                if not first_segment:
                    # after a finish the next step does not fit: the policy must plan it
                    # (preempt); the first segment's first step the policy has vetted
                    break
                k_kv = 1
            k = min(k, k_kv)
            steps = np.arange(k, dtype=np.int64)
            kv_mean = (int(ctx.sum()) + steps * n) / n
            z = self.noise.range(c.steps.n, k) if self.noise is not None else None
            if self.latency.prices_spread:
                # every context grows by one a step: the longest stays the longest
                kv_max = (int(ctx.max()) + steps).astype(np.float64)
                dur, out = self.latency.decode_steps_s(n, kv_mean, z, kv_max)
            else:
                dur, out = self.latency.decode_steps_s(n, kv_mean, z)
            fwd = dur
            overhead = self.latency.overhead(n)
            if overhead:
                dur = dur + overhead  # the same float op as the step-by-step path
            times = np.cumsum(np.concatenate(((t,), dur)))  # sequential, as step-by-step
            if arrival is not None:  # a step sees arrivals up to its start time
                k_arr = int(np.searchsorted(times[:k], arrival, side="left"))
                if k_arr < k:
                    k = max(1, k_arr)
            if read is not None:  # the steps that end before the read
                k_read = int(np.searchsorted(times[1 : k + 1], read, side="left"))
                if k_read == 0:
                    if first_segment:
                        return False
                    break
                k = min(k, k_read)
            if z is not None and self.guard is not None:  # the k steps that run
                spread = (kv_max[:k],) if self.latency.prices_spread else ()
                median, _ = self.latency.decode_steps_s(n, kv_mean[:k], None, *spread)
                self.guard.check_run(c.steps.n, fwd[:k], median, z[:k])
            t = c.end_decode_run(k, times, dur, kv_mean, grown, out, first_segment,
                                 retire=k == k_left)
            budget -= k
            if (k < k_left or budget <= 0 or not c.running
                    or (arrival is not None and arrival <= t) or (read is not None and read <= t)):
                break
            first_segment = False
        self.busy_until = t
        yield env.timeout(t - now)
        return True


def _takes_sim_s(fn: Callable) -> bool:
    import inspect

    try:
        return "sim_s" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _block_growth(ctx: np.ndarray, held: np.ndarray, block_size: int, k: int) -> np.ndarray:
    """Extra KV blocks the running set holds during decode step j = 1..k (slots for step
    j's token are allocated before it): sum_i max(ceil((ctx_i + j) / bs) - held_i, 0)."""
    j = np.arange(1, k + 1, dtype=np.int64)
    if len(ctx) * k <= 65536:  # small: one broadcast is cheapest
        need = -(-(ctx[:, None] + j) // block_size) - held[:, None]
        return np.maximum(need, 0).sum(axis=0)
    if np.array_equal(held, -(-ctx // block_size)):
        # each request needs a new block whenever ctx_i + j - 1 is a multiple of bs, i.e.
        # at j = first_i, first_i + bs, ...: a periodic pattern counted once per phase
        first = (-ctx) % block_size + 1
        per_phase = np.bincount(first, minlength=block_size + 1)
        return np.cumsum(per_phase[(j - 1) % block_size + 1])
    out = np.zeros(k, dtype=np.int64)
    for c, h in zip(ctx.tolist(), held.tolist(), strict=True):
        out += np.maximum(-(-(c + j) // block_size) - h, 0)
    return out

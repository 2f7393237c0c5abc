"""The SimPy engine: the only code that touches simulated time. Request state and records
live in `core.EngineCore`, shared with the live serving loop.

Two processes: arrivals (moves requests into the waiting queue at their arrival times and
wakes an idle engine) and the engine (plan -> latency -> timeout -> apply, one step at a
time). Hot-path design: when a plan decodes every running request, nothing waits and
nothing is mid-prefill, every policy's next plans are the same decode-all steps until a
request finishes, a request arrives or KV runs short; the engine then runs that stretch
in one vectorized bulk (`fast_forward.BulkDecoder`, which the engine owns and reaches the
fast path through), bit-identical to stepping it one by one, the
wake-up steps after an idle wait included. After a step in which every running request
sampled a token, with nothing waiting, the next plan is that decode-all: the engine starts
the stretch without asking the policy (unless its first step's KV does not fit).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from chunksim.core.knobs import knob
from chunksim.core.kv_cache import KVConfig
from chunksim.core.plan import Plan, Policy
from chunksim.core.spec import Workload
from chunksim.core.speculative import SpecConfig
from chunksim.latency.base import StepCosts
from chunksim.sim.engine.core import EngineCore, Inbox
from chunksim.sim.engine.fast_forward import MAX_BULK_STEPS, BulkDecoder
from chunksim.sim.engine.pricing import Noise, StepPricer
from chunksim.sim.engine.settle import SETTLE_EVERY_STEPS
from chunksim.sim.engine.spread_guard import SpreadGuard
from chunksim.sim.records.quantiles import Samples
from chunksim.sim.records.records import StepColumns, StepLog, frame_of

PROGRESS_EVERY_STEPS = 4096
"""How often (in engine iterations) a run reports its progress, when asked to."""
_SPEC_STREAM = 0x5EC
"""Seed word of the speculative acceptance stream (apart from the jitter's)."""


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
    processed. Runs step by step (no bulk decode). Off by default, where the modelled vLLM
    turns it on for GPUs: a GPU deploy line then carries --no-async-scheduling."""
    wake_up: bool = knob(True, "--wake-up/--no-wake-up", panel=_E)
    """Price the first steps after the engine idled by the profile's measured wake-up cost
    (cold cores and caches, lower GPU clocks; profiles without a wake-up table are priced
    warm)."""

    speculative: SpecConfig = field(default_factory=SpecConfig)
    """Speculative decoding (`core.speculative`; off by default)."""

    def __post_init__(self) -> None:
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len={self.max_model_len} must be >= 2 (--max-model-len)")
        if self.async_scheduling and self.speculative.enabled:
            raise ValueError("--async-scheduling with speculative decoding is not modelled "
                             "(drafts would be planned before their verification); drop one")



def _until(env: simpy.Environment, t: float):
    """Advance `env` to exactly `t`: env.now + (t - env.now) may round, so double the
    clock (exact) while it is below t / 2, then step the rest (exact from there)."""
    while 0.0 < env.now < t / 2:
        yield env.timeout(env.now)
    yield env.timeout(t - env.now)

@dataclass
class SimResult:
    """Everything a run produced: flat records plus what is needed to summarize them."""

    requests_table: object
    """One row per request (`EngineCore.request_columns`): its columns by name, until
    `requests` builds the pandas DataFrame of them (a run read for its summary alone
    never imports pandas), or that DataFrame."""
    steps_frame: object
    """`steps`, its columns by name, or a function of no arguments that returns either
    (called on first use: a run read for its summary alone never builds its steps
    frame)."""
    itl_s: Samples
    """Pooled gaps between consecutive output tokens of each request, seconds: every
    value, or past records.EXACT_GAP_SAMPLES their histogram (`quantiles.Samples`)."""
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
    step_parts: list | None = None
    """A fleet's: its engines' steps (`records.StepColumns`, or frames), which `steps`
    merges by start time (the summary folds its totals from these without building the
    merged frame); None for one engine."""
    step_part_totals: list | None = None
    """With `step_parts`: each part's own `records.StepTotals`, in the same order (the
    summary takes their counts and extremes as they are)."""
    step_columns: object = None
    """`steps` read column by column (`records.StepColumns`) without building the frame,
    when the engine kept its StepLog (a fleet merges its engines' columns from these)."""

    @property
    def requests(self):
        """pandas DataFrame, one row per request (`EngineCore.request_columns`)."""
        if isinstance(self.requests_table, dict):
            import pandas as pd

            self.requests_table = pd.DataFrame(self.requests_table)
        return self.requests_table

    @property
    def request_columns(self):
        """The requests' columns by name (a dict of arrays, or the DataFrame once built):
        what the summary reads."""
        return self.requests_table

    @property
    def steps(self):
        """pandas DataFrame, one row per step (records.STEP_COLUMNS)."""
        if isinstance(self.steps_data(), dict):
            self.steps_frame = frame_of(self.steps_frame)
        return self.steps_frame

    def steps_data(self):
        """The steps as held: their columns by name, or their frame once built (the
        function that makes them is called here, once)."""
        if callable(self.steps_frame):
            self.steps_frame = self.steps_frame()
        return self.steps_frame

    @steps.setter
    def steps(self, frame) -> None:
        self.steps_frame = frame

    def __getstate__(self) -> dict:
        """Pickled with its steps (not the function that makes them) and without the
        parts it merges (the steps hold them); one engine's steps and requests travel as
        columns, so a worker process that returns records need not import pandas."""
        self.steps_data()
        return {**self.__dict__, "step_parts": None, "step_part_totals": None,
                "step_columns": None}


class Engine:
    """Replays a workload through a policy on a latency model and a paged KV cache."""

    def __init__(self, workload: Workload, policy: Policy, latency: StepCosts,
                 kv: KVConfig, config: EngineConfig | None = None,
                 schedule_log: bool = False, spread_guard: SpreadGuard | None = None,
                 progress: Callable[..., None] | None = None,
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
        """Called as progress(requests done, requests, sim_s=simulated time) now and then,
        and at the end."""
        self.step_log = step_log
        """Makes the run's StepLog (default: keep every step in memory)."""
        self.watch = None
        """A `settle.SloWatch` checked every SETTLE_EVERY_STEPS steps at most (None: the
        run goes to its end); it raises `settle.Settled` out of the run once a bound has
        failed."""

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
        seed = self.config.seed if noise_key is None else [self.config.seed, noise_key]
        spec = self.config.speculative
        spec.check_set()
        if spec.enabled and not self.policy.speculative:
            raise ValueError(
                f"speculative decoding (--num-speculative-tokens) runs under vLLM V1's "
                f"token-budget scheduler only (--policy budget or sjf); --policy "
                f"{self.policy.name} has no place for draft tokens")
        self.core = EngineCore(self.workload, self.policy, self.kv_config,
                               self.config.max_model_len, schedule_log=self.schedule_log,
                               inbox=inbox,
                               steps=self.step_log() if self.step_log is not None else None,
                               speculative=spec,
                               spec_seed=[_SPEC_STREAM, *np.atleast_1d(seed).tolist()])
        drafter = self.latency.drafter if spec.enabled else None
        if spec.enabled and drafter is None and spec.speculative_method != "ngram":
            raise RuntimeError(f"--speculative-method {spec.speculative_method} without its "
                               "drafter cost on the latency model (sim.build.engine_parts "
                               "attaches it): a bug")
        self.async_ = self.config.async_scheduling
        self.pricer = StepPricer(
            self.latency, Noise(seed) if self.config.jitter else None, self.guard, drafter,
            self.async_, self.latency.wake_steps if self.config.wake_up else 0)
        """Prices every step, stepped or in bulk (`pricing.StepPricer`)."""
        # only a policy that declares decode-all a fixed point is run in bulk (async
        # scheduling plans a step ahead of the state the bulk path extrapolates; and a
        # decode that speculates emits a random count of tokens: stepped too)
        self.bulk = (self.config.fast_forward and self.policy.bulk_decode and not self.async_
                     and not spec.enabled)
        self.plan_at: float | None = None  # async: when the next plan is made
        self.wake: simpy.Event | None = None
        self.busy_until = 0.0  # end of the step (or bulk stretch) in flight
        self.decoding = False  # bulk: every running request sampled in the last step
        self.env = env
        # a lone engine: nobody else reads its state and it pulls its arrivals itself, so
        # it runs ahead of the clock (steps and stretches without a SimPy event each) and
        # catches up only to sleep
        self.ahead = inbox is None
        live = inbox is not None and inbox.live_reads()
        # (the decoder sees its host through a weak proxy: no cycle keeps a finished
        # engine and all its records alive until the collector's next full pass)
        self.decoder = (BulkDecoder(self.core, self.pricer, env, weakref.proxy(self),
                                    self.ahead, live) if self.bulk else None)
        """The fast path (None: every step is stepped)."""
        self.joins = self.decoder is not None and self.decoder.joins
        self.check_at = SETTLE_EVERY_STEPS
        """The step count at which the SLO watch checks the run next (`check_watch`)."""
        self.checked_at = 0
        """The step count at its last check."""
        if inbox is None:
            env.process(self._arrivals(env))
        self.process = env.process(self._engine(env))

    def wake_up(self) -> None:
        """Wake the engine if it sleeps waiting for a request; a bulk segment in flight
        (live reads, `core.Inbox.live_reads`) stops after the step in flight, so that the
        next step sees the request (a step sees the arrivals up to its start)."""
        if self.wake is not None:
            self.wake.succeed()
            self.wake = None
        elif self.decoder is not None and self.decoder.segment is not None and (
                self.decoder.cut(self.env.now)):
            self.process.interrupt()

    def decoded_by(self) -> int:
        """Tokens the bulk segment in flight has computed by now (its steps that ended),
        which `EngineCore.running_computed` counts only once it ends, 0 outside one (live
        reads)."""
        return 0 if self.decoder is None else self.decoder.decoded_by(self.env.now)

    def result(self) -> SimResult:
        """The records, once the environment has run out."""
        c = self.core
        if not c.done:  # the engine returns only when nothing is left
            raise RuntimeError("engine stopped with requests in flight (a bug)")
        meta = c.meta()
        meta.update(profile_sha256=self.latency.profile_sha256, jitter=self.config.jitter,
                    async_scheduling=self.async_,
                    wake_up_steps=self.pricer.wake_steps,
                    seed=self.config.seed, step_overhead_s=self.latency.overhead_s,
                    step_overhead_per_request_s=self.latency.overhead_per_request_s)
        totals = c.steps.close()
        return SimResult(c.request_columns(), c.steps.columns, c.gaps.values(), meta,
                         c.gaps.by_class(c.class_names),
                         c.schedule_log.frame() if c.schedule_log is not None else None,
                         dict(c.rejected_examples), totals, step_columns=StepColumns(c.steps))

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
        ahead = self.ahead
        watch = self.watch
        now = env.now  # the engine's clock: ahead of env.now while it runs ahead
        offload = c.offload
        stalled = False  # waiting requests need blocks that KV loads hold
        while True:
            if progress is not None and c.steps.n >= report_at:
                report_at = c.steps.n + PROGRESS_EVERY_STEPS
                progress(c.finished + len(c.rejected), total, sim_s=now)
            if watch is not None and c.steps.n >= self.check_at:
                self.check_watch(now)
            c.pull_arrivals(now)
            if offload is not None and offload.loads:
                offload.finish(c, now)
            if c.idle or stalled:
                if now > env.now:  # catch up with the clock before sleeping, exactly
                    yield from _until(env, now)
                c.release_finishing()
                self.plan_at = None
                if c.done:
                    return
                self.wake = env.event()  # an idle engine sleeps until a request arrives
                if offload is not None and offload.loads:  # or a KV load lands
                    env.process(self._alarm(env, offload.next_end_s, self.wake))
                slept_at = env.now
                yield self.wake
                self.pricer.woke(env.now - slept_at)
                now = env.now
                stalled = False
                continue
            # a step every running request sampled in, with nothing waiting now: the next
            # plan is the decode-all the bulk path runs (policy.bulk_decode), unless its
            # KV does not fit, which `stretch` checks before anything runs
            decoding, self.decoding = self.decoding, False
            if (decoding and (not c.waiting or self.joins)
                    and (offload is None or not offload.loads)
                    and (yield from self.decoder.run(now, vetted=False))):
                now = self.busy_until if ahead else env.now
                continue
            plan = c.plan(now, self.plan_at)
            if plan is None:
                # a preemption-only plan, or (async) nothing schedulable before the step in
                # flight's output is processed: plan again, with everything known
                self.plan_at = None
                if offload is not None and offload.stalled:
                    offload.stalled, stalled = False, True
                continue
            if not (self.bulk and self.decoder.steady(plan)
                    and (yield from self.decoder.run(now))):
                yield from self._step(env, plan, now)
            now = self.busy_until if ahead else env.now

    def check_watch(self, now: float) -> None:
        """Let the SLO watch check the run at `now` (raises `settle.Settled` once a bound
        has failed) and set when it checks next: within SETTLE_EVERY_STEPS steps, sooner
        where misses grow (`SloWatch.check`)."""
        n = self.core.steps.n
        self.check_at = n + min(SETTLE_EVERY_STEPS, self.watch.check(now, n - self.checked_at))
        self.checked_at = n

    def watch_due(self) -> bool:
        """Whether the SLO watch's turn has come (`check_watch`)."""
        return self.watch is not None and self.core.steps.n >= self.check_at

    def stretch_budget(self) -> int:
        """The most steps a bulk stretch may run from here: up to the SLO watch's next
        check (a lone engine's stretch lets it check and goes on), at most
        `fast_forward.MAX_BULK_STEPS`."""
        if self.watch is None:
            return MAX_BULK_STEPS
        return max(1, min(MAX_BULK_STEPS, self.check_at - self.core.steps.n))

    def _alarm(self, env: simpy.Environment, t: float, wake: simpy.Event):
        """Wake the engine sleeping on `wake` at exactly `t` (a KV load's end), unless
        something woke it before."""
        yield from _until(env, t)
        if self.wake is wake:
            wake.succeed()
            self.wake = None

    def _step(self, env: simpy.Environment, plan: Plan, start: float):
        c = self.core
        shape = c.begin_step(plan, start)
        if self.async_:
            # the previous step's outputs are processed (requests finishing there free
            # their blocks) after this step's slots were allocated, as in vLLM
            c.release_finishing()
            self.plan_at = start  # the next plan is made while this step runs
        dur, out = self.pricer.step(shape, c.steps.n, len(plan.scheduled), c.drafting)
        end = self.busy_until = start + dur  # = env.now after the timeout
        if not self.ahead:
            yield env.timeout(dur)
        emitted = c.end_step(plan, shape, start, end, out, dur, defer_free=self.async_)
        self.decoding = self.bulk and len(emitted) == len(plan.scheduled) == shape.running

"""The SimPy engine: the only code that touches simulated time or mutates request state.

Two processes: arrivals (moves requests into the waiting queue at their arrival times and
wakes an idle engine) and the engine (plan -> latency -> timeout -> apply, one step at a
time). Hot-path design: when a plan decodes every running request, nothing waits and
nothing is mid-prefill, every policy's next plans are the same decode-all steps until a
request finishes, a request arrives or KV runs short; the engine then runs that stretch
in one vectorized bulk (`fast_forward`), bit-identical to stepping it one by one.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy

from chunksim.policies.base import Plan, Policy, SchedulerState
from chunksim.sim.kv_cache import KVConfig, blocks_for, make_kv_cache
from chunksim.sim.latency import BatchShape, LatencyModel
from chunksim.sim.records import GapLog, StepLog
from chunksim.sim.request import Request
from chunksim.workloads.spec import Workload

_NOISE_BLOCK = 4096
_MAX_BULK_STEPS = 65536


@dataclass(frozen=True)
class EngineConfig:
    """Engine knobs that are not the policy's."""

    jitter: bool = False
    """Sample each step's time from the measured spread (seeded) instead of the median."""
    seed: int = 0
    """Seed of the step-time jitter."""
    fast_forward: bool = True
    """Run steady decode-only stretches in bulk (same results, much faster)."""
    max_model_len: int | None = None
    """Longest prompt + output a request may have; longer ones are rejected (None = no cap)."""

    def __post_init__(self) -> None:
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len={self.max_model_len} must be >= 2 (--max-model-len)")


@dataclass
class SimResult:
    """Everything a run produced: flat records plus what is needed to summarize them."""

    requests: object
    """pandas DataFrame, one row per request (see `Engine._request_frame`)."""
    steps: object
    """pandas DataFrame, one row per step (records.STEP_COLUMNS)."""
    itl_s: np.ndarray
    """Pooled gaps between consecutive output tokens of each request, seconds."""
    meta: dict = field(default_factory=dict)
    """Run facts: policy, params, profile hash, workload, counters."""
    itl_by_class_s: dict = field(default_factory=dict)
    """Pooled token gaps per request class, seconds (only when there are several)."""


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

    def __init__(self, workload: Workload, policy: Policy, latency: LatencyModel,
                 kv: KVConfig, config: EngineConfig | None = None) -> None:
        self.workload = workload
        self.policy = policy
        self.latency = latency
        self.kv_config = kv
        self.config = config or EngineConfig()

    # ------------------------------------------------------------------ setup / records
    def _reset(self) -> None:
        n = len(self.workload.requests)
        self.kv = make_kv_cache(self.kv_config)
        self.running: list[Request] = []
        # FCFS: a deque; vLLM's priority policy: a list kept sorted on (priority, arrival)
        self.priority = bool(getattr(self.policy, "priority_scheduling", False))
        self.waiting: deque[Request] | list[Request] = [] if self.priority else deque()
        classes = sorted({s.request_class for s in self.workload.requests})
        self.class_names = classes
        self.class_of = {c: i for i, c in enumerate(classes)}
        self.gaps = GapLog(len(classes))
        self.next_arrival = 0
        self.last_prefill = False
        self.steps = StepLog()
        self.noise = _Noise(self.config.seed) if self.config.jitter else None
        self.finish_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.first_sched_s = np.full(n, np.nan)
        self.max_itl_s = np.zeros(n)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.computed = np.zeros(n, dtype=np.int64)
        self.recomputed = np.zeros(n, dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64)
        self.outputs = np.zeros(n, dtype=np.int64)
        self.rejected: dict[int, str] = {}
        self.idle: simpy.Event | None = None
        self.empty_preempt_steps = 0

    def _reject_reason(self, spec) -> str | None:
        cap = self.config.max_model_len
        total = spec.prompt_tokens + spec.output_tokens
        if cap is not None and total > cap:
            return f"prompt+output {total} tokens > max_model_len {cap}"
        need = blocks_for(total - 1, self.kv.block_size)
        if need > self.kv.num_blocks:
            return (f"needs {need} KV blocks for {total - 1} tokens, the cache has "
                    f"{self.kv.num_blocks} (raise --kv-blocks)")
        return self.policy.rejection_reason(spec.prompt_tokens, spec.output_tokens)

    def _pull_arrivals(self, now: float) -> None:
        specs = self.workload.requests
        i = self.next_arrival
        while i < len(specs) and specs[i].arrival_s <= now:
            spec = specs[i]
            reason = self._reject_reason(spec)
            if reason is None:
                self._enqueue(Request(spec, class_idx=self.class_of[spec.request_class]))
            else:
                self.rejected[spec.request_id] = reason
            i += 1
        self.next_arrival = i

    def run(self) -> SimResult:
        """Simulate the whole workload; every request finishes or is reported rejected."""
        self._reset()
        env = simpy.Environment()
        env.process(self._arrivals(env))
        env.process(self._engine(env))
        env.run()
        if self.running or self.waiting:  # the engine returns only when both are empty
            raise RuntimeError("engine stopped with requests in flight (a bug)")
        return SimResult(self._request_frame(), self.steps.frame(), self.gaps.values(),
                         self._meta(), self.gaps.by_class(self.class_names))

    def _request_frame(self):
        import pandas as pd

        specs = self.workload.requests
        ids = np.arange(len(specs))
        rejected = np.zeros(len(specs), dtype=bool)
        rejected[list(self.rejected)] = True
        reason = [""] * len(specs)
        for rid, why in self.rejected.items():
            reason[rid] = why
        return pd.DataFrame({
            "request_id": ids,
            "request_class": [s.request_class for s in specs],
            "arrival_s": [s.arrival_s for s in specs],
            "prompt_tokens": [s.prompt_tokens for s in specs],
            "output_tokens": [s.output_tokens for s in specs],
            "first_scheduled_s": self.first_sched_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "generated_tokens": self.outputs,
            "computed_tokens": self.computed,
            "recomputed_tokens": self.recomputed,
            "cached_tokens": self.cached,
            "preemptions": self.preemptions,
            "max_itl_s": self.max_itl_s,
            "rejected": rejected,
            "reject_reason": reason,
        })

    def _meta(self) -> dict:
        return {
            "policy": self.policy.name,
            "policy_params": self.policy.params(),
            "workload": self.workload.name,
            "workload_params": dict(self.workload.params),
            "workload_notes": list(self.workload.notes),
            "profile_sha256": self.latency.profile_sha256,
            "kv_blocks": self.kv.num_blocks,
            "block_size": self.kv.block_size,
            "jitter": self.config.jitter,
            "seed": self.config.seed,
            "step_overhead_s": self.latency.overhead_s,
            "preemption_only_steps": self.empty_preempt_steps,
            "prefix_caching": self.kv.prefix_caching,
            "prefix_cache_hit_rate": (self.kv.hit_tokens / self.kv.query_tokens
                                      if self.kv.prefix_caching and self.kv.query_tokens
                                      else None),
            "priority_scheduling": self.priority,
        }

    @staticmethod
    def _queue_key(req: Request) -> tuple:
        return (req.spec.priority, req.spec.arrival_s, req.spec.request_id)

    def _enqueue(self, req: Request, front: bool = False) -> None:
        """New arrivals join the back; preempted requests the front (vLLM V1's prepend) —
        or, under priority scheduling, their place in the (priority, arrival) order."""
        if self.priority:
            insort(self.waiting, req, key=self._queue_key)
        elif front:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)

    # ------------------------------------------------------------------ processes
    def _arrivals(self, env: simpy.Environment):
        specs = self.workload.requests
        while self.next_arrival < len(specs):
            t = specs[self.next_arrival].arrival_s
            if t > env.now:
                yield env.timeout(t - env.now)
            self._pull_arrivals(max(env.now, t))
            if self.idle is not None:
                self.idle.succeed()
                self.idle = None

    def _engine(self, env: simpy.Environment):
        specs = self.workload.requests
        while True:
            self._pull_arrivals(env.now)
            if not self.running and not self.waiting:
                if self.next_arrival >= len(specs):
                    return
                self.idle = env.event()
                yield self.idle
                continue
            plan = self.policy.plan(
                SchedulerState(self.running, self.waiting, self.kv, self.last_prefill))
            if not plan.scheduled:
                if not plan.preempted:
                    raise RuntimeError(
                        f"policy {self.policy.name} planned nothing with "
                        f"{len(self.running)} running and {len(self.waiting)} waiting at "
                        f"t={env.now:.6f} s: a policy bug (it would hang)")
                self._preempt(plan)  # no forward pass runs; the next plan proceeds
                self.empty_preempt_steps += 1
                continue
            if self.config.fast_forward and self._steady(plan):
                yield from self._bulk_decode(env)
            else:
                yield from self._step(env, plan)

    # ------------------------------------------------------------------ one step
    def _preempt(self, plan: Plan) -> None:
        for victim in plan.preempted:
            self.running.remove(victim)
            self.kv.free(victim)
            self.recomputed[victim.request_id] += victim.num_computed_tokens
            victim.num_computed_tokens = 0
            victim.num_preemptions += 1
            self._enqueue(victim, front=True)

    def _step(self, env: simpy.Environment, plan: Plan):
        self._preempt(plan)
        for req in plan.admitted:
            head = self.waiting.pop(0) if self.priority else self.waiting.popleft()
            if head is not req:
                raise RuntimeError(
                    f"policy {self.policy.name} admitted request {req.request_id} out of "
                    f"queue order (head is {head.request_id})")
            self.running.append(req)
            self.kv.admit(req)  # every admission takes its prefix hits before any allocation
            self.cached[req.request_id] += req.num_cached_tokens
        start = env.now
        prefill = prefill_reqs = decodes = kv_sum = 0
        work = 0.0
        for req, n in plan.scheduled:
            self.kv.grow(req, n)
            c = req.num_computed_tokens
            if n == 1 and req.num_output_tokens:  # a decode (see Request.is_decode)
                decodes += 1
                kv_sum += c
            else:
                prefill += n
                prefill_reqs += 1
                work += n * (c + (n + 1) / 2)
            if req.first_scheduled_s < 0:
                req.first_scheduled_s = start
        prior = max(0.0, work / prefill - (prefill + 1) / 2) if prefill else 0.0
        kv_mean = kv_sum / decodes if decodes else 0.0
        z = self.noise.at(self.steps.n) if self.noise is not None else None
        lat = self.latency
        if plan.two_pass and prefill and decodes:
            t1, out1 = lat.step_s(BatchShape(prefill, prior, 0, 0.0), z)
            t2, out2 = lat.step_s(BatchShape(0, 0.0, decodes, kv_mean), z)
            dur, out = t1 + t2, out1 or out2
        else:
            dur, out = lat.step_s(BatchShape(prefill, prior, decodes, kv_mean), z)
        dur += lat.overhead_s
        n_running, n_waiting, used = len(self.running), len(self.waiting), self.kv.used_blocks
        yield env.timeout(dur)
        end = env.now
        emitted = 0
        finished = False
        caching = self.kv.prefix_caching
        for req, n in plan.scheduled:
            req.num_computed_tokens += n
            rid = req.request_id
            self.computed[rid] += n
            if caching:
                self.kv.commit(req)
            if req.num_computed_tokens == req.num_tokens:
                emitted += 1
                req.num_output_tokens += 1
                if req.first_token_s < 0:
                    req.first_token_s = end
                else:
                    gap = end - req.last_token_s
                    self.gaps.add(gap, req.class_idx)
                    if gap > req.max_itl_s:
                        req.max_itl_s = gap
                req.last_token_s = end
                if req.num_output_tokens >= req.spec.output_tokens:
                    finished = True
        self.steps.append((start, dur, prefill, prefill_reqs, prior, decodes, kv_mean, emitted,
                           used, n_running, n_waiting, len(plan.preempted), out))
        self.last_prefill = prefill > 0
        if finished:
            self._retire(end)

    def _retire(self, end: float) -> None:
        keep = []
        for req in self.running:
            if req.num_output_tokens >= req.spec.output_tokens:
                self.kv.free(req)
                self._record(req, end)
            else:
                keep.append(req)
        self.running = keep

    def _record(self, req: Request, end: float) -> None:
        rid = req.request_id
        self.finish_s[rid] = end
        self.first_token_s[rid] = req.first_token_s
        self.first_sched_s[rid] = req.first_scheduled_s
        self.max_itl_s[rid] = req.max_itl_s
        self.preemptions[rid] = req.num_preemptions
        self.outputs[rid] = req.num_output_tokens

    # ------------------------------------------------------------------ fast-forward
    def _steady(self, plan: Plan) -> bool:
        """True if this plan decodes every running request and nothing else can change the
        next plans but a finish, an arrival or KV growth."""
        if plan.admitted or plan.preempted or self.waiting:
            return False
        running = self.running
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
        is what stepping one by one would plan, since nothing waits)."""
        now = t = env.now
        bs = self.kv.block_size
        specs = self.workload.requests
        arrival = specs[self.next_arrival].arrival_s if self.next_arrival < len(specs) else None
        first_segment = True
        budget = _MAX_BULK_STEPS
        while True:
            running = self.running
            n = len(running)
            ctx = np.array([r.num_computed_tokens for r in running], dtype=np.int64)
            held = np.array([r.num_blocks for r in running], dtype=np.int64)
            k_left = min(r.spec.output_tokens - r.num_output_tokens for r in running)
            k = min(k_left, budget)
            grown = _block_growth(ctx, held, bs, k)  # grown[j-1]: extra blocks in step j
            k_kv = max(1, int(np.searchsorted(grown, self.kv.free_blocks, side="right")))
            k = min(k, k_kv)
            kv_mean = (int(ctx.sum()) + np.arange(k, dtype=np.int64) * n) / n
            z = self.noise.range(self.steps.n, k) if self.noise is not None else None
            dur, out = self.latency.decode_steps_s(n, kv_mean, z)
            if self.latency.overhead_s:
                dur = dur + self.latency.overhead_s
            times = np.cumsum(np.concatenate(((t,), dur)))  # sequential, as step-by-step
            if arrival is not None:  # a step sees arrivals up to its start time
                k_arr = int(np.searchsorted(times[:k], arrival, side="left"))
                if k_arr < k:
                    k = max(1, k_arr)
            ends = times[1 : k + 1]
            gaps = np.diff(times[: k + 1]) if not first_segment else np.diff(ends)
            run_max = float(gaps.max()) if len(gaps) else 0.0
            end = float(ends[-1])
            for req in running:
                req.num_computed_tokens += k
                req.num_output_tokens += k
                req.num_blocks = -(-req.num_computed_tokens // bs)
                m = run_max
                if first_segment:  # the first step's gap depends on each one's last token
                    g0 = float(ends[0]) - req.last_token_s
                    self.gaps.add(g0, req.class_idx)
                    if g0 > m:
                        m = g0
                if m > req.max_itl_s:
                    req.max_itl_s = m
                req.last_token_s = end
            for req in running:
                self.computed[req.request_id] += k
            if self.kv.prefix_caching:
                for req in running:
                    self.kv.commit(req)
            if len(gaps):
                self.gaps.add_run(gaps, running)
            used_before = self.kv.used_blocks
            self.kv.take(int(grown[k - 1]))
            self.steps.extend_decodes(times[:k], dur[:k], n, kv_mean[:k],
                                      used_before + grown[:k], out[:k])
            t = end
            budget -= k
            if k == k_left:
                self._retire(end)
            if (k < k_left or budget <= 0 or not self.running
                    or (arrival is not None and arrival <= t)):
                break
            first_segment = False
        yield env.timeout(t - now)
        self.last_prefill = False


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

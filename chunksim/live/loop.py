"""The live serving loop: the simulator's policies and bookkeeping on a wall clock, each
step a real forward pass of the profiled model over a real KV cache.

    t0 = perf_counter()
    loop: pull arrivals up to the step's start
          idle?  sleep until the next arrival (waiting for traffic, not imitating compute)
          plan = core.plan(); shape = core.begin_step(plan, start)
          build the StepBatch(es) from the plan -> prepare -> forward -> synchronize
          argmax sampling -> core.end_step(plan, shape, start, end)

Nothing here reads the latency table: the table is what a live run tests. Step times are
back to back while busy: a step starts where the previous one ended, so its duration is
forward pass(es) + everything else the loop did for it (`overhead_s`: the previous step's
bookkeeping, scheduling, input preparation, sampling) and the busy time adds up. The
arrivals a step sees are those due by its start, as in the simulator.

Greedy sampling; outputs are forced to the workload's lengths (vLLM bench's ignore-eos).
Prefix caching is not implemented for real here, so live runs use `prefix_caching=False`.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from chunksim.core.kv_cache import KVConfig
from chunksim.core.plan import Policy
from chunksim.core.spec import Workload
from chunksim.decoder.gpu_clock import ClockSampler, attach_clock, clock_summary, nvml_reader
from chunksim.live.batch import build_passes
from chunksim.live.records import LiveStepLog, TokenLog, decode_attention
from chunksim.live.replay import StepReplayer
from chunksim.live.runtime import Runtime, pinned_threads
from chunksim.live.settings import LiveSettings
from chunksim.live.slots import SlotTable
from chunksim.live.tokens import TokenBook
from chunksim.sim.engine.core import EngineCore
from chunksim.sim.records.quantiles import Samples

_SPIN_S = 0.001
"""Sleep until this close to an arrival, then spin: time.sleep can overshoot by ~0.1 ms."""


@dataclass
class LiveResult:
    """A live run's records, shaped like the simulator's `SimResult` plus token times."""

    requests: object
    """pandas DataFrame, one row per request (`EngineCore.request_frame`)."""
    steps: object
    """pandas DataFrame, one row per step: records.STEP_COLUMNS + LIVE_STEP_COLUMNS (+
    `sm_clock_mhz` on CUDA where NVML can be read: live.gpu_clock)."""
    itl_s: Samples
    """Pooled gaps between consecutive output tokens of each request, seconds."""
    tokens: object
    """pandas DataFrame, one row per output token (records.TokenLog)."""
    meta: dict = field(default_factory=dict)
    """Run facts: policy, workload, KV, device, threads, measured step overhead."""
    itl_by_class_s: dict = field(default_factory=dict)
    """Pooled token gaps per request class (only when there are several)."""
    replayer: object = None
    """live.replay.StepReplayer: re-times this run's steps in isolation (holds the model
    and KV pools; drop it to free them)."""


class LiveEngine:
    """Serves a workload in wall-clock time with real forward passes."""

    def __init__(self, workload: Workload, policy: Policy, kv: KVConfig,
                 settings: LiveSettings, max_model_len: int | None = None,
                 runtime: Runtime | None = None) -> None:
        if kv.prefix_caching:
            raise ValueError("the live loop does not reuse KV across requests; run it (and "
                             "the simulation it is compared with) with prefix caching off")
        self.workload = workload
        self.policy = policy
        self.kv_config = kv
        self.settings = settings
        cap = settings.model.max_position
        self.max_model_len = cap if max_model_len is None else min(max_model_len, cap)
        self.runtime = runtime

    def run(self) -> LiveResult:
        """Serve every request; returns the records. Blocks for the workload's duration."""
        with pinned_threads(self.settings.threads), torch.inference_mode():
            rt = self.runtime or Runtime(self.settings)
            rt.warm_up()
            return self._serve(rt)

    def _serve(self, rt: Runtime) -> LiveResult:
        core = EngineCore(self.workload, self.policy, self.kv_config, self.max_model_len)
        seats = self.policy.max_num_seqs
        slots = SlotTable(self.settings.model, self.workload,
                          min(seats, self.kv_config.num_blocks), rt.device, rt.dtype,
                          rt.kv_bytes_budget())
        book = TokenBook(self.workload, self.settings.model.vocab_size, self.settings.seed)
        live_steps, token_log = LiveStepLog(), TokenLog()
        batches: list[tuple] = []  # each step's StepBatch(es), for replay
        pools = slots.pools
        clock = time.perf_counter
        gc.collect()
        gc.freeze()  # long-lived objects out of the collector's way (as serving engines do)
        gc_pause = _GcPauses()
        gc.callbacks.append(gc_pause)
        reader = nvml_reader(rt.device)
        sampler = ClockSampler(reader, clock=clock) if reader else None
        t0 = clock()
        if sampler:
            sampler.start(t0)
        last_end: float | None = None  # end of the previous step while the engine is busy
        idle_s = 0.0
        try:
            while True:
                now = clock() - t0
                start = now if last_end is None else last_end
                core.pull_arrivals(start)
                if core.idle:
                    if core.done:
                        break
                    wake = core.next_arrival_s
                    wait_until(t0 + wake, clock, spin=self.settings.idle_wait == "spin")
                    idle_s += clock() - t0 - now
                    last_end = None
                    continue
                plan = core.plan(start)
                if plan is None:  # preemption only: nothing ran; free the victims' slots
                    slots.retain(_cached(core.running))
                    continue
                if plan.preempted:  # victims' KV is dropped (recompute)
                    slots.retain(_cached(r for r in core.running if r not in plan.preempted))
                for req in plan.admitted:
                    slots.acquire(req.request_id)
                shape = core.begin_step(plan, start)
                passes = build_passes(plan, slots, book)
                forward_s = launch_s = 0.0
                sampled: dict[int, int] = {}
                step_prepared = []
                for p in passes:
                    prepared, ids = rt.prepare(p.batch, p.token_ids, pools)
                    step_prepared.append(prepared)
                    # forward time: launch to synchronized, as the profiler times it; the
                    # launch share tells a slow host (it grows) from a slow GPU (it does not)
                    f0 = clock()
                    logits = rt.forward(prepared, ids, pools)
                    launch_s += clock() - f0
                    rt.sync()
                    forward_s += clock() - f0
                    sampled.update(zip(p.logit_requests, logits.argmax(-1).tolist(),
                                       strict=True))
                end = clock() - t0
                emitted = core.end_step(plan, shape, start, end)
                step = core.steps.n - 1
                if len(emitted) != len(sampled):
                    raise RuntimeError(
                        f"step {step}: {len(sampled)} logits rows but {len(emitted)} requests "
                        "sampled (live and core token accounting disagree)")
                finished = False
                for req in emitted:
                    rid = req.request_id
                    book.append(rid, sampled[rid])
                    token_log.add(rid, req.num_output_tokens - 1, end, sampled[rid], step)
                    finished = finished or req.is_finished
                if finished:
                    slots.retain(_cached(core.running))
                live_steps.append(forward_s, end - start - forward_s, last_end is not None,
                                  len(passes), launch_s, decode_attention(step_prepared))
                batches.append(tuple(p.batch for p in passes))
                last_end = end
        finally:
            gc.callbacks.remove(gc_pause)
            gc.unfreeze()
            clocks = sampler.stop() if sampler else None
        wall_s = clock() - t0
        result = self._result(core, live_steps, token_log, slots, rt, wall_s, idle_s)
        if clocks is not None:
            result.steps = attach_clock(result.steps, clocks)
        result.meta["gpu_clock"] = None if clocks is None else clock_summary(clocks)
        result.meta.update(gc_collections=gc_pause.count, gc_pause_s=gc_pause.total_s)
        result.replayer = StepReplayer(rt, slots.pools, batches)
        return result

    def _result(self, core, live_steps, token_log, slots, rt, wall_s, idle_s) -> LiveResult:
        steps = core.steps.frame()
        live_steps.add_to(steps)
        busy = steps[steps["busy"]]
        overhead = busy["overhead_s"].to_numpy() if len(busy) else steps["overhead_s"].to_numpy()
        meta = core.meta()
        meta.update(
            mode="live",
            live=self.settings.as_dict(),
            host_allocator=rt.host_allocator,
            torch_version=torch.__version__,
            sdpa_backends=(list(rt.model.sdpa_backends) if rt.device == "cuda"
                           and rt.model.sdpa_backends is not None else None),
            max_model_len=self.max_model_len,
            kv_pools=slots.describe(),
            kv_pool_bytes=slots.nbytes,
            kv_slot_moves=slots.moves,
            wall_s=wall_s,
            idle_s=idle_s,
            step_overhead_s=float(np.median(overhead)) if len(overhead) else 0.0,
            step_overhead_p90_s=float(np.percentile(overhead, 90)) if len(overhead) else 0.0,
            step_overhead_mean_s=float(np.mean(overhead)) if len(overhead) else 0.0,
            busy_steps=int(len(busy)),
        )
        return LiveResult(core.request_frame(), steps, core.gaps.values(),
                          token_log.frame(), meta, core.gaps.by_class(core.class_names))


class _GcPauses:
    """gc callback: how often and how long the collector paused the loop."""

    def __init__(self) -> None:
        self.count, self.total_s, self._t = 0, 0.0, 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.count += 1
            self.total_s += time.perf_counter() - self._t


def _cached(running) -> dict[int, int]:
    """request id -> tokens in its KV slot, for the running requests."""
    return {r.request_id: r.num_computed_tokens for r in running}


def wait_until(deadline: float, clock, spin: bool = False) -> None:
    """Sleep until `deadline` (a `clock()` value), spinning through the last millisecond
    (or all the way, with `spin`)."""
    while True:
        left = deadline - clock()
        if left <= 0:
            return
        if left > 2 * _SPIN_S and not spin:
            time.sleep(left - _SPIN_S)

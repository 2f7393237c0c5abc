"""Whole-model steps against the composed model: the component profile's calibration.

A seeded sample of mixed steps (several prefill chunks with their own priors, decodes at
unequal contexts, both together) is run through the whole model twice: each step alone
(warm-up then repeats, as components are timed), and all of them back to back in a
serving-like order, each run once as it comes, for a few rounds (a serving loop meets a
new shape every step). The composed model's error against both is reported per step kind.
The same machinery fits the per-step fixed cost on a few small steps.

Each step is timed alone twice, before and after the in-sequence rounds (seconds to a
minute apart): other work on the machine only ever adds time, and on a shared machine a
burst of it can lift a small step's median by tens of % for seconds, so the reference
is the lower look, and how far the two looks differ (`repeatability`) is the noise floor
the composed model's error is to be read against.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from chunksim.core.shape import BatchShape
from chunksim.decoder.kv import KVPool
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step
from chunksim.profiler.component_grid import ComponentGrid
from chunksim.profiler.timing import measure


@dataclass(frozen=True)
class SampleStep:
    """One whole-model step: chunks (length, prior, needs logits) and decode contexts."""

    chunks: tuple[tuple[int, int, bool], ...]
    decodes: tuple[int, ...]

    @property
    def kind(self) -> str:
        return ("mixed" if self.decodes else "prefill") if self.chunks else "decode"

    def shape(self) -> BatchShape:
        """What the latency model prices."""
        d = len(self.decodes)
        mean = sum(self.decodes) / d if d else 0.0
        return BatchShape(sum(n for n, _, _ in self.chunks), 0.0, d, mean,
                          tuple((n, p) for n, p, _ in self.chunks),
                          float(max(self.decodes)) if d else 0.0,
                          d + sum(need for _, _, need in self.chunks))

    def as_list(self) -> list:
        return [[list(c) for c in self.chunks], list(self.decodes)]


def sample_steps(grid: ComponentGrid, count: int, seed: int,
                 max_position: int) -> list[SampleStep]:
    """`count` steps cycling prefill / decode / mixed, inside the grid's ranges: 1-3
    chunks (log-uniform lengths, a prior context for most), 1 to the grid's most decodes
    at log-normal contexts (a quarter of decode batches equal)."""
    rng = np.random.default_rng(seed)
    max_chunk, max_prior = max(grid.chunk_len), max(grid.prior_len)
    max_d, max_kv = max(grid.decode_count), max(grid.kv_len)
    cap = max_position - 1

    def loguni(lo: float, hi: float) -> int:
        return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))

    def chunks(k: int, budget: int) -> tuple:
        out = []
        for _ in range(k):
            n = min(loguni(16, max_chunk), budget)
            if n < 2:
                break
            prior = 0 if rng.random() < 0.35 else loguni(16, max_prior)
            prior = min(prior, cap - n)
            out.append((n, prior, bool(rng.random() < 0.6)))
            budget -= n
        return tuple(out)

    def decodes(most: int) -> tuple:
        d = loguni(1, most)
        median = loguni(16, max_kv)
        if rng.random() < 0.25:
            return (median,) * d
        ctx = np.exp(rng.normal(np.log(median), 0.8, d)).round().astype(int)
        return tuple(int(c) for c in np.clip(ctx, 1, min(cap - 1, 2 * max_kv)))

    steps = []
    for i in range(count):
        kind = ("prefill", "decode", "mixed")[i % 3]
        if kind == "prefill":
            steps.append(SampleStep(chunks(int(rng.integers(1, 4)), grid.max_tokens), ()))
        elif kind == "decode":
            steps.append(SampleStep((), decodes(max_d)))
        else:
            dec = decodes(max(1, max_d // 2))
            steps.append(SampleStep(chunks(int(rng.integers(1, 3)),
                                           grid.max_tokens - len(dec)), dec))
    return [s for s in steps if s.chunks or s.decodes]


class WholeSteps:
    """Closures running sample steps through a whole model, over shared pools."""

    def __init__(self, model, steps: list[SampleStep], device: str, dtype: torch.dtype,
                 seed: int) -> None:
        cfg = model.cfg
        n_chunks = max((len(s.chunks) for s in steps), default=0)
        chunk_cap = max((n + p for s in steps for n, p, _ in s.chunks), default=1)
        n_dec = max((len(s.decodes) for s in steps), default=0)
        dec_cap = max((c + 1 for s in steps for c in s.decodes), default=1)
        self.pools = [KVPool(cfg, max(n_chunks, 1), chunk_cap, device, dtype, fill_seed=seed),
                      KVPool(cfg, max(n_dec, 1), dec_cap, device, dtype, fill_seed=seed)]
        gen = torch.Generator(device=device).manual_seed(seed)
        self.fns: list[Callable[[], object]] = []
        for s in steps:
            seqs = [SeqSlice(i, p, n, needs_logits=need, pool=0)
                    for i, (n, p, need) in enumerate(s.chunks)]
            seqs += [SeqSlice(i, c, 1, pool=1) for i, c in enumerate(s.decodes)]
            batch = StepBatch(tuple(seqs))
            prepared = prepare_step(batch, self.pools, device)
            ids = torch.randint(0, cfg.vocab_size, (batch.total_tokens,), generator=gen,
                                device=device)
            self.fns.append(_closure(model, ids, prepared, self.pools))


def _closure(model, ids, prepared, pools) -> Callable[[], object]:
    return lambda: model.forward_step(ids, prepared, pools)


def time_alone(fns: list[Callable[[], object]], sync: Callable[[], None],
               timing: dict) -> list[float]:
    """Each step's median, timed as the profiler times a point (warm)."""
    return [measure(fn, timing["warmup"], timing["repeats"], sync, min_repeats=3,
                    budget_s=timing["point_budget_s"], min_timed_s=timing["point_min_s"],
                    clock=timing["clock"]).median_s for fn in fns]


def time_in_sequence(fns: list[Callable[[], object]], sync: Callable[[], None],
                     rounds: int, seed: int,
                     clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Each step's median over `rounds` passes of all steps back to back, one run each,
    in a seeded shuffled order per round (shapes change every step, as in serving)."""
    rng = np.random.default_rng(seed + 1)
    samples: list[list[float]] = [[] for _ in fns]
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for fn in fns:  # one untimed pass: first-call costs are not what is measured
            fn()
        sync()
        for _ in range(rounds):
            for i in rng.permutation(len(fns)).tolist():
                t0 = clock()
                fns[i]()
                sync()
                samples[i].append(clock() - t0)
    finally:
        if was:
            gc.enable()
    return [float(np.median(s)) for s in samples]


def error_stats(kinds: list[str], predicted: list[float], measured: list[float]) -> dict:
    """Per kind (and `all`): steps, median and P90 of |predicted / measured - 1| in %,
    and the signed median (a bias)."""
    err = (np.asarray(predicted) / np.asarray(measured) - 1.0) * 100
    out = {}
    for kind in ("prefill", "decode", "mixed", "all"):
        sel = np.array([kind in ("all", k) for k in kinds])
        if not sel.any():
            continue
        e = err[sel]
        out[kind] = {"steps": int(sel.sum()),
                     "median_abs_error_pct": round(float(np.median(np.abs(e))), 2),
                     "p90_abs_error_pct": round(float(np.percentile(np.abs(e), 90)), 2),
                     "median_error_pct": round(float(np.median(e)), 2)}
    return out


def in_sequence_scale(alone: list[float], seq: list[float]) -> tuple[float, dict]:
    """(scale, ratio summary): the median in-sequence / alone ratio when three steps in
    four cost more in sequence (P25 ratio > 1), else 1."""
    r = np.asarray(seq) / np.asarray(alone)
    p25, med = float(np.percentile(r, 25)), float(np.median(r))
    scale = med if p25 > 1.0 else 1.0
    return scale, {"median": round(med, 4), "p25": round(p25, 4),
                   "p75": round(float(np.percentile(r, 75)), 4)}


def run_whole(model, steps: list[SampleStep], device: str, dtype: torch.dtype, seed: int,
              sync: Callable[[], None], timing: dict, rounds: int, looks: int = 1
              ) -> tuple[list[float], list[float] | None, list[list[float]]]:
    """(alone: each step's lowest look, in-sequence medians or None when `rounds` is 0,
    every look). The first look is taken before the in-sequence rounds, the others
    after."""
    whole = WholeSteps(model, steps, device, dtype, seed)
    with torch.inference_mode():  # forward_step picks its SDPA kernels itself
        seen = [time_alone(whole.fns, sync, timing)]
        seq = (time_in_sequence(whole.fns, sync, rounds, seed, timing["clock"]) if rounds
               else None)
        seen += [time_alone(whole.fns, sync, timing) for _ in range(looks - 1)]
    del whole
    gc.collect()
    return [min(v) for v in zip(*seen, strict=True)], seq, seen


def repeatability(kinds: list[str], seen: list[list[float]]) -> dict | None:
    """Per kind: median and P90 of |second look / first look - 1| in % (None with one
    look): what the same steps' timing moves by on its own."""
    if len(seen) < 2:
        return None
    return {k: {n: v for n, v in st.items() if n != "median_error_pct"}
            for k, st in error_stats(kinds, seen[1], seen[0]).items()}


FIXED_PROBES = (SampleStep((), (16,)), SampleStep((), (16,) * 4), SampleStep((), (256,) * 2),
                SampleStep(((16, 0, True),), ()), SampleStep(((32, 0, True),), (16,)))
"""Small steps whose whole-model time minus the composed parts is the fixed cost."""

"""`sim profile --kind components`: time the components, fit the fixed cost, calibrate
against whole-model steps, write `chunksim-components/1` (docs/profile-format.md).

Order: the components on one layer (`profiler.components`); with `--tp N` each layer's
all-reduces from the link model (`profiler.collective`); the fixed cost, fitted on small
whole-model steps; the calibration sample, alone and back to back (`profiler.calibration`);
the live loop's per-step overhead and the wake-up table, as for a whole-step profile.
The whole model (of one shard's shapes) is needed for the fixed cost and the calibration
only: where it does not fit the device, both are skipped and the JSON says so.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

from chunksim.decoder.config import DTYPE_BYTES, ModelConfig, shard_moe
from chunksim.decoder.device import (
    device_memory_bytes,
    device_name,
    free_cached,
    pin_host_allocator,
    synchronizer,
)
from chunksim.decoder.model import build_model
from chunksim.latency.component_table import COLUMNS, FORMAT
from chunksim.latency.composed import ComponentModel
from chunksim.latency.profile import Profile
from chunksim.profiler.allreduce_bench import BACKENDS, measure_allreduce_s, measured_tokens
from chunksim.profiler.alltoall import MOE_ALLREDUCES_PER_LAYER, layer_alltoall_s
from chunksim.profiler.calibration import (
    FIXED_PROBES,
    SampleStep,
    error_stats,
    in_sequence_scale,
    repeatability,
    run_whole,
    sample_steps,
)
from chunksim.profiler.collective import (
    ALLREDUCES_PER_LAYER,
    MEASURED,
    allreduce_s,
    layer_allreduce_s,
)
from chunksim.profiler.component_grid import ComponentGrid, decode_lengths
from chunksim.profiler.component_points import checkpoint as component_checkpoint
from chunksim.profiler.component_points import measure_points, row
from chunksim.profiler.component_write import _model_entry, write_components
from chunksim.profiler.components import LayerBench, evict_bytes
from chunksim.profiler.timing import Timing
from chunksim.progress import ProgressBar

OWN_TERMS = {
    "mixed_attention": "sum-of-parts (the model attends each sequence in its own call)",
    "decode_spread": "mean and longest context (kv_max / kv_len axis)",
    "terms": {"rotary": "in dense", "final_norm": "in head", "sampler": "in head (greedy)"},
}
"""How chunksim's own profiler prices the step terms (docs/profile-format.md)."""
CLOCKS = {"wall": time.perf_counter, "thread-cpu": time.thread_time}


@dataclass(frozen=True)
class ComponentSettings:
    """Everything that defines one component profile run."""

    model: ModelConfig
    """The whole model's shapes (unsharded)."""
    device: str
    dtype: str
    grid: ComponentGrid
    out_csv: Path
    threads: int | None = 1
    seed: int = 0
    tp: int = 1
    """Tensor-parallel degree: components are timed at one shard's shapes."""
    ep: int = 1
    """Expert-parallel degree of a MoE model: 1 (experts tensor-parallel) or `tp` (whole
    experts, num_experts / ep per device, all-to-all from the link model:
    `profiler.alltoall`)."""
    link: dict | None = None
    """All-reduce cost model (`collective.link_settings`); None for tp 1."""
    resume: bool = False
    """Continue an interrupted run from its checkpoint (`profiler.component_points`)."""
    calibrate: bool = True
    """Time the calibration sample (and fit the fixed cost on whole-model steps)."""
    live_costs: bool = True
    """Measure the live loop's per-step overhead and the wake-up table."""
    memory_fraction: float = 0.9
    cold: bool = True
    """Time each component cold, as in a whole step (`profiler.components`); False times
    it warm, back to back (what profiles before this setting measured)."""
    clock: str = "wall"
    """`wall` (perf_counter; what CUDA timing needs) or `thread-cpu` (the profiling thread's
    CPU time: on a one-thread CPU run, what the work costs whatever else the machine runs;
    the CLI's default on CPU). Components, fixed cost and calibration share it."""

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"--clock {self.clock!r}: use {' or '.join(CLOCKS)}")
        if self.clock == "thread-cpu" and (self.device != "cpu" or self.threads != 1):
            raise ValueError("--clock thread-cpu times one CPU thread's work: use it with "
                             "--device cpu --threads 1")
        if self.out_csv.suffix != ".csv":
            raise ValueError(f"--out {str(self.out_csv)!r}: give the CSV path, ending in "
                             f".csv (the JSON is written next to it)")
        if self.tp > 1 and self.link is None:
            raise ValueError("--tp > 1 needs a link model (collective.link_settings)")
        shard_moe(self.model, self.tp, self.ep)  # ValueError naming --ep / --tp
        if self.ep > 1 and self.link.get("preset") == MEASURED:
            raise ValueError(f"--ep {self.ep} with --link measured: the all-to-all is priced "
                             f"by the link formula; give a link preset (--link nvlink-h100, "
                             f"pcie, ...) or --link-gbps and --link-latency-us")


@dataclass
class ComponentResult:
    csv_path: Path
    json_path: Path
    meta: dict


def run_components(s: ComponentSettings, show_progress: bool = True) -> ComponentResult:
    """Measure, calibrate and write `s.out_csv` + its JSON."""
    before = torch.get_num_threads()
    if s.device == "cpu":
        torch.set_num_threads(s.threads or 1)
        pin_host_allocator()
    try:
        return _run(s, show_progress)
    finally:
        torch.set_num_threads(before)


def _axes(s: ComponentSettings, shard: ModelConfig) -> dict:
    """The grid's axes inside the model's positions (each product stays rectangular)."""
    g, cap = s.grid, shard.max_position
    chunks = tuple(c for c in g.chunk_len if c < cap)
    priors = tuple(p for p in g.prior_len if p + max(chunks) <= cap)
    kvs = tuple(k for k in g.kv_len if int(round(k * max(g.spreads))) + 1 <= cap)
    tokens = tuple(t for t in g.tokens if t <= cap)
    embed = tuple(t for t in tokens if t == 1 or t == tokens[-1] or (t & (t - 1)) == 0
                  and t >= 16)
    expert = embed if shard.moe is not None else ()  # tokens routed to one expert
    return {"tokens": tokens, "embed": embed, "expert": expert, "chunk_len": chunks,
            "prior_len": priors,
            "decode_count": g.decode_count, "kv_len": kvs, "spreads": g.spreads,
            "logits": g.logits}


def _prime(s: ComponentSettings) -> bool:
    """Run each layer component after the same work on the layer before it: on CPU,
    where the eviction read also flushes the code the ops run (`profiler.components`)."""
    return s.cold and s.device == "cpu"


def _evict(s: ComponentSettings, shard: ModelConfig) -> int:
    """Bytes read between two runs of a component (0 when timed warm)."""
    if not s.cold:
        return 0
    full = replace(shard, n_layers=s.model.n_layers)
    layer = (replace(shard, n_layers=2).weights_bytes(s.dtype)
             - replace(shard, n_layers=1).weights_bytes(s.dtype))
    return evict_bytes(full.weights_bytes(s.dtype), layer)


def _timer(bench: LayerBench):
    """(component, work key) -> its timing on `bench`."""
    def time_point(name: str, key) -> Timing:
        if name == "prefill_attn":
            return bench.prefill_attn(*key)
        if name == "decode_attn":
            return bench.decode_attn(key[3])
        return getattr(bench, name)(key)
    return time_point


def _identity(s: ComponentSettings, evict: int) -> dict:
    """What must match for a checkpoint to be resumed."""
    ident = {"format": FORMAT, "model": s.model.as_dict(), "device": s.device,
             "device_name": device_name(s.device), "dtype": s.dtype, "threads": s.threads,
             "tp": s.tp, "link": s.link, "grid": s.grid.as_dict(), "seed": s.seed,
             "cold": s.cold, "evict_bytes": evict, "prime": _prime(s), "clock": s.clock,
             "torch_version": torch.__version__}
    if s.ep > 1:
        ident["ep"] = s.ep
    return ident


def moe_entry(s: ComponentSettings) -> dict | None:
    """The profile JSON's `components.moe`: what `latency.moe` prices by (None: dense)."""
    moe = s.model.moe
    if moe is None:
        return None
    return {"num_experts": moe.num_experts, "top_k": moe.top_k, "ep": s.ep,
            "experts_per_device": moe.num_experts // s.ep, "skew": 0.0,
            "alltoall": ("2 x (latency + (T / ep) x top_k x (ep - 1) / ep x hidden x dtype "
                         "bytes / bandwidth) per layer" if s.ep > 1 else None)}


def _run(s: ComponentSettings, show_progress: bool) -> ComponentResult:
    started = time.perf_counter()
    dtype = getattr(torch, s.dtype)
    sync = synchronizer(s.device)
    shard = shard_moe(s.model, s.tp, s.ep)
    axes = _axes(s, shard)
    g = s.grid
    timing = {"warmup": g.warmup, "repeats": g.repeats, "point_budget_s": g.point_budget_s,
              "point_min_s": g.point_min_s, "clock": CLOCKS[s.clock]}
    decode_points = [(d, k, r, lens) for d in axes["decode_count"] for k in axes["kv_len"]
                     for r in axes["spreads"]
                     if (lens := decode_lengths(d, k, r)) is not None]
    work = ([("dense", t) for t in axes["tokens"]] + [("embed", t) for t in axes["embed"]]
            + [("prefill_attn", (c, p)) for c in axes["chunk_len"] for p in axes["prior_len"]]
            + [("decode_attn", p) for p in decode_points]
            + [("head", n) for n in axes["logits"]]
            + [("expert", n) for n in axes["expert"]])
    evict = _evict(s, shard)
    identity = _identity(s, evict)
    ckpt = component_checkpoint(s.out_csv)
    done: list = []
    elapsed_before = 0.0
    if s.resume and ckpt.exists():
        done, elapsed_before = ckpt.load(identity)
    elif ckpt.exists():
        raise ValueError(f"a checkpoint of an unfinished run exists at {ckpt.csv_path}; pass "
                         f"--resume to continue it, or delete it to start over")
    else:
        ckpt.start(identity)
    started -= elapsed_before
    with torch.inference_mode():
        bench = LayerBench(shard, s.device, dtype, s.seed, sync, timing, evict,
                           prime=_prime(s))
        try:
            rows, relooked = measure_points(work, _timer(bench), g.looks, g.relook_below_s,
                                            s.seed, ckpt, done, show_progress)
        finally:
            ckpt.save_meta(identity, time.perf_counter() - started)
        bench.close()
        del bench
        gc.collect()
        free_cached(s.device)
    phases = {"components": round(time.perf_counter() - started, 3)}
    link = s.link
    if s.tp > 1 and s.link["preset"] == MEASURED:
        timed = measure_allreduce_s(s.device, s.tp, measured_tokens(axes["tokens"]),
                                    shard.hidden_size, s.dtype)
        link = {**s.link, "backend": BACKENDS[s.device],
                "allreduce_s": {str(t): v for t, v in timed.items()}}
        for t, sec in timed.items():
            sec *= ALLREDUCES_PER_LAYER
            rows.append(row("allreduce", Timing(sec, sec, sec, sec, 0), tokens=t))
    elif s.tp > 1 and s.ep > 1:
        width = DTYPE_BYTES[s.dtype]
        for t in axes["tokens"]:
            sec = MOE_ALLREDUCES_PER_LAYER * allreduce_s(
                t * shard.hidden_size * width, s.tp, s.link["gbps"], s.link["latency_us"])
            rows.append(row("allreduce", Timing(sec, sec, sec, sec, 0), tokens=t))
            sec = layer_alltoall_s(t, shard.hidden_size, width, s.model.moe.top_k, s.ep,
                                   s.link)
            rows.append(row("alltoall", Timing(sec, sec, sec, sec, 0), tokens=t))
    elif s.tp > 1:
        width = DTYPE_BYTES[s.dtype]
        for t in axes["tokens"]:
            sec = layer_allreduce_s(t, shard.hidden_size, width, s.tp, s.link)
            rows.append(row("allreduce", Timing(sec, sec, sec, sec, 0), tokens=t))
    phases["allreduce"] = round(time.perf_counter() - started - sum(phases.values()), 3)

    calibration, fixed_s, scale = _calibrate(s, shard, rows, dtype, sync, timing,
                                             show_progress)
    rows.append(row("fixed", Timing(fixed_s, fixed_s, fixed_s, fixed_s, 0)))
    phases["calibration"] = round(time.perf_counter() - started - sum(phases.values()), 3)

    overhead, wake_up = ({"median_s": 0.0}, None)
    if s.live_costs:
        overhead, wake_up = _live_costs(s, shard)
    phases["live_costs"] = round(time.perf_counter() - started - sum(phases.values()), 3)
    dev_name = device_name(s.device)
    meta = {
        "format": FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": s.device, "device_name": dev_name,
        "device_memory_bytes": device_memory_bytes(s.device),
        "dtype": s.dtype,
        "threads": s.threads if s.device == "cpu" else None,
        "torch_version": torch.__version__,
        "clock": s.clock,
        "host_allocator": pin_host_allocator() if s.device == "cpu" else None,
        "model": _model_entry(s.model),
        "weights_bytes": s.model.weights_bytes(s.dtype) // s.tp,
        "kv_bytes_per_token": shard.kv_bytes_per_token(s.dtype),
        "step_overhead_s": overhead["median_s"],
        "step_overhead": overhead,
        "wake_up": wake_up,
        "components": {"layers": s.model.n_layers, "timed_layers": 1,
                       "in_sequence_scale": scale, "tp": s.tp, "link": link,
                       "evict_bytes": evict, "prime": _prime(s), "looks": g.looks,
                       "relook_below_s": g.relook_below_s, "relooked_points": relooked,
                       "shard": {k: getattr(shard, k) for k in (
                           "n_heads", "n_kv_heads", "intermediate_size", "vocab_size")},
                       "grid": g.as_dict(), **OWN_TERMS,
                       **({"moe": moe_entry(s)} if s.model.moe is not None else {})},
        "calibration": calibration,
        "seed": s.seed,
        "phase_s": phases,
        "elapsed_s": round(time.perf_counter() - started, 3),
    }
    meta = write_components(s.out_csv, rows, meta)
    ckpt.remove()
    return ComponentResult(s.out_csv, s.out_csv.with_suffix(".json"), meta)


def composed_model(rows: list[dict], layers: int, fixed_s: float = 0.0,
                   scale: float = 1.0, allreduce: bool = False,
                   moe: dict | None = None) -> ComponentModel:
    """The latency model of these rows (in memory), as `sim run` would load it (`moe`:
    the profile's `components.moe`; its all-to-all rides with `allreduce`)."""
    keep = [r for r in rows if allreduce or r["component"] not in ("allreduce", "alltoall")]
    keep = [r for r in keep if r["component"] != "fixed"]
    keep.append(row("fixed", Timing(fixed_s, fixed_s, fixed_s, fixed_s, 0)))
    table = pd.DataFrame(keep, columns=list(COLUMNS))
    prov = {"format": FORMAT, "components": {"layers": layers, "in_sequence_scale": scale}}
    if moe is not None:
        prov["components"]["moe"] = moe
    return ComponentModel(Profile.of_frame(table, prov, "(in memory)", "", kind="components"),
                          0.0)


def _predict(model: ComponentModel, steps: list[SampleStep]) -> list[float]:
    return [model.step_s(st.shape())[0] for st in steps]


def _calibrate(s: ComponentSettings, shard: ModelConfig, rows: list[dict], dtype, sync,
               timing: dict, show_progress: bool) -> tuple[dict | None, float, float]:
    """(calibration entry, fixed cost s, in-sequence scale)."""
    full = replace(shard, n_layers=s.model.n_layers)
    steps = sample_steps(s.grid, s.grid.calibration_steps, s.seed, full.max_position)
    need = (full.weights_bytes(s.dtype)
            + full.kv_bytes_per_token(s.dtype) * _pool_tokens(steps + list(FIXED_PROBES)))
    budget = s.memory_fraction * device_memory_bytes(s.device)
    if not s.calibrate:
        return {"skipped": "--no-calibrate"}, 0.0, 1.0
    if s.ep > 1:
        return ({"skipped": f"--ep {s.ep}: one device's whole steps would run every expert, "
                            f"where an expert-parallel device runs num_experts / ep; fixed "
                            f"cost not fitted"}, 0.0, 1.0)
    moe = moe_entry(s)
    if need > budget:
        return ({"skipped": f"the whole model ({full.weights_bytes(s.dtype) / 2**30:.1f} GiB "
                            f"of weights per shard) and the sample's KV do not fit "
                            f"{s.memory_fraction:.0%} of the device; fixed cost not fitted"},
                0.0, 1.0)
    layers = s.model.n_layers
    with ProgressBar("calibration", total=3, enabled=show_progress) as bar:
        model = build_model(full, s.device, dtype, seed=s.seed)
        bar.describe("fixed cost")
        probes, _, _ = run_whole(model, list(FIXED_PROBES), s.device, dtype, s.seed, sync,
                                 timing, 0, looks=2)
        bar.advance()
        bare = _predict(composed_model(rows, layers, moe=moe), list(FIXED_PROBES))
        # negative when the parts, each timed alone, over-count a small step (each
        # pays its own per-call costs, which a whole step pays once); held at 0
        gap_s = statistics.median(m - p for m, p in zip(probes, bare, strict=True))
        fixed_s = max(0.0, gap_s)
        bar.describe(f"{len(steps)} whole steps, alone and in sequence")
        alone, seq, seen = run_whole(model, steps, s.device, dtype, s.seed, sync, timing,
                                     s.grid.sequence_rounds, looks=2)
        bar.advance(2)
    del model
    gc.collect()
    free_cached(s.device)
    drift = _drift(s, shard, rows, dtype, sync, timing)
    kinds = [st.kind for st in steps]
    predicted = _predict(composed_model(rows, layers, fixed_s, moe=moe), steps)
    scale, ratio = in_sequence_scale(alone, seq)
    entry = {
        "steps": len(steps),
        "alone": error_stats(kinds, predicted, alone),
        "in_sequence": error_stats(kinds, [p * scale for p in predicted], seq),
        "in_sequence_ratio": ratio,
        "alone_looks": len(seen),
        "repeatability": repeatability(kinds, seen),
        "drift": drift,
        "alone_drift_corrected": error_stats(kinds, [p * drift["factor"] for p in predicted],
                                             alone),
        "fixed_fit": {"probes": [p.as_list() for p in FIXED_PROBES],
                      "whole_s": probes, "composed_s": bare, "median_gap_s": gap_s},
        "sample": [{"kind": st.kind, "step": st.as_list(), "predicted_s": p,
                    "alone_s": a, "in_sequence_s": q, "alone_looks_s": list(looks)}
                   for st, p, a, q, looks in zip(steps, predicted, alone, seq,
                                                 zip(*seen, strict=True), strict=True)],
        "note": ("tensor-parallel: the whole steps run one shard's compute; all-reduces "
                 "are modelled, not in the calibration" if s.tp > 1 else None),
    }
    return entry, fixed_s, scale


DRIFT_POINTS = (("dense", 1), ("dense", 256), ("head", 16), ("prefill_attn", (256, 256)),
                ("decode_attn", (16, 256)))
"""Component points re-timed after the calibration: how far the machine's speed moved."""


def _drift(s: ComponentSettings, shard: ModelConfig, rows: list[dict], dtype, sync,
           timing: dict) -> dict:
    """Re-time a few component points after the whole steps; `factor` = median of now /
    table (1: the machine ran as fast as when the components were timed)."""
    with torch.inference_mode():
        bench = LayerBench(shard, s.device, dtype, s.seed, sync, timing, _evict(s, shard),
                           prime=_prime(s))
        ratios = drift_ratios(bench, rows)
        bench.close()
    factor = statistics.median(ratios) if ratios else 1.0
    return {"factor": round(factor, 4), "ratios": [round(r, 4) for r in ratios]}


def drift_ratios(bench: LayerBench, rows: list[dict]) -> list[float]:
    """`DRIFT_POINTS` timed now on `bench` over their figures in `rows` (table rows;
    points the table lacks are skipped). Call under `torch.inference_mode()`."""
    table = {}
    for r in rows:
        key = {"dense": r["tokens"], "head": r["logits"],
               "prefill_attn": (r["chunk_len"], r["prior_len"]),
               "decode_attn": (r["decode_count"], r["kv_len"]) if r["kv_max"] == r["kv_len"]
               else None}.get(r["component"])
        table[(r["component"], key)] = r["median_s"]
    ratios = []
    for name, key in DRIFT_POINTS:
        old = table.get((name, key))
        if old is None or not old > 0:
            continue
        if name == "dense":
            t = bench.dense(key)
        elif name == "head":
            t = bench.head(key)
        elif name == "prefill_attn":
            t = bench.prefill_attn(*key)
        else:
            t = bench.decode_attn([key[1]] * key[0])
        ratios.append(t.median_s / old)
    return ratios


def _pool_tokens(steps: list[SampleStep]) -> int:
    chunks = max((len(st.chunks) for st in steps), default=1)
    chunk_cap = max((n + p for st in steps for n, p, _ in st.chunks), default=1)
    dec = max((len(st.decodes) for st in steps), default=1)
    dec_cap = max((c + 1 for st in steps for c in st.decodes), default=1)
    return chunks * chunk_cap + dec * dec_cap


def _live_costs(s: ComponentSettings, shard: ModelConfig) -> tuple[dict, dict | None]:
    """The live loop's per-step overhead fit and the wake-up table (`profiler.run`'s),
    on one shard's whole model."""
    from chunksim.profiler.grid import PRESETS
    from chunksim.profiler.run import ProfileSettings, _measure_cold_costs, _measure_overhead

    full = replace(shard, n_layers=s.model.n_layers)
    ps = ProfileSettings(model=full, device=s.device, dtype=s.dtype, grid=PRESETS["quick"],
                         out_csv=s.out_csv, threads=s.threads, seed=s.seed)
    overhead = _measure_overhead(ps)
    wake_up, _ = _measure_cold_costs(ps)
    return overhead, wake_up

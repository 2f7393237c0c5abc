"""One validation: run a workload live, simulate the same workload with the same policy,
KV and per-step overhead, and compare. The library entry point behind `sim validate`.

The live run goes first: the simulator's per-step CPU overhead is, unless given, the live
loop's measured median time per step outside the forward pass (over busy steps), so both
sides price the same work. Prefix caching is off on both sides (the live loop does not
reuse KV across requests); requests longer than the model's RoPE table are rejected on
both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from chunksim.core.spec import Workload
from chunksim.core.vllm_version import Device
from chunksim.latency.profile import Profile
from chunksim.live.settings import LiveSettings
from chunksim.sim.build import RunConfig, default_kv_blocks
from chunksim.validate.compare import (
    PADDED_ABOVE,
    TARGET_KEYS,
    after_prefill,
    compare_counts,
    compare_summaries,
    launch_stats,
    overhead_stats,
    step_error,
    step_predictions,
    worst_abs_error,
)
from chunksim.validate.repeat import live_repeatability

FORMAT = "chunksim-validation/1"


@dataclass
class Validation:
    """Both runs' records and summaries, and the report written as validation.json."""

    live: object
    """live.loop.LiveResult."""
    live_summary: dict
    """`summarize` of the live records (same keys as a simulation summary)."""
    sim: object
    """sim.engine.engine.SimResult."""
    sim_summary: dict
    """The simulation's summary."""
    report: dict
    """validation.json."""


def comparable_config(cfg: RunConfig, profile: Profile, settings: LiveSettings) -> RunConfig:
    """`cfg` with what both sides must share pinned: KV blocks resolved from the profile,
    prefix caching off, max_model_len capped by the model's RoPE table, no wake-up cost
    when the live loop spins while idle."""
    if cfg.engine.async_scheduling:
        raise ValueError("--async-scheduling: the live loop schedules synchronously, so "
                         "validation cannot compare it; drop --async-scheduling")
    if cfg.offload.active:
        raise ValueError("--kv-offload-gib: the live loop keeps no prefix cache, so it has "
                         "no CPU tier to compare; drop --kv-offload-gib")
    block_size = cfg.block_size_on(Device.of(profile.provenance))
    blocks = cfg.kv_blocks or default_kv_blocks(profile, block_size,
                                                cfg.gpu_memory_utilization)
    cap = settings.model.max_position
    mml = cfg.engine.max_model_len
    # a loop that spins while idle never goes cold: no wake-up cost on the simulated side
    engine = replace(cfg.engine, max_model_len=cap if mml is None else min(mml, cap),
                     wake_up=cfg.engine.wake_up and settings.idle_wait != "spin")
    return replace(cfg, kv_blocks=blocks, block_size=block_size, prefix_caching=False,
                   engine=engine)


def environment_notes(provenance: dict, live_meta: dict) -> list[str]:
    """What validation.json says when the table and the live loop may have run different
    attention kernels (a profile from before `sdpa_backends` was recorded, or another
    torch): their difference then shows as `table vs replay` in the step decomposition;
    and when the profile saw new step shapes cost more than their repeats."""
    notes = []
    live, prof = live_meta.get("sdpa_backends"), provenance.get("sdpa_backends")
    on_cuda = live_meta.get("live", {}).get("device") == "cuda"
    if on_cuda and live != prof:
        said = "torch's default kernels" if prof is None else ", ".join(prof)
        notes.append(f"attention kernels differ: the profile's SDPA used {said}, the live "
                     f"loop's {', '.join(live or ['torch defaults'])}; re-profile with this "
                     "build to compare like with like")
    from chunksim.profiler.first_call import costly_kind

    costly = costly_kind(provenance.get("first_call"))
    if costly is not None:
        notes.append(f"when profiled, the first call of a new {costly[0]} shape took "
                     f"{costly[1]:.1f}x its repeat: live steps, new shapes each, will run "
                     "slower than the warm-timed table")
    from chunksim.decoder.step import ATTENTION_BACKEND

    prof_attn = provenance.get("attention_backend")
    if prof_attn and prof_attn != ATTENTION_BACKEND:
        notes.append(f"attention code differs: the profile was measured with {prof_attn}, "
                     f"the live loop runs {ATTENTION_BACKEND} (on CPU a chunk after cached "
                     "context now costs less); re-profile to compare like with like")
    prof_torch = provenance.get("torch_version")
    if prof_torch and live_meta.get("torch_version") != prof_torch:
        notes.append(f"torch differs: profile {prof_torch}, live "
                     f"{live_meta.get('torch_version')}")
    return notes


def _serve_live(workload: Workload, cfg: RunConfig, kv, settings: LiveSettings,
               device: Device, runtime):
    """One live run of `workload` (a fresh policy object each time, the model of
    `runtime` where there is one): the LiveResult and its summary."""
    from chunksim.live.loop import LiveEngine
    from chunksim.sim.metrics.metrics import summarize
    from chunksim.sim.records.records import StepTotals

    policy = cfg.make_policy(device)
    live = LiveEngine(workload, policy, kv, settings, cfg.engine.max_model_len,
                      runtime=runtime).run()
    return live, summarize(live.requests, StepTotals.of(live.steps), live.itl_s, cfg.slos_s,
                           live.meta)


def validate(workload: Workload, profile: Profile, cfg: RunConfig,
             settings: LiveSettings | None = None, runtime=None,
             replay_steps: int = 180, live_runs: int = 1) -> Validation:
    """Run `workload` live on the profile's model/device/dtype/threads, then simulate it.
    `replay_steps` live steps (a third of them with prefill, where there are enough) are
    re-timed in isolation to split the step-level error, and a sixth as many (at least 8)
    of the profile's own points before and after the run (0 = skip both). `live_runs > 1`
    serves the workload that many times in all (after the first run's re-timing; the
    records and every other figure are the first run's) and reports how far the runs
    differ from each other (`live_repeatability`, validate.repeat)."""
    if live_runs < 1:
        raise ValueError(f"--live-runs {live_runs}: use 1 or more")
    if cfg.engine.speculative.enabled:
        raise ValueError("speculative decoding is simulated only: the live loop runs no "
                         "drafter to compare with; drop --num-speculative-tokens")
    from chunksim.core.kv_cache import KVConfig, usable_blocks
    from chunksim.latency.select import latency_model
    from chunksim.sim.run import simulate

    if profile.kind == "components" and replay_steps > 0:
        raise ValueError(f"--replay-steps {replay_steps}: re-timing a component profile's "
                         f"own points is not supported ({profile.path}); pass "
                         f"--replay-steps 0")

    settings = settings or LiveSettings.from_profile(profile.provenance)
    notes = []
    if cfg.prefix_caching:
        notes.append("prefix caching off on both sides (the live loop does not reuse KV)")
    cfg = comparable_config(cfg, profile, settings)
    device = Device.of(profile.provenance)
    kv = KVConfig(usable_blocks(cfg.kv_blocks), cfg.block_size, False,
                  workload.prefix_block_tokens)  # the simulated side's blocks
    probe = None
    if replay_steps > 0:  # the machine's speed on the table's own points, just before
        from chunksim.live.runtime import Runtime, pinned_threads
        from chunksim.validate.remeasure import probe_rows, remeasure_points

        with pinned_threads(settings.threads):
            runtime = runtime or Runtime(settings)
            rows = probe_rows(profile.table, settings.model.max_position,
                              count=max(8, replay_steps // 6), seed=cfg.engine.seed)
            probe = (rows, remeasure_points(runtime, profile.table, rows))
    live, live_summary = _serve_live(workload, cfg, kv, settings, device, runtime)

    if cfg.step_overhead_s is None:
        cfg = replace(cfg, step_overhead_s=live.meta["step_overhead_s"])
        source = "live median (busy steps)"
    else:
        source = "given (--step-overhead-ms)"
    sim, sim_summary = simulate(workload, profile, cfg)

    latency = latency_model(profile, 0.0)
    predicted_s = step_predictions(live.steps, latency)
    live.steps["predicted_forward_s"] = predicted_s
    metrics = compare_summaries(sim_summary, live_summary)
    worst_key, worst = worst_abs_error(metrics)
    prov = profile.provenance
    step_err = step_error(live.steps, predicted_s)
    drift = None
    if replay_steps > 0:
        step_err["decomposition"] = decompose(live, profile, settings, predicted_s,
                                              replay_steps, cfg.engine.seed, probe)
        drift = drift_corrected(workload, profile, cfg, live_summary,
                                step_err["decomposition"]["drift_factor"])
    runtime = live.replayer.runtime  # the model again for further runs, without its pools
    live.replayer = None  # frees the model reference and the KV pools
    repeat = None
    if live_runs > 1:
        # only the summaries are kept: each run's KV pools go before the next run's
        again = [_serve_live(workload, cfg, kv, settings, device, runtime)[1]
                 for _ in range(live_runs - 1)]
        repeat = live_repeatability([live_summary, *again], sim_summary)
    notes.extend(environment_notes(prov, live.meta))
    report = {
        "format": FORMAT,
        "metrics": metrics,
        "target_keys": list(TARGET_KEYS),
        "worst_abs_error_pct": worst,
        "worst_metric": worst_key,
        "step_error": step_err,
        "drift_corrected": drift,
        "step_overhead_s": cfg.step_overhead_s,
        "step_overhead_source": source,
        "live_overhead": overhead_stats(live.steps),
        "live_launch": launch_stats(live.steps),
        "live_after_prefill": after_prefill(live.steps),
        "live_repeatability": repeat,
        "counts": compare_counts(sim_summary, live_summary),
        "profile": profile.path.rsplit("/", 1)[-1],
        "profile_sha256": profile.sha256,
        "profile_label": profile.label,
        "profile_step_overhead_s": prov.get("step_overhead_s"),
        "live": {**settings.as_dict(), "wall_s": live.meta["wall_s"],
                 "idle_s": live.meta["idle_s"], "kv_pools": live.meta["kv_pools"],
                 "kv_slot_moves": live.meta["kv_slot_moves"],
                 "gc_collections": live.meta["gc_collections"],
                 "gc_pause_s": live.meta["gc_pause_s"],
                 "gpu_clock": live.meta.get("gpu_clock"),
                 "torch_version": live.meta["torch_version"],
                 "profile_torch_version": prov.get("torch_version"),
                 "sdpa_backends": live.meta["sdpa_backends"],
                 "profile_sdpa_backends": prov.get("sdpa_backends")},
        "policy": sim_summary["policy"],
        "policy_params": sim_summary["policy_params"],
        "workload": workload.name,
        "workload_params": dict(workload.params),
        "requests": len(workload.requests),
        "kv_blocks": cfg.kv_blocks,
        "block_size": cfg.block_size,
        "max_model_len": cfg.engine.max_model_len,
        "prefix_caching": False,
        "jitter": cfg.engine.jitter,
        "notes": notes,
        "definitions": "error_pct = (predicted - measured) / measured * 100 (predicted = "
                       "simulator, measured = live); metrics as vllm bench serve defines "
                       "them (median = P50); step_error compares the table's forward time "
                       "for each live step's composition with its measured forward time "
                       "(median_pct signed, p99_pct = P99 of |error|); live_after_prefill "
                       "pairs each decode-only step right after a prefill step with the "
                       "decode steps after it (validate.compare.after_prefill); "
                       "live_repeatability (--live-runs) holds every live run's measured "
                       "values and their spread, (max / min - 1) * 100.",
    }
    return Validation(live, live_summary, sim, sim_summary, report)


def drift_corrected(workload: Workload, profile: Profile, cfg: RunConfig,
                    live_summary: dict, factor: float) -> dict:
    """The simulation redone on the table scaled by `factor` (how much slower the machine
    ran the table's own points around the live run than when profiling): what the error
    would be had the profile been measured at the live run's machine speed. A diagnostic
    beside the raw figures, never instead of them."""
    from chunksim.sim.run import simulate

    t = profile.table.copy()
    for col in ("median_s", "p10_s", "p90_s", "mean_s"):
        if col in t:
            t[col] = t[col] * factor
    scaled = profile.with_table(t, path=f"{profile.path} (x{factor:.3f})")
    _, s = simulate(workload, scaled, cfg)
    metrics = compare_summaries(s, live_summary)
    key, worst = worst_abs_error(metrics)
    return {"factor": factor, "worst_abs_error_pct": worst, "worst_metric": key,
            "metrics": {k: metrics[k]["error_pct"] for k in metrics}}


LONGEST_REPLAYED = 5
"""The live steps with the longest forward times are always among those re-timed."""


def decompose(live, profile: Profile, settings: LiveSettings, predicted_s: np.ndarray,
              count: int, seed: int, probe: tuple | None = None) -> dict:
    """Re-time a sample of live steps alone and the probe grid points again (see
    `live.replay`): table-vs-replay, replay-vs-live, and how far the profile's own points
    moved since profiling (`profile_drift`, before and after the live run; `drift_factor`
    = median of now / table over both). Adds `replay_forward_s` to the live steps."""
    from chunksim.live.runtime import pinned_threads
    from chunksim.validate.remeasure import probe_rows, remeasure_points

    steps = live.steps
    rng = np.random.default_rng(seed)
    prefill = np.flatnonzero(steps["prefill_tokens"].to_numpy() > 0)
    decode = np.flatnonzero(steps["prefill_tokens"].to_numpy() == 0)
    n_pre = min(len(prefill), count // 3)
    n_dec = min(len(decode), count - n_pre)
    # the longest live steps always (a long prompt's one big prefill sets the TTFT tail
    # of everything queued behind it), the rest drawn at random
    forward = steps["forward_s"].to_numpy()
    longest = np.argsort(-forward, kind="stable")[:min(LONGEST_REPLAYED, n_pre + n_dec)]
    pre_rest = np.setdiff1d(prefill, longest)
    dec_rest = np.setdiff1d(decode, longest)
    n_long_pre = int(np.isin(longest, prefill).sum())
    sample = np.sort(np.concatenate([
        longest,
        rng.choice(pre_rest, max(0, min(len(pre_rest), n_pre - n_long_pre)), replace=False),
        rng.choice(dec_rest, max(0, min(len(dec_rest), n_dec - (len(longest) - n_long_pre))),
                   replace=False)])).astype(int)
    rows, before_s = probe if probe is not None else (
        probe_rows(profile.table, settings.model.max_position, seed=seed), None)
    with pinned_threads(settings.threads):
        replay_s = live.replayer.replay(sample.tolist())
        now_s = remeasure_points(live.replayer.runtime, profile.table, rows)
    col = np.full(len(steps), np.nan)
    col[sample] = replay_s
    steps["replay_forward_s"] = col
    measured = steps["forward_s"].to_numpy()[sample]
    table_s = profile.table.loc[rows, "median_s"].to_numpy()
    is_pre = steps["prefill_tokens"].to_numpy()[sample] > 0
    padded = (steps["decode_padding"].to_numpy()[sample] > PADDED_ABOVE
              if "decode_padding" in steps else np.zeros(len(sample), bool))

    def stats(pred, meas) -> dict:
        e = (pred - meas) / meas * 100.0
        if len(e) == 0:
            return {"steps": 0}
        return {"steps": int(len(e)), "median_pct": float(np.median(e)),
                "median_abs_pct": float(np.median(np.abs(e))),
                "p90_abs_pct": float(np.percentile(np.abs(e), 90))}

    return {
        "table_vs_replay": stats(predicted_s[sample], replay_s),
        "replay_vs_live": stats(replay_s, measured),
        "table_vs_live": stats(predicted_s[sample], measured),
        "table_vs_replay_prefill": stats(predicted_s[sample][is_pre], replay_s[is_pre]),
        "table_vs_replay_decode": stats(predicted_s[sample][~is_pre], replay_s[~is_pre]),
        "replay_vs_live_prefill": stats(replay_s[is_pre], measured[is_pre]),
        "replay_vs_live_decode": stats(replay_s[~is_pre], measured[~is_pre]),
        # decode-only steps whose padded decode attention read over PADDED_ABOVE x their
        # contexts
        # (live.records.decode_padding): what padding costs beyond the table's prices
        "table_vs_replay_padded_decode": stats(predicted_s[sample][~is_pre & padded],
                                               replay_s[~is_pre & padded]),
        "table_vs_replay_unpadded_decode": stats(predicted_s[sample][~is_pre & ~padded],
                                                 replay_s[~is_pre & ~padded]),
        "longest_steps": [
            {"step": int(i), "prefill_tokens": int(steps["prefill_tokens"].iat[i]),
             "decodes": int(steps["decodes"].iat[i]), "table_s": float(predicted_s[i]),
             "replay_s": float(col[i]), "live_s": float(forward[i])} for i in longest],
        "profile_drift": {**stats(table_s, now_s), "points": len(rows)},
        "profile_drift_before": ({**stats(table_s, before_s), "points": len(rows)}
                                 if before_s is not None else None),
        "drift_factor": float(np.median(np.concatenate(
            [now_s] + ([before_s] if before_s is not None else [])) / np.concatenate(
            [table_s] + ([table_s] if before_s is not None else [])))),
        "note": "x_vs_y = (x - y) / y; table = profile interpolated at the step's shape, "
                "replay = the same step re-timed alone after the run, live = as it ran; "
                "profile_drift = the profile's own grid points re-timed now",
    }

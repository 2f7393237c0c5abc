"""`simulate` for fleets: build the replicas and router of a `RunConfig`, run them, and
summarize the fleet as one run (vLLM bench keys over every request) plus per-replica rows.

A one-replica fleet returns exactly what the lone engine does (same records, same summary):
the `replica` columns and `replicas` rows appear from two replicas on.

A mixed fleet (`--replica-groups`) builds each replica from its group's profile: its
latency model, KV capacity (from that profile unless --kv-blocks), length cap and the
policy defaults of its device. The `profile` passed in stands for the fleet in the
summary (the CLI passes the first group's); `fleet.groups` and each replica row name the
profiles. Routers weigh work by each replica's time per token (`_token_times`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from chunksim.core.kv_cache import prefix_hit_rate
from chunksim.core.shape import BatchShape
from chunksim.core.spec import Workload
from chunksim.latency.coverage import profile_ranges
from chunksim.latency.profile import Profile, load_profile
from chunksim.sim.build import (
    EngineParts,
    RunConfig,
    build_engine,
    engine_parts,
    kv_bytes_per_token,
)
from chunksim.sim.engine.engine import Engine, SimResult
from chunksim.sim.engine.offload import offload_meta
from chunksim.sim.engine.settle import SloWatch
from chunksim.sim.fleet.fleet import Fleet
from chunksim.sim.fleet.pd import Disaggregated, first_tokens
from chunksim.sim.fleet.records import merge_pd, merge_results, replica_rows, transfer_stats
from chunksim.sim.fleet.routers import make_router
from chunksim.sim.records.records import StepLog
from chunksim.sim.run_summary import summarize_run

TOKEN_TIME_SHAPE = BatchShape(prefill_tokens=1024)
"""The step that measures a profile's time per token for routing: one 1024-token prefill
chunk (compute-bound on a GPU, where replicas of different hardware differ most)."""


@functools.lru_cache(maxsize=16)
def group_profile(name: str) -> Profile:
    """A --replica-groups profile, loaded once per process (workers run many jobs)."""
    return load_profile(name)


def _token_times(latencies: list) -> list[float] | None:
    """Each replica's time per token over the fastest's (None when all are equal)."""
    times = [lat.step_s(TOKEN_TIME_SHAPE)[0] for lat in latencies]
    fastest = min(times)
    rel = [t / fastest for t in times]
    return None if all(r == 1.0 for r in rel) else rel


def simulate_fleet(workload: Workload, profile: Profile, cfg: RunConfig,
                   settle_slos_ms: Mapping[str, float] | None = None) -> tuple[SimResult, dict]:
    """`settle_slos_ms`: stop once one of these bounds has certainly failed (`settle`)."""
    f = cfg.fleet
    parts = engine_parts(workload, profile, cfg)
    if f.pd is not None:
        return _simulate_pd(workload, profile, cfg, parts, settle_slos_ms)
    n = f.replica_count
    token_times = None
    log = _step_log(profile)
    if f.groups is None:
        engines = [build_engine(workload, cfg, parts, step_log=log) for _ in range(n)]
    else:
        engines, latencies, names = [], [], []
        for name, count in f.groups:
            prof = group_profile(name)
            group_parts = engine_parts(workload, prof, cfg)
            for _ in range(count):
                engines.append(build_engine(workload, cfg, group_parts, step_log=log))
                latencies.append(group_parts.latency)
                names.append(prof.label)
        token_times = _token_times(latencies)
    router = make_router(f.router or "round-robin", n, cfg.engine.seed, f.prefix_load_cap)
    fleet = Fleet(workload, engines, router, f.router_staleness_s, token_times)
    if settle_slos_ms:
        SloWatch(settle_slos_ms, workload).attach(engines)
    results = fleet.run()
    if n == 1:
        return results[0], summarize_run(results[0], profile, cfg, parts)
    result = merge_results(results, fleet.dest)
    _pool_kv_meta(result, engines)
    result.meta.update(fleet={"replicas": n, "router": router.name,
                              "router_staleness_ms": f.router_staleness_s * 1000.0})
    if f.groups is not None:
        result.meta["fleet"]["groups"] = [
            {"profile": group_profile(name).label, "sha256": group_profile(name).sha256,
             "replicas": count} for name, count in f.groups]
    summary = summarize_run(result, profile, cfg, parts)
    # busy fraction of the fleet: the mean over its replicas
    if summary["busy_fraction"] is not None:  # None: the run completed nothing
        summary["busy_fraction"] /= n
    summary["replicas"] = replica_rows(results, fleet.dest, summary["duration"])
    if f.groups is not None:
        for row, name, t in zip(summary["replicas"], names, token_times or [1.0] * n,
                                strict=True):
            row["profile"] = name
            row["relative_token_time"] = t
        models = sorted({_model_name(group_profile(name)) for name, _ in f.groups})
        if len(models) > 1:
            summary["warnings"].append(
                f"--replica-groups mixes profiles of different models ({', '.join(models)}): "
                "a router sends any request to any replica, so the fleet serves one model; "
                "give profiles of the same model on each GPU")
    return result, summary


def _step_log(profile: Profile):
    """Each engine's StepLog: every step kept (the fleet merges them), its totals folded
    over the grid of `profile` (the fleet's, as the summary reads coverage against it), so
    the summary takes each engine's counts as folded rather than reading its rows again."""
    ranges = profile_ranges(profile)
    return lambda: StepLog(ranges=ranges)


def _pool_kv_meta(result: SimResult, engines: list[Engine]) -> None:
    """The fleet's prefix-cache hit rate and CPU-tier keys, over every engine's cache."""
    if result.meta.get("prefix_caching"):
        result.meta["prefix_cache_hit_rate"] = prefix_hit_rate(e.core.kv for e in engines)
    _offload_meta(result, engines)


def _offload_meta(result: SimResult, engines: list[Engine]) -> None:
    """The CPU KV tier's summary keys over every replica's own tier (when they have one)."""
    tiers = [e.core.offload for e in engines if e.core.offload is not None]
    if tiers:
        result.meta.update(offload_meta(tiers))


def _model_name(profile: Profile) -> str:
    model = profile.provenance.get("model")
    return str(model.get("name") if isinstance(model, dict) else model)


def _simulate_pd(workload: Workload, profile: Profile, cfg: RunConfig, parts: EngineParts,
                 settle_slos_ms: Mapping[str, float] | None = None
                 ) -> tuple[SimResult, dict]:
    f = cfg.fleet
    p, d = f.pd_counts
    per_token = kv_bytes_per_token(profile, f"--pd {f.pd}", "to time KV transfers")
    prompts = first_tokens(workload)
    log = _step_log(profile)
    prefill = [build_engine(prompts, cfg, parts, step_log=log) for _ in range(p)]
    decode = [build_engine(workload, cfg, parts, step_log=log) for _ in range(d)]
    seed = cfg.engine.seed
    prouter = make_router(f.router or "round-robin", p, seed, f.prefix_load_cap)
    drouter = make_router(f.decode_router or "least-tokens", d, seed + 1, f.prefix_load_cap,
                          flag="--decode-router")
    bw, lat = f.link
    pd = Disaggregated(workload, prefill, decode, prouter, drouter, f.router_staleness_s,
                       per_token, bw, lat)
    if settle_slos_ms:
        SloWatch(settle_slos_ms, workload).attach(decode, first_engines=prefill)
    pres, dres = pd.run()
    outputs = workload.requests.output_tokens.copy()
    result = merge_pd(pres, pd.prefill.dest, dres, pd.ddest, pd.transfer_s, pd.kv_bytes,
                      outputs)
    engines = prefill + decode
    _pool_kv_meta(result, engines)
    result.meta.update(fleet={
        "prefill_instances": p, "decode_instances": d, "router": prouter.name,
        "decode_router": drouter.name, "router_staleness_ms": f.router_staleness_s * 1000.0,
        "kv_link": f.kv_link, "kv_link_gbps": bw * 8 / 1e9, "kv_link_latency_us": lat * 1e6,
        "kv_bytes_per_token": per_token})
    summary = summarize_run(result, profile, cfg, parts)
    if summary["busy_fraction"] is not None:  # None: the run completed nothing
        summary["busy_fraction"] /= p + d
    rows = replica_rows(pres, pd.prefill.dest, summary["duration"])
    for row in rows:
        row["pool"] = "prefill"
    drows = replica_rows(dres, pd.ddest, summary["duration"])
    for row in drows:
        row["pool"] = "decode"
        row["replica"] += p
    summary["replicas"] = rows + drows
    summary["kv_transfer"] = transfer_stats(pd.transfer_s, pd.kv_bytes)
    return result, summary

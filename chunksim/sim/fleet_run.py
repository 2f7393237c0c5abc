"""`simulate` for fleets: build the replicas and router of a `RunConfig`, run them, and
summarize the fleet as one run (vLLM bench keys over every request) plus per-replica rows.

A one-replica fleet returns exactly what the lone engine does (same records, same summary):
the `replica` columns and `replicas` rows appear from two replicas on.
"""

from __future__ import annotations

from chunksim.core.spec import Workload
from chunksim.latency.profile import Profile
from chunksim.sim.engine import Engine, SimResult
from chunksim.sim.fleet import Fleet
from chunksim.sim.fleet_records import merge_results, replica_rows
from chunksim.sim.routers import make_router
from chunksim.sim.run import RunConfig, engine_parts, summarize_run


def simulate_fleet(workload: Workload, profile: Profile,
                   cfg: RunConfig) -> tuple[SimResult, dict]:
    f = cfg.fleet
    device, latency, kv = engine_parts(workload, profile, cfg)
    n = f.replicas or 1
    engines = [Engine(workload, cfg.make_policy(device), latency, kv, cfg.engine)
               for _ in range(n)]
    router = make_router(f.router or "round-robin", n, cfg.engine.seed, f.prefix_load_cap)
    fleet = Fleet(workload, engines, router, f.router_staleness_s)
    results = fleet.run()
    if n == 1:
        return results[0], summarize_run(results[0], profile, cfg, latency, device)
    result = merge_results(results, fleet.dest)
    hits = sum(e.core.kv.hit_tokens for e in engines if e.core.kv.prefix_caching)
    queries = sum(e.core.kv.query_tokens for e in engines if e.core.kv.prefix_caching)
    if result.meta.get("prefix_caching"):
        result.meta["prefix_cache_hit_rate"] = hits / queries if queries else None
    result.meta.update(fleet={"replicas": n, "router": router.name,
                              "router_staleness_ms": f.router_staleness_s * 1000.0})
    summary = summarize_run(result, profile, cfg, latency, device)
    # busy fraction of the fleet: the mean over its replicas
    summary["busy_fraction"] /= n
    summary["replicas"] = replica_rows(results, fleet.dest, summary["duration"])
    return result, summary


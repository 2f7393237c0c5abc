"""`sim sweep`'s flags as a grid: the configurations, rates, seeds and workload kinds
checked and crossed into grid points (`sweep.grid`), before anything runs."""

from __future__ import annotations

from chunksim.sim.run import RunConfig
from chunksim.workloads.options import WorkloadOptions


def sweep_points(policies: str, chunks: str, spec_tokens: str | None, rates: str | None,
                 seeds: str | None, workloads: str | None, run_cfg: RunConfig,
                 workload_opts: WorkloadOptions, load_profile):
    """(profile, grid points) of `sim sweep`'s flags; `load_profile(run_cfg)` loads the
    profile once the flags hold. Raises ValueError naming the flag."""
    from chunksim.sweep.configs import (
        make_configs,
        parse_floats,
        parse_ints,
        parse_policies,
        parse_spec_tokens,
        refuse_unused_knobs,
        with_spec_tokens,
    )
    from chunksim.sweep.grid import grid_points, parse_workloads
    from chunksim.workloads.options import build_workload

    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    ks = parse_spec_tokens(spec_tokens, run_cfg)
    if ks is not None:  # a setting here, not an axis (the table's keys have no column)
        if len(ks) > 1:
            raise ValueError(f"--num-speculative-tokens {spec_tokens}: sim sweep takes one "
                             "value (sim compare and sim capacity take a list)")
        run_cfg = with_spec_tokens(run_cfg, ks[0])
    configs = make_configs(specs, parse_ints(chunks, "--chunks"))
    rate_list = parse_floats(rates, "--rates") if rates is not None else [workload_opts.rate]
    seed_list = (parse_ints(seeds, "--seeds", minimum=0, example="0,1,2") if seeds is not None
                 else [workload_opts.seed])
    kinds = parse_workloads(workloads, workload_opts)
    profile = load_profile(run_cfg)
    points = grid_points(workload_opts, run_cfg, profile.sha256, kinds, configs, rate_list,
                         seed_list)
    for kind in kinds:  # bad workload flags fail here, once, not in every worker
        build_workload(next(p.job.workload for p in points
                            if p.key["workload_kind"] == kind.value))
    return profile, points

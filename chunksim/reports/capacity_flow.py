"""`sim capacity` below the command line: its flags' rules (`capacity_plan`), the search
(`search_capacity`; `sweep.capacity_answer`), and its tables and --out set
(`show_capacity`), or the fewest GPUs for a target rate (`fewest_gpus`). The command
parses, calls these, and says what was written; Ctrl-C during the search is its to
report (the runs finished so far stay in `sweep.probe_store`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.cost import CostConfig
from chunksim.workloads.options import WorkloadKind, WorkloadOptions

DEFAULT_MAX_RATE = 1024.0
DEFAULT_TOL = 0.03
DEFAULT_MAX_GPUS = 64


@dataclass(frozen=True)
class CapacityFlags:
    """`sim capacity`'s own flags, as given (the command's help says what each means)."""

    slo: list[str] | None = None
    max_reject_pct: float = 0.0
    policies: str = "whole,chunk,budget"
    chunks: str = "256,512,1024,2048"
    seeds: str | None = None
    spec_tokens: str | None = None
    max_rate: float = DEFAULT_MAX_RATE
    tol: float = DEFAULT_TOL
    gpus: int | None = None
    target_rate: float | None = None
    max_gpus: int | None = None
    fleet: list[str] | None = None
    svg: bool = False
    report: bool = True


@dataclass(frozen=True)
class CapacityPlan:
    """The flags checked and parsed, and the profile loaded, before anything runs."""

    flags: CapacityFlags
    run_cfg: RunConfig
    workload: WorkloadOptions
    seeds: list[int]
    slos: dict[str, float]
    specs: list
    chunks: list[int]
    template: Any
    """With --gpus / --target-rate: the --fleet entry that sets every split's routers."""
    trace: bool
    profile: Any
    params: Any
    """The rate search's parameters (`sweep.capacity.search_params`)."""
    configs: list[Config]


def capacity_plan(flags: CapacityFlags, run_cfg: RunConfig, workload: WorkloadOptions,
                  load_profile) -> CapacityPlan:
    """Check `flags` against each other and parse them; `load_profile(run_cfg)` loads the
    profile once the flags hold. Raises ValueError naming the flag."""
    from chunksim.sweep.capacity import check_max_rate, search_params
    from chunksim.sweep.configs import (
        make_configs,
        parse_ints,
        parse_policies,
        parse_spec_tokens,
        refuse_unused_knobs,
        with_spec_tokens,
    )
    from chunksim.sweep.fleets import gpu_splits
    from chunksim.sweep.seeds import seed_list
    from chunksim.sweep.slos import parse_capacity_slos

    f = flags
    seeds = seed_list(f.seeds, workload.seed)
    slos = parse_capacity_slos(f.slo)
    specs = parse_policies(f.policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    chunk_list = parse_ints(f.chunks, "--chunks")
    layouts, template = _fleets(f.fleet, f.gpus, f.target_rate, f.max_gpus, workload, run_cfg)
    ks = parse_spec_tokens(f.spec_tokens, run_cfg)
    if ks is not None and f.target_rate is not None:  # the GPU search takes one k
        if len(ks) > 1:
            raise ValueError(f"--target-rate searches GPUs for one configuration of draft "
                             f"tokens; give one --num-speculative-tokens, not {f.spec_tokens}")
        run_cfg, ks = with_spec_tokens(run_cfg, ks[0]), None
    if not 0 < f.tol < 1:
        raise ValueError(f"--tol {f.tol}: must be in (0, 1), e.g. 0.03 for 3 %")
    if f.target_rate is None:
        check_max_rate(f.max_rate, workload.rate)
    trace = workload.trace is not None or workload.workload is WorkloadKind.TRACE
    profile = load_profile(run_cfg)
    params = search_params(workload, f.max_rate, f.tol, profile, run_cfg)
    devices = profile.devices
    configs = make_configs(specs, chunk_list, gpu_splits(_engines(f.gpus, devices), template)
                           if f.gpus is not None else layouts or None, ks)
    if f.target_rate is not None and devices > 1:
        raise ValueError(f"--target-rate {f.target_rate:g} counts one GPU per engine, and "
                         f"profile {profile.path} spans {devices} GPUs an engine (--tp/--ep); "
                         f"rank splits of a GPU count with --gpus instead")
    if f.target_rate is not None:
        given = [n for n, v, d in (("--max-rate", f.max_rate, DEFAULT_MAX_RATE),
                                   ("--tol", f.tol, DEFAULT_TOL)) if v != d]
        if given:
            verb = "shape" if len(given) > 1 else "shapes"
            raise ValueError(f"{' and '.join(given)} {verb} the rate search; --target-rate "
                             "probes the target rate only: drop them")
    return CapacityPlan(f, run_cfg, workload, seeds, slos, specs, chunk_list, template, trace,
                        profile, params, configs)


def search_capacity(plan: CapacityPlan, workers: int | None, ray: str | None, store,
                    figures: bool):
    """Each configuration's capacity (`sweep.capacity_answer`); with `store` (a
    `sweep.probe_store`), finished runs are kept for a resumed search and reused.
    `figures`: the answer will be drawn, so matplotlib loads while the probes run."""
    from chunksim.progress import ProgressBar
    from chunksim.sweep.capacity_answer import capacity_answer
    from chunksim.sweep.probe_store import ResumableRunner
    from chunksim.sweep.runner import Runner

    f = plan.flags
    if figures:
        from chunksim.reports.style import load_in_background

        load_in_background()
    with (Runner(plan.profile, workers, ray) if store is None else
          ResumableRunner(plan.profile, workers, ray, store)) as runner, \
            ProgressBar("capacity probes", open_ended=True) as bar:
        return capacity_answer(plan.configs, plan.workload, plan.run_cfg, plan.slos,
                               bool(f.slo), plan.params, plan.seeds, runner,
                               f.max_reject_pct, progress=bar, rank_splits=f.gpus is not None)


def show_capacity(plan: CapacityPlan, ans, cost_cfg: CostConfig, out: Path | None,
                  command: str) -> list[str]:
    """Print the capacities, the verdict and what closes it; write --out `out` as one set.
    The names written, in order (none without `out`)."""
    from chunksim.reports.console import print_capacity, print_verdict
    from chunksim.sweep.capacity import probe_workload

    f, profile, params = plan.flags, plan.profile, plan.params
    entries, verdict, best, window = ans.entries, ans.verdict, ans.best, ans.window
    print_capacity(entries, best, plan.slos)
    print_verdict(verdict, capacity_searched=True, trace=plan.trace)
    split_table = split_list = None
    tail = capacity_tail(verdict, entries, plan.run_cfg, plan.workload, params, profile,
                         cost_cfg)
    if ans.splits is not None:
        from chunksim.reports.console import print_splits
        from chunksim.sweep.gpus_io import split_rows, splits_csv

        split_list = split_rows(ans.splits, profile.devices)
        print_splits(split_list, f.gpus)
        split_table = splits_csv(ans.splits, profile.devices)
    tail.print()
    if out is None:
        return []
    from chunksim import atomic
    from chunksim.reports.answer_files import staged
    from chunksim.sweep.capacity_io import capacity_document, probes_csv

    with staged(out) as stage:  # the whole set is staged, then swapped in (as sim run)
        doc = capacity_document(entries, best, plan.slos, params, profile,
                                probe_workload(plan.workload, params.start,
                                               plan.workload.seed, params),
                                plan.seeds, verdict, window)
        doc.update(tail.document())
        atomic.write_json(stage / "capacity.json", doc)
        atomic.write_text(stage / "capacity_probes.csv", probes_csv(entries))
        formats = ("png", "svg") if f.svg else ("png",)
        names = ["capacity.json", "capacity_probes.csv"]
        if split_table is not None:
            atomic.write_text(stage / "splits.csv", split_table)
            names.append("splits.csv")
        if f.report:
            from chunksim.reports.capacity_report import write_capacity_report

            workload = next((p.summary.get("workload") for e in entries for p in e.probes), "?")
            name = str(workload).split("-")[0] + " (rate varied)"
            paths = write_capacity_report(stage, entries, verdict, profile, window, name,
                                          command, formats, plan.trace, splits=split_list,
                                          tail=tail.section)
        else:
            from chunksim.reports.capacity_report import write_capacity_plots

            paths = write_capacity_plots(stage, entries, best, plan.slos, profile, formats)
        names += [p.name for p in paths]
    return names


def fewest_gpus(plan: CapacityPlan, cost_cfg: CostConfig, workers: int | None,
                ray: str | None, out: Path | None) -> list[str]:
    """`--target-rate`: the fewest GPUs meeting the SLOs at the target, and their split;
    prints them, writes --out `out` as one set. The names written (none without `out`)."""
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_gpu_search
    from chunksim.sweep.gpus import gpu_answer
    from chunksim.sweep.runner import Runner

    f = plan.flags
    with Runner(plan.profile, workers, ray) as runner, \
            ProgressBar("GPU search probes", open_ended=True) as bar:
        search = gpu_answer(f.target_rate, f.max_gpus or DEFAULT_MAX_GPUS, plan.specs,
                            plan.chunks, plan.template, plan.workload, plan.run_cfg,
                            plan.slos, plan.params, plan.seeds, runner, f.max_reject_pct, bar)
    print_gpu_search(search, plan.slos)
    tail = gpu_search_tail(search, plan.run_cfg, plan.workload, plan.profile, cost_cfg)
    tail.print()
    if out is None:
        return []
    from chunksim import atomic
    from chunksim.reports.answer_files import staged
    from chunksim.sweep.capacity_io import probes_csv
    from chunksim.sweep.gpus_io import gpu_search_document

    with staged(out) as stage:
        entries = [e for _, t in sorted(search.trials.items()) for e in t.entries]
        gdoc = gpu_search_document(search, plan.slos, plan.seeds)
        gdoc.update(tail.document())
        atomic.write_json(stage / "gpus.json", gdoc)
        atomic.write_text(stage / "gpu_probes.csv", probes_csv(entries))
    return ["gpus.json", "gpu_probes.csv"]


def _engines(gpus: int, devices: int) -> int:
    """Engines in `gpus` GPUs when each engine spans `devices` (a --tp / --ep profile)."""
    if gpus % devices:
        raise ValueError(f"--gpus {gpus}: the profile's engine spans {devices} GPUs (its "
                         f"--tp/--ep); give a multiple of {devices}")
    return gpus // devices


def _fleets(entries: list[str] | None, gpus: int | None, target_rate: float | None,
            max_gpus: int | None, workload: WorkloadOptions, run_cfg: RunConfig):
    """(--fleet layouts, --fleet template): layouts searched side by side, or, with --gpus
    / --target-rate, the one layout-less entry that sets every split's routers and link.
    Refuses the combinations that would leave a flag unused."""
    from chunksim.sweep.fleets import parse_fleet, parse_fleets, refuse_fleet_flags

    if max_gpus is not None and target_rate is None:
        raise ValueError("--max-gpus bounds the --target-rate search; give --target-rate R")
    if gpus is not None and target_rate is not None:
        raise ValueError(f"--gpus {gpus} ranks the splits of {gpus} GPUs; --target-rate "
                         f"{target_rate:g} finds the fewest GPUs (bounded by --max-gpus): "
                         "give one")
    sized = "--gpus" if gpus is not None else "--target-rate" if target_rate is not None \
        else None
    if sized is None:
        layouts = parse_fleets(entries)
        if layouts:
            refuse_fleet_flags(run_cfg.fleet, "--fleet")
        return layouts, None
    refuse_fleet_flags(run_cfg.fleet, sized)
    if target_rate is not None and workload.rate is not None:
        raise ValueError(f"--rate {workload.rate:g} and --target-rate {target_rate:g}: the "
                         "GPU search probes the target rate only; drop --rate")
    if len(entries or []) > 1:
        raise ValueError(f"{sized} generates the layouts: give at most one --fleet entry, "
                         "without a layout, for their routers and link (e.g. --fleet "
                         "router=least-tokens,kv-link=ib-400g)")
    template = parse_fleet(entries[0], "--fleet", layout=False) if entries else None
    return [], template


def capacity_tail(verdict, entries, run_cfg, workload_opts, params, profile, cost_cfg):
    """The recommendation's deployment at its capacity, and every configuration's cost
    there (the capacity answer as a cost)."""
    from chunksim.reports.answer_tail import answer_tail
    from chunksim.sweep.capacity import probe_workload

    rec = verdict.recommended
    by_label = {e.config.label: e for e in entries}
    best = by_label.get(rec.label) if rec is not None else None
    rate = best.max_rate if best is not None else None
    opts = (probe_workload(workload_opts, rate, workload_opts.seed, params)
            if rate else workload_opts)
    return answer_tail((best.config, rate) if best is not None else None,
                       [(e.config, e.at_max, e.max_rate) for e in entries], run_cfg, opts,
                       profile, cost_cfg, "its capacity under the SLOs")


def gpu_search_tail(search, run_cfg, workload_opts, profile, cost_cfg):
    """`--target-rate`: the best configuration on the fewest GPUs, deployed at the target
    rate, and the cost of every configuration that met it there."""
    from chunksim.reports.answer_tail import answer_tail

    g = search.answer
    meeting = search.trials[g].meeting if g is not None else []
    opts = replace(workload_opts, rate=search.target)
    best = meeting[0] if meeting else None
    return answer_tail((best.config, search.target) if best is not None else None,
                       [(e.config, e.at_max, search.target) for e in meeting], run_cfg, opts,
                       profile, cost_cfg, "the target rate")

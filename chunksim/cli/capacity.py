"""`sim capacity`: the maximum sustainable request rate of each policy and chunk size
under SLOs, and the configuration to run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunksim.cli.answer_tail import with_cost_options
from chunksim.cli.grid_flags import (
    DEFAULT_CHUNKS,
    DEFAULT_POLICIES,
    ChunksOpt,
    FleetOpt,
    MaxRejectOpt,
    PoliciesOpt,
    RayOpt,
    SeedsOpt,
    SloOpt,
    SpecTokensOpt,
    WorkersOpt,
    check_max_rate,
    resolved_command,
)
from chunksim.cli.options import ProfileOpt, with_grid_run_options, with_workload_options
from chunksim.sim.run import RunConfig
from chunksim.sweep.cost import CostConfig
from chunksim.workloads.options import WorkloadKind, WorkloadOptions


@with_grid_run_options
@with_workload_options
@with_cost_options
def capacity(
    ctx: typer.Context,
    run_cfg: RunConfig,
    workload_opts: WorkloadOptions,
    cost_cfg: CostConfig,
    slo: SloOpt = None,
    max_reject_pct: MaxRejectOpt = 0.0,
    out: Annotated[Path | None, typer.Option("--out", help=(
        "Directory for capacity.json, capacity_probes.csv, the knee plots, report.md and "
        "report.html."))] = None,
    policies: PoliciesOpt = DEFAULT_POLICIES,
    chunks: ChunksOpt = DEFAULT_CHUNKS,
    seeds: SeedsOpt = None,
    spec_tokens: SpecTokensOpt = None,
    workers: WorkersOpt = None,
    ray: RayOpt = None,
    max_rate: Annotated[float, typer.Option("--max-rate", min=0.0, help=(
        "Stop doubling the rate here, req/s."))] = 1024.0,
    tol: Annotated[float, typer.Option("--tol", min=0.0, help=(
        "Stop bisecting when the bracket is within this relative width (0.03 = 3 %)."))] = 0.03,
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, rich_help_panel="Fleet", help=(
        "Which split of this many GPUs sustains the highest rate: G colocated replicas "
        "and every P/D split P + D = G, each under every --policies x --chunks "
        "configuration; prints them ranked (--out adds splits.csv)."))] = None,
    target_rate: Annotated[float | None, typer.Option(
        "--target-rate", min=0.0, rich_help_panel="Fleet", help=(
            "The fewest GPUs that meet the SLOs at this rate, req/s: for G = 1, 2, 4, ... "
            "then bisecting, every split of G is judged at this rate (one probe under "
            "every seed); --out writes gpus.json and gpu_probes.csv."))] = None,
    max_gpus: Annotated[int | None, typer.Option(
        "--max-gpus", min=1, rich_help_panel="Fleet", help=(
            "With --target-rate: the most GPUs tried (default 64)."))] = None,
    fleet: FleetOpt = None,
    svg: Annotated[bool, typer.Option("--svg/--no-svg", help=(
        "Also write every plot as SVG, for papers (drawing them takes about as long again "
        "as the PNGs)."))] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "Write report.md/.html with the verdict (off: data and plots only)."))] = True,
    profile: ProfileOpt = None,
) -> None:
    """Max sustainable request rate per policy and chunk size under SLOs; recommends one.

    Bisection over the request rate finds, for each configuration, the highest rate that
    meets every --slo on the median seed; the verdict recommends the highest capacity, and
    when capacities overlap over seeds, the smallest trade-off cost (worst stall, TTFT of
    the longest requests).

    The search starts at --rate, or without it at the service rate the profile implies
    for the workload's mean request (rounded down to a power of two), doubles/halves to a
    bracket, bisects, then probes above the bracket before accepting it; configurations
    that differ only in policy and chunk size start from the first one's capacity. Each
    probe replays the workload at that rate under every seed (default 3, --seeds);
    synthetic workloads without --duration or --num-requests span max(60 s, 1000
    requests / rate). Example: `sim capacity --slo
    p99_itl_ms=100 --slo p99_ttft_ms=2000 --out runs/cap`.

    Fleets: `--gpus 4` ranks 4 colocated replicas against P/D 1:3, 2:2 and 3:1;
    `--target-rate 40` finds the fewest GPUs (and their split) that meet the SLOs at 40
    req/s. With either, one --fleet entry without a layout sets the routers and KV link of
    every split (e.g. --fleet router=least-tokens,kv-link=ib-400g); without them, --fleet
    layouts (repeat it) are searched side by side.
    """
    from chunksim import atomic
    from chunksim.cli.answer_files import answer_files, refuse_foreign
    from chunksim.cli.options import load_run_profile
    from chunksim.cli.paths import check_out_dir
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_capacity, print_verdict
    from chunksim.sweep.capacity import probe_workload, search_params
    from chunksim.sweep.capacity_answer import capacity_answer
    from chunksim.sweep.capacity_io import capacity_document, probes_csv
    from chunksim.sweep.configs import (
        make_configs,
        parse_ints,
        parse_policies,
        parse_spec_tokens,
        refuse_unused_knobs,
        with_spec_tokens,
    )
    from chunksim.sweep.fleets import gpu_splits
    from chunksim.sweep.probe_store import ResumableRunner
    from chunksim.sweep.runner import Runner
    from chunksim.sweep.seeds import seed_list
    from chunksim.sweep.slos import parse_capacity_slos

    seed_values = seed_list(seeds, workload_opts.seed)
    check_out_dir(out, replace=True)
    if out is not None:
        refuse_foreign(out)
    slos = parse_capacity_slos(slo)
    specs = parse_policies(policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    chunk_list = parse_ints(chunks, "--chunks")
    layouts, template = _fleets(fleet, gpus, target_rate, max_gpus, workload_opts, run_cfg)
    ks = parse_spec_tokens(spec_tokens, run_cfg)
    if ks is not None and target_rate is not None:  # the GPU search takes one k
        if len(ks) > 1:
            raise ValueError(f"--target-rate searches GPUs for one configuration of draft "
                             f"tokens; give one --num-speculative-tokens, not {spec_tokens}")
        run_cfg, ks = with_spec_tokens(run_cfg, ks[0]), None
    if not 0 < tol < 1:
        raise ValueError(f"--tol {tol}: must be in (0, 1), e.g. 0.03 for 3 %")
    if target_rate is None:
        check_max_rate(max_rate, workload_opts.rate)
    trace = workload_opts.trace is not None or workload_opts.workload is WorkloadKind.TRACE
    profile = load_run_profile(profile, run_cfg)
    params = search_params(workload_opts, max_rate, tol, profile, run_cfg)
    devices = profile.devices
    configs = make_configs(specs, chunk_list, gpu_splits(_engines(gpus, devices), template)
                           if gpus is not None else layouts or None, ks)
    if target_rate is not None and devices > 1:
        raise ValueError(f"--target-rate {target_rate:g} counts one GPU per engine, and "
                         f"profile {profile.path} spans {devices} GPUs an engine (--tp/--ep); "
                         f"rank splits of a GPU count with --gpus instead")
    if target_rate is not None:
        given = [f for f, v, d in (("--max-rate", max_rate, 1024.0), ("--tol", tol, 0.03))
                 if v != d]
        if given:
            verb = "shape" if len(given) > 1 else "shapes"
            raise ValueError(f"{' and '.join(given)} {verb} the rate search; --target-rate "
                             "probes the target rate only: drop them")
        _fewest_gpus(target_rate, max_gpus or 64, specs, chunk_list, template, workload_opts,
                     run_cfg, slos, params, seed_values, profile, workers, ray, out,
                     cost_cfg, max_reject_pct)
        return
    if out is not None:  # its figures: matplotlib loads while the probes run
        from chunksim.reports.style import load_in_background

        load_in_background()
    store = _probe_store(out, profile)
    try:
        with (Runner(profile, workers, ray) if store is None else
              ResumableRunner(profile, workers, ray, store)) as runner, \
                ProgressBar("capacity probes", open_ended=True) as bar:
            ans = capacity_answer(configs, workload_opts, run_cfg, slos, bool(slo), params,
                                  seed_values, runner, max_reject_pct, progress=bar,
                                  rank_splits=gpus is not None)
    except KeyboardInterrupt:
        _probes_interrupted(store)
    finally:
        if store is not None:
            store.close()
    entries, verdict, best, window = ans.entries, ans.verdict, ans.best, ans.window
    print_capacity(entries, best, slos)
    print_verdict(verdict, capacity_searched=True, trace=trace)
    split_table = split_list = None
    tail = _capacity_tail(verdict, entries, run_cfg, workload_opts, params, profile,
                          cost_cfg)
    if ans.splits is not None:
        from chunksim.reports.console import print_splits
        from chunksim.sweep.gpus_io import split_rows, splits_csv

        split_list = split_rows(ans.splits, devices)
        print_splits(split_list, gpus)
        split_table = splits_csv(ans.splits, devices)
    tail.print()
    if out is not None:  # the whole set is staged, then swapped in (as sim run)
        final, out = out, atomic.staging_dir(out)
        doc = capacity_document(entries, best, slos, params, profile,
                                probe_workload(workload_opts, params.start, workload_opts.seed,
                                               params), seed_values, verdict, window)
        doc.update(tail.document())
        atomic.write_json(out / "capacity.json", doc)
        atomic.write_text(out / "capacity_probes.csv", probes_csv(entries))
        formats = ("png", "svg") if svg else ("png",)
        names = ["capacity.json", "capacity_probes.csv"]
        if split_table is not None:
            atomic.write_text(out / "splits.csv", split_table)
            names.append("splits.csv")
        if report:
            from chunksim.reports.capacity_report import write_capacity_report

            workload = next((p.summary.get("workload") for e in entries for p in e.probes), "?")
            name = str(workload).split("-")[0] + " (rate varied)"
            paths = write_capacity_report(out, entries, verdict, profile, window, name,
                                          resolved_command(ctx), formats, trace,
                                          splits=split_list, tail=tail.section)
        else:
            from chunksim.reports.capacity_report import write_capacity_plots

            paths = write_capacity_plots(out, entries, best, slos, profile, formats)
        names += [p.name for p in paths]
        atomic.swap_in(out, final, answer_files())
        typer.echo(f"wrote {final}/: {', '.join(names)}")


def _probe_store(out: Path | None, profile):
    """Where the search keeps each finished run for a resumed one (None without --out);
    says so when an interrupted search's runs are there."""
    if out is None:
        return None
    from chunksim.sweep.probe_store import open_store

    store = open_store(out, profile.sha256)
    if store.found:
        typer.echo(f"resuming: {store.found} finished probe runs of an interrupted search "
                   f"are in {store.path}; those this search needs are not run again",
                   err=True)
    return store


def _probes_interrupted(store) -> None:
    """Ctrl-C during the search: what was kept, and the command that resumes it."""
    from chunksim.cli.interrupts import command_as_typed, interrupted, interrupted_plainly

    if store is None:
        interrupted_plainly("nothing was written; give --out DIR to keep the finished "
                            "probe runs for a resumed search")
    if not store.runs:
        interrupted_plainly("no probe run had finished; nothing was written")
    new = len(store.runs) - store.found
    interrupted(f"{len(store.runs)} finished probe runs are kept in {store.path}"
                + (f" ({new} from this search)" if store.found else "")
                + "; the answer's files were not written. The same command reuses them",
                command_as_typed())


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


def _fewest_gpus(target: float, max_gpus: int, specs, chunks: list[int], template,
                 workload: WorkloadOptions, run_cfg: RunConfig, slos: dict[str, float],
                 params, seeds: list[int], profile, workers: int | None, ray: str | None,
                 out: Path | None, cost_cfg: CostConfig | None = None,
                 max_reject_pct: float = 0.0) -> None:
    """`--target-rate`: the fewest GPUs meeting the SLOs at `target`, and their split."""
    from chunksim import atomic
    from chunksim.progress import ProgressBar
    from chunksim.reports.console import print_gpu_search
    from chunksim.sweep.capacity_io import probes_csv
    from chunksim.sweep.gpus import gpu_answer
    from chunksim.sweep.gpus_io import gpu_search_document
    from chunksim.sweep.runner import Runner

    with Runner(profile, workers, ray) as runner, \
            ProgressBar("GPU search probes", open_ended=True) as bar:
        search = gpu_answer(target, max_gpus, specs, chunks, template, workload, run_cfg,
                            slos, params, seeds, runner, max_reject_pct, bar)
    print_gpu_search(search, slos)
    tail = _gpu_search_tail(search, run_cfg, workload, profile, cost_cfg or CostConfig())
    tail.print()
    if out is not None:
        from chunksim.cli.answer_files import answer_files

        final, out = out, atomic.staging_dir(out)
        entries = [e for _, t in sorted(search.trials.items()) for e in t.entries]
        gdoc = gpu_search_document(search, slos, seeds)
        gdoc.update(tail.document())
        atomic.write_json(out / "gpus.json", gdoc)
        atomic.write_text(out / "gpu_probes.csv", probes_csv(entries))
        atomic.swap_in(out, final, answer_files())
        typer.echo(f"wrote {final}/: gpus.json, gpu_probes.csv")


def _capacity_tail(verdict, entries, run_cfg, workload_opts, params, profile, cost_cfg):
    """The recommendation's deployment at its capacity, and every configuration's cost
    there (the capacity answer as a cost)."""
    from chunksim.cli.answer_tail import answer_tail
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


def _gpu_search_tail(search, run_cfg, workload_opts, profile, cost_cfg):
    """`--target-rate`: the best configuration on the fewest GPUs, deployed at the target
    rate, and the cost of every configuration that met it there."""
    from chunksim.cli.answer_tail import answer_tail

    g = search.answer
    meeting = search.trials[g].meeting if g is not None else []
    from dataclasses import replace

    opts = replace(workload_opts, rate=search.target)
    best = meeting[0] if meeting else None
    return answer_tail((best.config, search.target) if best is not None else None,
                       [(e.config, e.at_max, search.target) for e in meeting], run_cfg, opts,
                       profile, cost_cfg, "the target rate")

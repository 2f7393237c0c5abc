"""`sim compare` below the command line: its flags' rules, the runs (`sweep.compare_answer`),
the tables, and the --out set staged and swapped in whole. The command parses, calls
`compare_plan` and `run_compare`, and prints the line naming what was written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.cost import CostConfig
from chunksim.workloads.options import WorkloadKind, WorkloadOptions

DEFAULT_MAX_RATE = 1024.0
"""--max-rate's default, req/s: a value other than it is a flag given."""


@dataclass(frozen=True)
class CompareFlags:
    """`sim compare`'s own flags, as given (`cli.grid_flags` says what each means)."""

    policies: str
    chunks: str
    fleet: list[str] | None = None
    seeds: str | None = None
    spec_tokens: str | None = None
    slo: list[str] | None = None
    max_reject_pct: float = 0.0
    capacity: bool | None = None
    max_rate: float = DEFAULT_MAX_RATE
    timeline_chunk: int | None = None
    svg: bool = False
    report: bool = True


@dataclass(frozen=True)
class ComparePlan:
    """The flags checked and parsed, before anything runs."""

    flags: CompareFlags
    seeds: list[int]
    slos: dict[str, float]
    search: bool
    """Whether each configuration's capacity is searched too."""
    trace: bool
    configs: list[Config]


def compare_plan(flags: CompareFlags, run_cfg: RunConfig,
                 workload: WorkloadOptions) -> ComparePlan:
    """Check `flags` against each other and parse them; raises ValueError naming the flag."""
    from chunksim.sweep.capacity import check_max_rate
    from chunksim.sweep.configs import (
        make_configs,
        parse_ints,
        parse_policies,
        parse_spec_tokens,
        refuse_unused_knobs,
    )
    from chunksim.sweep.fleets import parse_fleets, refuse_fleet_flags
    from chunksim.sweep.seeds import seed_list
    from chunksim.sweep.slos import parse_capacity_slos

    seeds = seed_list(flags.seeds, workload.seed)
    slos = parse_capacity_slos(flags.slo)
    search = bool(flags.slo) if flags.capacity is None else flags.capacity
    if search:
        check_max_rate(flags.max_rate, workload.rate)
    elif flags.max_rate != DEFAULT_MAX_RATE:
        raise ValueError("--max-rate caps the capacity search, which is off: add --slo or "
                         "--capacity, or drop --max-rate")
    trace = workload.trace is not None or workload.workload is WorkloadKind.TRACE
    specs = parse_policies(flags.policies)
    refuse_unused_knobs(specs, run_cfg.knobs)
    fleets = parse_fleets(flags.fleet)
    if fleets:
        refuse_fleet_flags(run_cfg.fleet, "--fleet")
    configs = make_configs(specs, parse_ints(flags.chunks, "--chunks"), fleets or None,
                           parse_spec_tokens(flags.spec_tokens, run_cfg))
    if flags.report:  # fail on a bad --timeline-chunk before simulating, not after
        from chunksim.reports.compare_report import timeline_configs

        timeline_configs(configs, flags.timeline_chunk)
    return ComparePlan(flags, seeds, slos, search, trace, configs)


def run_compare(plan: ComparePlan, run_cfg: RunConfig, workload: WorkloadOptions,
                cost_cfg: CostConfig, profile, workers: int | None, ray: str | None,
                out: Path, command: str, warn: Callable[[str], None]) -> list[str]:
    """Run the plan, print the tables and the verdict, write --out `out` as one set;
    `warn` says each warning. The names written, in order."""
    from chunksim.progress import ProgressBar
    from chunksim.reports.answer_files import staged
    from chunksim.reports.console import print_comparison, print_verdict
    from chunksim.sim.records.rejections import rejection_text
    from chunksim.sweep.compare_answer import compare_answer
    from chunksim.sweep.runner import Runner

    flags = plan.flags
    if flags.report:  # matplotlib (and pandas, for the report's tables) load while the runs run
        from chunksim.reports.style import load_in_background

        load_in_background(also=("pandas",))
    with Runner(profile, workers, ray) as runner, \
            ProgressBar("compare", total=len(plan.configs) * len(plan.seeds)) as bar:
        ans = compare_answer(plan.configs, workload, run_cfg, plan.slos, bool(flags.slo),
                             plan.search, flags.max_rate, flags.max_reject_pct, plan.seeds,
                             runner, keep_records=flags.report, progress=bar)
    for msg in ans.failed:
        warn(msg)
    tail = compare_tail(ans.verdict, ans.comp, ans.entries, run_cfg, workload, profile,
                        cost_cfg)
    doc = ans.document(profile, plan.slos, flags.max_reject_pct)
    doc.update(tail.document())
    with staged(out) as stage:
        from chunksim import atomic

        atomic.write_text(stage / "comparison.csv", ans.full.csv())
        atomic.write_json(stage / "comparison.json", doc)
        print_comparison(ans.full.configs, ans.full.summaries, stats=ans.full.stats)
        print_verdict(ans.verdict, capacity_searched=ans.entries is not None,
                      trace=plan.trace)
        tail.print()
        written = ["comparison.csv", "comparison.json"]
        summaries = ans.full.summaries
        for warning in dict.fromkeys(w for s in summaries for w in s.get("warnings", [])):
            warn(warning)
        for cfg, s in zip(ans.full.configs, summaries, strict=True):
            rejected = rejection_text(s)  # the median seed's: the latencies cover the rest
            if rejected and s.get("completed"):
                warn(f"{cfg.label}: {rejected}")
        if flags.report:
            from chunksim.reports.compare_report import write_compare_report

            paths = write_compare_report(
                stage, ans.comp, profile, ans.verdict, ans.entries, command=command,
                timeline_chunk=flags.timeline_chunk,
                formats=("png", "svg") if flags.svg else ("png",), window=ans.window,
                trace=plan.trace, tail=tail.section)
            written += [p.name for p in paths]
    return written


def compare_tail(verdict, comp, entries, run_cfg, workload_opts, profile, cost_cfg):
    """The deployment of the recommendation and each configuration's cost: at its
    capacity when searched, else at the compared load."""
    from chunksim.reports.answer_tail import answer_tail

    rec = verdict.recommended
    if entries is not None:
        by_label = {e.config.label: e for e in entries}
        points = [(e.config, e.at_max, e.max_rate) for e in entries]
        rate = by_label[rec.label].max_rate if rec is not None else None
        at = "its capacity under the SLOs"
    else:
        rate = workload_opts.rate
        points = [(c, s, float(s.get("request_throughput") or 0.0))
                  for c, s in zip(comp.configs, comp.summaries, strict=True)]
        at = "the compared load"
    return answer_tail((rec.config, rate) if rec is not None else None, points, run_cfg,
                       workload_opts, profile, cost_cfg, at)

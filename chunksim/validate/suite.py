"""Run a list of validation scenarios on one profile and one loaded model, and tabulate the
errors: the engine of `benchmarks/fidelity.py` and `benchmarks/validate_gpu.py`."""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from chunksim.validate.compare import TARGET_KEYS
from chunksim.validate.machine import CpuMonitor, wait_for_quiet
from chunksim.validate.scenarios import Scenario


def run_suite(scenarios: list[Scenario], profile, out_dir: Path, settings,
              plot: Callable | None = None, log: Callable[[str], None] = print,
              quiet_wait_s: float = 0.0, replay_steps: int = 120,
              keep_going: bool = False, runtime=None,
              live_runs: int = 1) -> dict[str, dict]:
    """Validate each scenario (one model build, reused), write its files under
    `out_dir/<name>/`; returns {name: validation.json report}. With `quiet_wait_s`, wait
    up to that long before each scenario for the rest of the machine to go quiet. With
    `keep_going`, a scenario that fails is logged (with its traceback) and left out
    instead of ending the suite: on a borrowed GPU one failure must not cost the rest.
    `runtime` (live.runtime.Runtime of `settings`) reuses a model already loaded.
    `live_runs > 1` serves each workload that many times (`validate`'s
    live_repeatability: the machine's run-to-run noise beside the error)."""
    from chunksim.live.runtime import Runtime, pinned_threads
    from chunksim.validate.output import write_validation
    from chunksim.validate.run import validate
    from chunksim.workloads.options import build_workload

    if runtime is None:
        with pinned_threads(settings.threads):
            runtime = Runtime(settings)
    reports = {}
    for sc in scenarios:
        workload = build_workload(sc.workload)
        waited = wait_for_quiet(quiet_wait_s, log=log) if quiet_wait_s > 0 else 0.0
        t0 = time.perf_counter()
        monitor = CpuMonitor()
        try:
            v = validate(workload, profile, sc.run, settings, runtime=runtime,
                         replay_steps=replay_steps, live_runs=live_runs)
        except Exception as exc:
            if not keep_going:
                raise
            log(f"{sc.name:<24} FAILED after {time.perf_counter() - t0:.1f} s: "
                f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            continue
        v.report["machine"] = {**monitor.done(), "waited_for_quiet_s": waited}
        v.report["scenario"] = sc.name
        v.report["elapsed_s"] = time.perf_counter() - t0
        write_validation(out_dir / sc.name.replace("/", "__"), v, plot=plot)
        reports[sc.name] = v.report
        other = v.report["machine"]["other_cpu_busy"]
        log(f"{sc.name:<24} {len(workload.requests):4d} req  {v.report['elapsed_s']:5.1f} s  "
            f"worst |err| {v.report['worst_abs_error_pct']:6.1f} % ({v.report['worst_metric']})"
            f"  other CPU busy {'?' if other is None else f'{other:.2f}'}")
    return reports


def _pct(x) -> str:
    return "     —" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+6.1f}"


def _num(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def format_table(reports: dict[str, dict]) -> str:
    """One row per scenario: signed error % of the target metrics, the step-level check,
    the measured per-step overhead, the regime (preemptions live/sim), how many CPUs
    other processes kept busy meanwhile, and the drift-corrected worst error (the table
    scaled by how much slower the machine ran the table's own points around the run)."""
    head = (f"{'scenario':<24}" + "".join(f"{k.removesuffix('_ms'):>12}" for k in TARGET_KEYS)
            + f"{'|worst|':>9}{'step med':>10}{'step P99':>10}{'ovh ms':>8}{'preempt l/s':>13}"
            + f"{'others':>8}{'drift x':>9}{'corr |worst|':>14}")
    lines = [head, "-" * len(head)]
    for name, r in reports.items():
        m = r["metrics"]
        se = r["step_error"]
        c = r["counts"]["preemptions"]
        lines.append(
            f"{name:<24}" + "".join(f"{_pct(m[k]['error_pct']):>12}" for k in TARGET_KEYS)
            + f"{r['worst_abs_error_pct']:9.1f}{_pct(se.get('median_pct')):>10}"
            + f"{se.get('p99_pct', math.nan):10.1f}{r['step_overhead_s'] * 1e3:8.3f}"
            + f"{c['measured']:>7}/{c['predicted']:<5}"
            + f"{_num(r.get('machine', {}).get('other_cpu_busy')):>8}"
            + (f"{dc['factor']:9.3f}{dc['worst_abs_error_pct']:14.1f}" if (
                dc := r.get("drift_corrected")) else "")
            + (f"{rep['median_spread_pct']:12.1f}" if (
                rep := r.get("live_repeatability")) else ""))
    if any(r.get("live_repeatability") for r in reports.values()):
        lines[0] += f"{'live sprd':>12}"  # median over the targets of (max/min - 1) %
    return "\n".join(lines)


def _after_prefill(report: dict) -> str:
    ap = report.get("live_after_prefill") or {}
    return f"{ap['median_ratio']:.2f}x" if ap.get("pairs") else "—"


def format_step_table(reports: dict[str, dict]) -> str:
    """Where the step-level error comes from (medians of signed % errors; see live.replay):
    the table vs each live step, the table vs the same step re-timed alone (interpolation +
    machine drift), the replay vs live (running in sequence vs alone), and the profile's
    own grid points re-timed now vs when profiled (machine drift alone); `dec pad/even`
    splits table/replay over decode-only steps by whether their padded decode attention
    read over 1.25x their contexts (live.records.decode_padding); `after P` is a decode
    step right after a prefill step over the decode steps after it (paired, drift-free:
    validate.compare.after_prefill), a cost the table does not price."""
    head = (f"{'scenario':<24}{'table/live':>12}{'table/replay':>14}{'  pre/dec':>16}"
            f"{'dec pad/even':>16}{'replay/live':>13}{'  pre/dec':>16}{'drift':>9}{'after P':>9}")
    lines = [head, "-" * len(head)]
    for name, r in reports.items():
        d = r["step_error"].get("decomposition")
        if not d:
            continue

        def med(key: str, d: dict = d) -> str:
            return _pct((d.get(key) or {}).get("median_pct"))

        lines.append(f"{name:<24}{med('table_vs_live'):>12}{med('table_vs_replay'):>14}"
                     f"{med('table_vs_replay_prefill'):>8}/{med('table_vs_replay_decode'):<7}"
                     f"{med('table_vs_replay_padded_decode'):>8}/"
                     f"{med('table_vs_replay_unpadded_decode'):<7}"
                     f"{med('replay_vs_live'):>13}"
                     f"{med('replay_vs_live_prefill'):>8}/{med('replay_vs_live_decode'):<7}"
                     f"{med('profile_drift'):>9}{_after_prefill(r):>9}")
    return "\n".join(lines)


def summary_line(reports: dict[str, dict]) -> dict:
    """The closing JSON: worst |error| over every scenario's target metrics, and each
    scenario's target errors (plus its step-level check and overhead, separately)."""
    worst = max((r["worst_abs_error_pct"] for r in reports.values()
                 if not math.isnan(r["worst_abs_error_pct"])), default=math.nan)
    out = {
        "worst_abs_error_pct": worst,
        "scenarios": {n: {k: r["metrics"][k]["error_pct"] for k in TARGET_KEYS}
                      for n, r in reports.items()},
        "step_error_pct": {n: {"median": r["step_error"].get("median_pct"),
                               "p99_abs": r["step_error"].get("p99_pct")}
                           for n, r in reports.items()},
        "step_overhead_ms": {n: r["step_overhead_s"] * 1e3 for n, r in reports.items()},
        "other_cpu_busy": {n: r.get("machine", {}).get("other_cpu_busy")
                           for n, r in reports.items()},
    }
    repeat = {n: r["live_repeatability"] for n, r in reports.items()
              if r.get("live_repeatability")}
    if repeat:  # the machine's run-to-run spread of the same figures, % (max/min - 1)
        out["live_spread_pct"] = {n: {k: rep["metrics"][k]["spread_pct"] for k in TARGET_KEYS}
                                  for n, rep in repeat.items()}
    corrected = {n: r["drift_corrected"] for n, r in reports.items()
                 if r.get("drift_corrected")}
    if corrected:
        out["drift_corrected"] = {
            "worst_abs_error_pct": max(c["worst_abs_error_pct"] for c in corrected.values()),
            "factor": {n: c["factor"] for n, c in corrected.items()},
            "scenarios": {n: {k: c["metrics"][k] for k in TARGET_KEYS}
                          for n, c in corrected.items()},
        }
    return out

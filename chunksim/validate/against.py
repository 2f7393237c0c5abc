"""`sim validate --against RESULTS`: replay a measured benchmark's requests (same
arrivals, prompt and output lengths) in the simulator under the engine settings given
by flags, and compare predicted with measured figures. No torch.

Both sides' figures are computed by one function (`sim.metrics.metrics.summarize`, vLLM bench's
definitions) over the same requests: TTFT and E2E per request, TPOT = (E2E - TTFT) /
(output - 1), ITL pooled over every token gap (measured only where the file has the
gaps), throughputs over first arrival to last finish. A bench tool's file (vLLM, SGLang)
is timed at the client: it includes the HTTP, tokenization and detokenization time of
the API server, which the simulator does not price (docs/validation.md). A generic file
is timed wherever its writer took the times, which it does not record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from chunksim.core.spec import SpecTable, Workload
from chunksim.latency.profile import Profile
from chunksim.sim.metrics.metric_registry import group, view
from chunksim.sim.metrics.metrics import summarize
from chunksim.sim.records.quantiles import Samples
from chunksim.sim.records.records import StepTotals
from chunksim.sim.run import RunConfig, simulate
from chunksim.validate.compare import rel_error_pct
from chunksim.validate.match import calibration_note, mismatches
from chunksim.validate.results import MeasuredRun

FORMAT = "chunksim-validation-against/1"
THROUGHPUT = group("throughput")


CLIENT_SIDE = {
    "vllm": "client-side time (HTTP, tokenization) the simulator does not price",
    "sglang": "client-side time (HTTP, tokenization) the simulator does not price",
}
"""What the measured figures include beyond the engine's steps, by results format (a
generic file: unknown, so nothing is claimed)."""


def measured_includes(run: MeasuredRun) -> str | None:
    """What the measured times include beyond the engine's work, where the format says
    (None: a generic file, which does not record where its times were taken)."""
    return CLIENT_SIDE.get(run.format)


def profile_warnings(run: MeasuredRun, profile: Profile) -> list[str]:
    """The profile against the results file's own record of its model and device."""
    return mismatches(profile.provenance, run.settings or {}, profile.path,
                      run.path.rsplit("/", 1)[-1])


def table_keys() -> list[str]:
    """Every compared key: latency stats, then throughputs."""
    return list(view("validate"))  # `sim.metrics.metric_registry`


def workload_of(run: MeasuredRun, name: str | None = None) -> Workload:
    """The measured requests as a workload (arrival order, ids 0..n-1)."""
    return Workload(name or f"results:{run.path.rsplit('/', 1)[-1]}",
                    SpecTable(run.arrival_s, run.prompt_tokens, run.output_tokens),
                    notes=(f"arrivals {run.arrivals}",))


def measured_frame(run: MeasuredRun) -> pd.DataFrame:
    """The measured requests as a simulator-style requests frame (for `summarize`)."""
    n = len(run)
    itl_max = (np.asarray([g.max() if len(g) else 0.0 for g in run.itl_s])
               if run.itl_s is not None else np.zeros(n))
    return pd.DataFrame({
        "request_id": np.arange(n), "request_class": ["default"] * n,
        "arrival_s": run.arrival_s, "prompt_tokens": run.prompt_tokens,
        "output_tokens": run.output_tokens, "first_scheduled_s": run.arrival_s,
        "first_token_s": run.arrival_s + run.ttft_s, "finish_s": run.arrival_s + run.e2el_s,
        "generated_tokens": run.output_tokens, "rejected": np.zeros(n, dtype=bool),
        "preemptions": np.zeros(n, dtype=np.int64),
        "recomputed_tokens": np.zeros(n, dtype=np.int64), "max_itl_s": itl_max,
    })


def measured_summary(run: MeasuredRun) -> dict:
    """The measured figures, by the simulator's own definitions (ITL None: no gaps)."""
    itl = (np.concatenate(run.itl_s) if run.itl_s is not None and len(run.itl_s)
           else np.zeros(0))
    s = summarize(measured_frame(run), StepTotals(), Samples(itl))  # no steps measured
    if run.itl_s is None or not len(itl):
        for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99"):
            s[f"{stat}_itl_ms"] = None
    return s


def compare(predicted: dict, measured: dict) -> dict[str, dict]:
    """{key: {predicted, measured, error_pct}}; error None where either side is missing."""
    out = {}
    for k in table_keys():
        p, m = predicted.get(k), measured.get(k)
        err = None if p is None or m is None else rel_error_pct(float(p), float(m))
        out[k] = {"predicted": None if p is None else float(p),
                  "measured": None if m is None else float(m), "error_pct": err}
    return out


@dataclass
class AgainstValidation:
    """A replay's records and the report written as validation.json."""

    run: MeasuredRun
    sim: object
    """sim.engine.engine.SimResult."""
    predicted: dict
    measured: dict
    report: dict


def validate_against(run: MeasuredRun, profile: Profile, cfg: RunConfig,
                     progress=None) -> AgainstValidation:
    """Simulate the run's requests under `cfg` and compare with the measurement;
    `progress(done, total)` hears the replay's progress (`sim.run.simulate`)."""
    if cfg.fleet.active:
        raise ValueError("sim validate --against replays one engine; drop --replicas / --pd "
                         "/ --replica-groups")
    workload = workload_of(run)
    result, predicted = simulate(workload, profile, cfg, progress=progress)
    if predicted["rejected"]:
        why = ", ".join(f"{n} by {k}" for k, n in predicted.get("rejected_reasons", {}).items())
        raise ValueError(
            f"the simulator rejected {predicted['rejected']} of the {len(run)} measured "
            f"requests ({why or 'see sim_requests.csv'}), which the engine served; give the "
            "engine's --max-model-len or --kv-blocks so that both serve the same requests")
    measured = measured_summary(run)
    metrics = compare(predicted, measured)
    notes = []
    if run.cached_tokens is not None and run.cached_tokens.any():
        share = float(run.cached_tokens.sum()) / float(run.prompt_tokens.sum())
        notes.append(
            f"the file records {share:.0%} of prompt tokens served from the prefix cache; "
            "the replay does not reuse them (its prefix cache matches prefix hashes, which "
            "the file lacks), so predicted TTFT prices those tokens")
    if run.itl_s is None:
        notes.append("the file has no token gaps: ITL is not compared")
    applied = calibration_note(profile.provenance)
    if applied:
        notes.insert(0, applied)
    report = {
        "format": FORMAT,
        "results": run.path,
        "results_format": run.format,
        "arrivals": run.arrivals,
        "requests": len(run),
        "failed_in_results": run.failed,
        "results_settings": run.settings or {},
        "profile": profile.path,
        "profile_label": profile.label,
        "profile_sha256": profile.sha256,
        "serving_calibration": profile.provenance.get("serving_calibration"),
        "policy": cfg.policy,
        "policy_knobs": dict(cfg.knobs),
        "chunk": cfg.chunk,
        "policy_defaults": predicted.get("policy_defaults"),
        "kv_blocks": cfg.kv_blocks,
        "prefix_caching": cfg.prefix_caching,
        "metrics": metrics,
        "notes": notes,
        "warnings": profile_warnings(run, profile),
        "measured_includes": measured_includes(run),
        "counts": {"predicted_steps": predicted.get("steps"),
                   "predicted_busy_fraction": predicted.get("busy_fraction"),
                   "predicted_preemptions": predicted.get("preemptions")},
    }
    return AgainstValidation(run, result, predicted, measured, report)


FILES = ("validation.json", "measured_requests.csv", "sim_requests.csv", "validation.png",
         "validation.html")


def write_against(out_dir, v: AgainstValidation, draw=None) -> list:
    """validation.json, both sides' per-request CSVs and, with `draw(v, out_dir)` (the
    reports layer's `plot_against`), the CDF figure and its page; validation.json last,
    so its presence means the set is complete."""
    from pathlib import Path

    from chunksim import atomic

    out = Path(out_dir)
    atomic.write_csv(out / "measured_requests.csv", measured_frame(v.run))
    atomic.write_csv(out / "sim_requests.csv", v.sim.requests)
    written = [out / "measured_requests.csv", out / "sim_requests.csv"]
    if draw is not None:
        written += draw(v, out)
    atomic.write_json(out / "validation.json", v.report)
    return [out / "validation.json", *written]

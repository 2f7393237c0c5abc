"""Predicted (simulator) vs measured (live) figures, as signed relative errors.

error_pct = (predicted - measured) / measured * 100: positive means the simulator is
pessimistic (predicts slower than reality). Metric names and definitions are those of
`sim.metrics.metrics` (`vllm bench serve`'s). The step-level check feeds each live step's own
composition to the latency model, so interpolation error is seen apart from queueing
(where a different step sequence would compound it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from chunksim.core.shape import StepShape
from chunksim.latency.base import StepCosts
from chunksim.sim.metrics.metric_registry import group, view

THROUGHPUT_KEYS = group("throughput")
TARGET_KEYS = view("validate_target")
"""The figures the fidelity target (<= 5 % error) applies to."""
COUNT_KEYS = view("validate_counts")


def rel_error_pct(predicted: float, measured: float) -> float | None:
    """Signed relative error in % (None when the measured value is 0 or not finite)."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


def metric_keys() -> list[str]:
    """Every compared summary key, latency stats first, then throughput."""
    return list(view("validate"))  # `sim.metrics.metric_registry`


def compare_summaries(predicted: Mapping, measured: Mapping) -> dict[str, dict]:
    """{key: {predicted, measured, error_pct}} for every `metric_keys()` entry."""
    out = {}
    for key in metric_keys():
        p, m = float(predicted[key]), float(measured[key])
        out[key] = {"predicted": p, "measured": m, "error_pct": rel_error_pct(p, m)}
    return out


def compare_counts(predicted: Mapping, measured: Mapping) -> dict[str, dict]:
    """Run facts side by side (steps, preemptions, ...): did both see the same regime?"""
    return {k: {"predicted": predicted.get(k), "measured": measured.get(k)}
            for k in COUNT_KEYS}


def worst_abs_error(metrics: Mapping[str, Mapping], keys=TARGET_KEYS) -> tuple[str, float]:
    """(key, |error| %) of the worst target metric (nan when none is defined)."""
    worst = ("", math.nan)
    for k in keys:
        e = metrics[k]["error_pct"]
        if e is not None and not abs(e) <= worst[1]:
            worst = (k, abs(e))
    return worst


def step_predictions(steps, latency: StepCosts) -> np.ndarray:
    """The table's forward-pass seconds (no overhead) for each live step's composition."""
    cols = [steps[c].to_numpy() for c in ("prefill_tokens", "prefill_requests",
                                          "prior_tokens", "decodes", "decode_kv_tokens")]
    two = (steps["passes"].to_numpy() > 1) if "passes" in steps else np.zeros(len(steps), bool)
    out = np.empty(len(steps))
    for i, (c, r, p, d, k, t) in enumerate(zip(*cols, two, strict=True)):
        shape = StepShape(int(c), int(r), float(p), int(d), float(k), bool(t))
        out[i] = sum(latency.step_s(bs)[0] for bs in shape.batch_shapes())
    return out


def _err_stats(err_pct: np.ndarray) -> dict:
    if len(err_pct) == 0:
        return {"steps": 0}
    a = np.abs(err_pct)
    return {
        "steps": int(len(err_pct)),
        "median_pct": float(np.median(err_pct)),
        "mean_pct": float(np.mean(err_pct)),
        "median_abs_pct": float(np.median(a)),
        "p90_abs_pct": float(np.percentile(a, 90)),
        "p99_pct": float(np.percentile(a, 99)),
        "p1_signed_pct": float(np.percentile(err_pct, 1)),
        "p99_signed_pct": float(np.percentile(err_pct, 99)),
    }


PADDED_ABOVE = 1.25
"""A step whose decode attention read over this many times the key positions its contexts
need counts as padded (`live.records.decode_attention`)."""


def step_error(steps, predicted_s: np.ndarray) -> dict:
    """Relative error of the table's prediction vs each live step's measured forward time:
    overall and per step kind. `median_pct` is the signed median, `p99_pct` the 99th
    percentile of the absolute error."""
    measured = steps["forward_s"].to_numpy()
    err = (predicted_s - measured) / measured * 100.0
    prefill = steps["prefill_tokens"].to_numpy() > 0
    decodes = steps["decodes"].to_numpy() > 0
    out = _err_stats(err)
    out["by_kind"] = {
        "decode_only": _err_stats(err[~prefill]),
        "prefill_only": _err_stats(err[prefill & ~decodes]),
        "mixed": _err_stats(err[prefill & decodes]),
    }
    out["sum_pct"] = rel_error_pct(float(predicted_s.sum()), float(measured.sum()))
    if "decode_padding" in steps:
        # steps with decodes, by how much their padded decode attention read beyond the
        # contexts (the table prices equal lengths: live.records.decode_padding)
        pad = steps["decode_padding"].to_numpy()
        out["by_padding"] = {
            "up_to_1.25x": _err_stats(err[decodes & (pad <= PADDED_ABOVE)]),
            "1.25x_to_2x": _err_stats(err[decodes & (pad > PADDED_ABOVE) & (pad <= 2.0)]),
            "over_2x": _err_stats(err[decodes & (pad > 2.0)]),
        }
    if "sm_clock_mhz" in steps and steps["sm_clock_mhz"].notna().any():
        # GPU runs: steps at (near) the highest sampled SM clock vs the rest
        mhz = steps["sm_clock_mhz"].to_numpy()
        full = mhz >= 0.9 * np.nanmax(mhz)
        out["by_clock"] = {"full_clock": _err_stats(err[full]),
                           "lower_clock": _err_stats(err[~full & ~np.isnan(mhz)])}
    return out


def launch_stats(steps) -> dict:
    """How much of the live forward time the host spent issuing the pass (ms and share):
    near 1 on CPU and on a launch-bound GPU loop, small when the GPU is the bottleneck."""
    if "launch_s" not in steps or len(steps) == 0:
        return {"steps": 0}
    launch = steps["launch_s"].to_numpy()
    share = launch / np.maximum(steps["forward_s"].to_numpy(), 1e-12)
    return {"steps": int(len(launch)), "median_ms": float(np.median(launch) * 1e3),
            "median_share": float(np.median(share)), "p10_share": float(np.percentile(share, 10)),
            "p90_share": float(np.percentile(share, 90))}


def overhead_stats(steps) -> dict:
    """The live loop's per-step time outside the forward pass, over busy steps (ms)."""
    busy = steps[steps["busy"]] if "busy" in steps else steps
    o = busy["overhead_s"].to_numpy() * 1e3
    if len(o) == 0:
        return {"steps": 0}
    return {"steps": int(len(o)), "median_ms": float(np.median(o)),
            "mean_ms": float(np.mean(o)), "p90_ms": float(np.percentile(o, 90)),
            "p99_ms": float(np.percentile(o, 99))}


AFTER_PREFILL_REFS = 3
"""Decode-only steps after the one under test that it is compared with (see `after_prefill`)."""


def _paired_ratios(forward, overhead, decodes, busy, cand, refs):
    """For each index in `cand`: its time over the median of the next `refs` steps,
    provided those are busy decode-only steps with its decode count; extra seconds too."""
    ratio, extra_fwd, extra_ovh = [], [], []
    n = len(forward)
    for i in cand:
        j = np.arange(i + 1, i + 1 + refs)
        if j[-1] >= n or not (busy[j].all() and (decodes[j] == decodes[i]).all()):
            continue
        ref = np.median(forward[j])
        ratio.append(forward[i] / ref)
        extra_fwd.append(forward[i] - ref)
        extra_ovh.append(overhead[i] - np.median(overhead[j]))
    return np.asarray(ratio), np.asarray(extra_fwd), np.asarray(extra_ovh)


def after_prefill(steps, refs: int = AFTER_PREFILL_REFS) -> dict:
    """What a decode-only step costs right after a step with prefill tokens, measured in
    pairs so the machine's drift cancels: each busy decode-only step that follows a busy
    step with prefill tokens (so the first steps after an idle wait, which the wake-up
    cost prices, stay out) over the median of the `refs` busy decode-only steps after it with
    the same decode count (the same requests, contexts a few tokens longer). The control
    applies the same pairing to decode-only steps that follow a decode-only step with
    their decode count; it reads ~1 when the pairing is fair. The table times each point
    repeated, so it prices every step as if it followed its own kind; `ratio` over
    `control` is what it misses after a prefill. Not modelled: such steps are a few % of
    all steps (measured figures: docs/results/)."""
    need = {"forward_s", "overhead_s", "prefill_tokens", "decodes", "busy"}
    if not need <= set(steps.columns) or len(steps) < refs + 2:
        return {"pairs": 0}
    fwd = steps["forward_s"].to_numpy(float)
    ovh = steps["overhead_s"].to_numpy(float)
    dec = steps["decodes"].to_numpy()
    busy = steps["busy"].to_numpy(bool)
    dec_only = (steps["prefill_tokens"].to_numpy() == 0) & (dec > 0)
    prev_prefill = np.r_[False, steps["prefill_tokens"].to_numpy()[:-1] > 0]
    prev_dec = np.r_[-1, dec[:-1]]
    ok = dec_only & busy & np.r_[False, busy[:-1]]
    test = np.flatnonzero(ok & prev_prefill)
    ctrl = np.flatnonzero(ok & ~prev_prefill & (prev_dec == dec))
    r, ef, eo = _paired_ratios(fwd, ovh, dec, busy, test, refs)
    if len(r) == 0:
        return {"pairs": 0}
    rc, _, _ = _paired_ratios(fwd, ovh, dec, busy, ctrl, refs)
    return {"pairs": int(len(r)), "median_ratio": float(np.median(r)),
            "median_extra_forward_ms": float(np.median(ef) * 1e3),
            "median_extra_overhead_ms": float(np.median(eo) * 1e3),
            "control_pairs": int(len(rc)),
            "control_ratio": float(np.median(rc)) if len(rc) else None}

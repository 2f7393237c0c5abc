"""The validation figure: predicted vs measured CDFs of TTFT and ITL, and each live step's
duration predicted by the table vs measured. matplotlib is imported inside the function."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from chunksim import atomic


def _cdf(ax, values_s, label: str, style: str) -> None:
    x = np.sort(np.asarray(values_s, dtype=float)) * 1e3
    if len(x):
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), style, label=label, lw=1.4)


def plot_validation(v, path: str | Path) -> Path:
    """Draw the 2 x 2 figure to `path` (PNG, written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from chunksim.sim.metrics.metrics import per_request

    live_req, sim_req = per_request(v.live.requests), per_request(v.sim.requests)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0][0]
    _cdf(ax, live_req["ttft"], "measured (live)", "-")
    _cdf(ax, sim_req["ttft"], "predicted (sim)", "--")
    ax.set(xlabel="TTFT (ms)", ylabel="CDF", title="TTFT")
    ax.legend()
    ax = axes[0][1]
    _cdf(ax, v.live.itl_s, "measured (live)", "-")
    _cdf(ax, v.sim.itl_s, "predicted (sim)", "--")
    ax.set(xlabel="ITL (ms)", ylabel="CDF", title="ITL (all token gaps)", xscale="log")
    ax.legend()
    steps = v.live.steps
    meas = steps["forward_s"].to_numpy() * 1e3
    pred = steps["predicted_forward_s"].to_numpy() * 1e3
    prefill = steps["prefill_tokens"].to_numpy() > 0
    ax = axes[1][0]
    ax.scatter(meas[~prefill], pred[~prefill], s=4, alpha=0.4, label="decode-only")
    ax.scatter(meas[prefill], pred[prefill], s=6, alpha=0.6, label="with prefill")
    lo = max(min(meas.min(), pred.min()), 1e-3) if len(meas) else 1e-3
    hi = max(meas.max(), pred.max()) if len(meas) else 1.0
    ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="exact")
    se = v.report["step_error"]
    ax.set(xlabel="measured forward (ms)", ylabel="table prediction (ms)", xscale="log",
           yscale="log", title=f"per-step forward: median {se.get('median_pct', 0):+.1f} %, "
                               f"P99 |err| {se.get('p99_pct', 0):.1f} %")
    ax.legend()
    ax = axes[1][1]
    t = steps["start_s"].to_numpy()
    ax.plot(t, steps["duration_s"].to_numpy() * 1e3, ".", ms=2, label="measured step")
    ax.plot(t, pred + v.report["step_overhead_s"] * 1e3, ".", ms=2,
            label="table + overhead")
    ax.set(xlabel="live time (s)", ylabel="step duration (ms)", yscale="log",
           title="live steps over time")
    ax.legend(loc="upper left")
    if "sm_clock_mhz" in steps and steps["sm_clock_mhz"].notna().any():
        clk = ax.twinx()  # GPU runs: was a slow stretch a down-clocked GPU?
        clk.plot(t, steps["sm_clock_mhz"].to_numpy(), "-", color="tab:green", lw=0.8,
                 label="SM clock")
        clk.set(ylabel="SM clock (MHz)", ylim=(0, None))
        clk.legend(loc="upper right")
    r = v.report
    fig.suptitle(f"{r['policy']} · {r['workload']} · {r['profile_label']} · worst "
                 f"|err| {r['worst_abs_error_pct']:.1f} % ({r['worst_metric']})", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    path = Path(path)
    atomic.write_bytes(path, buf.getvalue())
    return path

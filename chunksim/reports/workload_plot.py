"""One PNG per workload: arrival rate over time and the two length histograms.

matplotlib is imported inside the function (the project's rule: heavy imports stay lazy).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chunksim.core.spec import Workload


def plot_workload(workload: Workload, path: str | Path, bins: int = 60) -> Path:
    """Write arrival-rate, prompt-length and output-length panels to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    reqs = workload.requests
    arrival = np.array([r.arrival_s for r in reqs])
    prompt = np.array([r.prompt_tokens for r in reqs])
    output = np.array([r.output_tokens for r in reqs])
    span = max(arrival[-1] - arrival[0], 1e-9)
    # Up to 100 equal bins spanning exactly first..last arrival (no partial last bin that
    # would fake a rate drop), never narrower than 1 s (a rate needs counts).
    n_bins = int(max(1, min(100, span)))
    bin_s = span / n_bins if span > 1e-9 else 1.0
    edges = np.linspace(arrival[0], arrival[0] + n_bins * bin_s, n_bins + 1)
    counts, _ = np.histogram(arrival, bins=edges)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    ax.stairs(counts / bin_s, edges)
    ax.set(xlabel="time (s)", ylabel=f"arrivals / s ({bin_s:.3g} s bins)", title="arrival rate")
    for ax, x, label in ((axes[1], prompt, "prompt"), (axes[2], output, "output")):
        log_bins = np.unique(np.geomspace(max(1, x.min()), x.max() + 1, bins).astype(int))
        ax.hist(x, bins=log_bins if len(log_bins) > 2 else bins)
        ax.set_xscale("log")
        ax.axvline(x.mean(), color="k", ls="--", lw=1, label=f"mean {x.mean():.0f}")
        ax.set(xlabel=f"{label} tokens", ylabel="requests", title=f"{label} length")
        ax.legend()
    fig.suptitle(f"{workload.name}: {len(reqs)} requests over {span:.1f} s")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

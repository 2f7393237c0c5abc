"""CDFs of TTFT (per request) and ITL (pooled gaps) per configuration.

Both are heavy-tailed (a decode stall is one rare, very long gap), so x is log-scaled and
y uses a logit scale that stretches the tails: P50, P90, P99 and P99.9 are equally far
apart and a configuration's P99 is read straight off the 0.99 line.

The curves run to the slowest sample (the long prompt is the TTFT tail: it must be on the
plot), and the y axis goes only as deep as the smallest sample supports: with n values,
quantiles beyond 1 - 1/n are one value, not a distribution. Each chunk size has its own
marker, each family its own hue.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksim.reports import style
from chunksim.sim.metrics.metrics import per_request
from chunksim.sweep.configs import Config

# Probabilities at which each curve is drawn: dense in the body, denser in the tail; a
# few hundred points keep SVGs small whatever the number of gaps.
_Q = np.unique(np.concatenate([np.linspace(0.001, 0.99, 400), 1 - np.logspace(-2, -5, 150)]))
_TICKS = (0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999)
_TICK_LABELS = ("1 %", "10 %", "50 %", "90 %", "99 %", "99.9 %", "99.99 %", "99.999 %")
_TAIL = 20
"""The slowest samples are drawn one by one (plotting positions (i - 0.5) / n)."""


def _curve(values_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values_ms, dtype=float)
    v = np.sort(v[np.isfinite(v) & (v > 0)])
    if len(v) == 0:
        return np.zeros(0), np.zeros(0)
    n = len(v)
    q = _Q[(_Q >= 0.5 / n) & (_Q <= 1 - 0.5 / n)]  # no claims beyond the sample's reach
    x = np.quantile(v, q)
    k = min(_TAIL, n)
    tail_q = (np.arange(n - k, n) + 0.5) / n  # each of the slowest samples, to the max
    keep = q < tail_q[0]
    return np.concatenate([x[keep], v[n - k:]]), np.concatenate([q[keep], tail_q])


def depth(n: int) -> float:
    """The deepest quantile the y axis shows for `n` samples: the last tick <= 1 - 1/n
    (at least 90 %)."""
    ok = [t for t in _TICKS if t <= 1 - 1 / max(n, 1)]
    return max(ok[-1] if ok else 0.9, 0.9)


def cdf_figure(configs: Sequence[Config], requests: Sequence, itl_s: Sequence[np.ndarray],
               title: str):
    """Two panels: TTFT and ITL; one line per configuration."""
    plt = style.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    series = (("TTFT (arrival → first token)", [per_request(r)["ttft"] for r in requests]),
              ("ITL (gap between consecutive tokens, pooled)", list(itl_s)))
    for ax, (name, values) in zip(axes, series, strict=True):
        n_min = min((int(np.isfinite(np.asarray(v, dtype=float)).sum()) for v in values),
                    default=1)
        top = depth(n_min)
        for cfg, v in zip(configs, values, strict=True):
            x, y = _curve(np.asarray(v) * 1000.0)
            ax.plot(x, y, color=style.color(cfg), ls=style.linestyle(cfg), lw=1.4,
                    marker=style.marker(cfg), markersize=4, markevery=0.12, label=cfg.label)
        style.log_axis(ax, "x", min_ratio=1.0)
        ax.set_yscale("logit")
        hi = 1 - 0.5 / max(n_min, 1)
        ax.set_ylim(0.01, max(top, hi))
        ticks = [t for t in _TICKS if t <= top]
        ax.set_yticks(ticks)
        ax.set_yticklabels(_TICK_LABELS[:len(ticks)])
        ax.axhline(0.99, color="0.3", lw=0.8, ls=":")
        ax.set_xlabel(f"{name.split(' (')[0]} (ms, log scale)")
        ax.set_ylabel("fraction ≤ x (logit scale)")
        ax.set_title(f"{name}\n{n_min} samples per configuration (fewest)", fontsize=9)
    axes[1].legend(loc="lower right", ncol=1 if len(configs) < 7 else 2, framealpha=0.9)
    fig.suptitle(f"Latency distributions · {title}")
    fig.tight_layout()
    return fig

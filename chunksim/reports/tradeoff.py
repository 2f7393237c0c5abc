"""The trade-off curve: P99 ITL against P99 TTFT, one line per policy across chunk sizes,
and beside it the worst single stall (max ITL) against P99 TTFT.

Bigger chunks finish prompts sooner (TTFT down) but make the steps that carry them longer
(ITL up); the curve shows where each policy sits. A pooled P99 can hide one long stall
that hits few gaps (a single long prompt), hence the second panel. `whole` is one point.
"""

from __future__ import annotations

from collections.abc import Sequence

from chunksim.reports import style
from chunksim.sweep.configs import Config

Y_KEYS = ("p99_itl_ms", "max_decode_stall_ms")


def tradeoff_figure(configs: Sequence[Config], summaries: Sequence[dict], title: str,
                    x_key: str = "p99_ttft_ms", y_keys: Sequence[str] = Y_KEYS):
    plt = style.pyplot()
    fig, axes = plt.subplots(1, len(y_keys), figsize=(6.2 * len(y_keys), 4.8), squeeze=False)
    by_policy: dict = {}
    for cfg, s in zip(configs, summaries, strict=True):
        by_policy.setdefault(cfg.policy, []).append((cfg, s))
    for ax, y_key in zip(axes[0], y_keys, strict=True):
        for pts in by_policy.values():
            pts.sort(key=lambda p: p[0].sort_key)
            xs = [s[x_key] for _, s in pts]
            ys = [s[y_key] for _, s in pts]
            mid = pts[len(pts) // 2][0]  # line colour: the middle chunk of the family
            ax.plot(xs, ys, color=style.color(mid), ls=style.linestyle(mid), lw=1.2,
                    zorder=1, marker=style.marker(mid), markersize=0,
                    label=pts[0][0].policy.label)
            for (cfg, _), x, y in zip(pts, xs, ys, strict=True):
                ax.scatter([x], [y], color=style.color(cfg), marker=style.marker(cfg), s=55,
                           edgecolor="black", linewidth=0.5, zorder=2)
                if cfg.chunk is not None:  # families label on opposite sides: fewer overlaps
                    left = cfg.policy.family == "chunk"
                    ax.annotate(str(cfg.chunk), (x, y), textcoords="offset points",
                                xytext=(-7, -11) if left else (7, 4), fontsize=8,
                                ha="right" if left else "left", color="0.25")
        xlog = style.log_axis(ax, "x", [s[x_key] for s in summaries])
        ylog = style.log_axis(ax, "y", [s[y_key] for s in summaries])
        ax.set_xlabel(style.axis_label(f"{_name(x_key)} (ms", xlog))
        ax.set_ylabel(style.axis_label(f"{_name(y_key)} (ms", ylog))
        ax.set_title(f"{_name(y_key)} vs {_name(x_key)} (down-left is better)")
    leg = axes[0, 0].legend(title="policy", loc="best")
    for h in leg.legend_handles:  # show each family's marker in the legend
        h.set_markersize(6)
    fig.suptitle(f"Trade-off across chunk sizes (labels = chunk tokens) · {title}")
    fig.tight_layout()
    return fig


def _name(key: str) -> str:
    if key == "max_decode_stall_ms":
        return "worst stall (max ITL)"
    stat, metric = key.removesuffix("_ms").split("_", 1)
    return f"{stat.upper()} {metric.upper()}"

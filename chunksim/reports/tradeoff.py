"""The trade-off curve: P99 ITL against P99 TTFT, one line per policy across chunk sizes,
and beside it the worst single stall (max ITL) against P99 TTFT.

Bigger chunks finish prompts sooner (TTFT down) but make the steps that carry them longer
(ITL up); the curve shows where each policy sits. A pooled P99 can hide one long stall
that hits few gaps (a single long prompt), hence the second panel. `whole` is one point.

Honest axes: a metric spanning less than 4x is drawn on a linear axis from zero, so a
5 % difference looks like 5 %; wider spans get a log axis. Points are medians over seeds
and whiskers their range. Each label gives the chunk size and the change against `whole`,
and labels are nudged apart so none collide.
"""

from __future__ import annotations

from collections.abc import Sequence

from chunksim.reports import style
from chunksim.sweep.configs import Config

Y_KEYS = ("p99_itl_ms", "max_decode_stall_ms")


def _axis(ax, axis: str, values) -> bool:
    """Log when the values span >= 4x; else linear from zero. Returns is_log."""
    if style.log_axis(ax, axis, values):
        return True
    top = max(v for v in values if v is not None) * 1.15
    (ax.set_xlim if axis == "x" else ax.set_ylim)(0, top)
    return False


def _place(ax, points: list[tuple[float, float, str]], fontsize: float = 7.5) -> None:
    """Annotate (x, y, text) points, pushing labels apart vertically in display space so
    no two overlap (greedy, bottom to top)."""
    fig = ax.figure
    fig.draw_without_rendering()  # limits and ticks as drawn, nothing rasterized
    trans = ax.transData
    h = fontsize * 1.35 * fig.dpi / 72  # a label's height in pixels
    disp = sorted(((trans.transform((x, y)), x, y, t) for x, y, t in points),
                  key=lambda p: (p[0][1], p[0][0]))
    placed: list[tuple[float, float, float]] = []  # (x0, x1, y) of placed labels, pixels
    for (px, py), x, y, text in disp:
        w = len(text) * fontsize * 0.6 * fig.dpi / 72
        ly = py + 6
        moved = True
        while moved:
            moved = False
            for x0, x1, yy in placed:
                if px + 6 < x1 and px + 6 + w > x0 and abs(ly - yy) < h:
                    ly = yy + h
                    moved = True
        placed.append((px + 6, px + 6 + w, ly))
        ax.annotate(text, (x, y), xytext=(6, ly - py), textcoords="offset pixels",
                    fontsize=fontsize, color="0.2", va="bottom",
                    arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5}
                    if ly - py > h else None)


def tradeoff_figure(configs: Sequence[Config], summaries: Sequence[dict], title: str,
                    x_key: str = "p99_ttft_ms", y_keys: Sequence[str] = Y_KEYS,
                    stats: Sequence | None = None):
    """`stats` (`sweep.seeds.SeedStats` per configuration) adds the range whiskers."""
    plt = style.pyplot()
    fig, axes = plt.subplots(1, len(y_keys), figsize=(6.4 * len(y_keys), 5.0), squeeze=False)
    wholes: dict = {}  # the `whole` point of each fleet layout (None: not a fleet grid)
    for c, s in zip(configs, summaries, strict=True):
        if c.policy.family == "whole" and c.policy.variant is None:
            wholes.setdefault(c.fleet, s)
    by_policy: dict = {}  # one line per policy (per fleet layout and policy in fleet grids)
    for i, (cfg, s) in enumerate(zip(configs, summaries, strict=True)):
        by_policy.setdefault((cfg.fleet, cfg.policy), []).append((cfg, s, i))
    layouts = list(dict.fromkeys(c.fleet for c in configs))
    dashes = ["-", "--", ":", "-."]
    for ax, y_key in zip(axes[0], y_keys, strict=True):
        labels = []
        for pts in by_policy.values():
            pts.sort(key=lambda p: p[0].sort_key)
            xs = [s[x_key] for _, s, _ in pts]
            ys = [s[y_key] for _, s, _ in pts]
            first = pts[0][0]
            ls = (style.linestyle(first) if len(layouts) == 1
                  else dashes[layouts.index(first.fleet) % len(dashes)])
            name = (first.policy.label if first.fleet is None
                    else f"{first.fleet.label} · {first.policy.label}")
            ax.plot(xs, ys, color=style.family_color(first), ls=ls, lw=1.2, zorder=1,
                    label=name)
            for (cfg, _, i), x, y in zip(pts, xs, ys, strict=True):
                if stats is not None and stats[i].n > 1:
                    st = stats[i]
                    ax.errorbar([x], [y], xerr=[[x - st.lo[x_key]], [st.hi[x_key] - x]],
                                yerr=[[y - st.lo[y_key]], [st.hi[y_key] - y]],
                                color=style.family_color(cfg), lw=0.8, alpha=0.6, zorder=1,
                                capsize=2)
                ax.scatter([x], [y], color=style.color(cfg), marker=style.marker(cfg), s=55,
                           edgecolor="black", linewidth=0.5, zorder=2)
                text = str(cfg.chunk) if cfg.chunk is not None else cfg.policy.label
                if len(layouts) > 1 and cfg.fleet is not None:
                    text = f"{cfg.fleet.label} {text}"
                whole = wholes.get(cfg.fleet)
                if whole is not None and cfg.chunk is not None and whole[y_key] > 0:
                    text += f" ({(y / whole[y_key] - 1) * 100:+.0f} %)"
                labels.append((x, y, text))
        xlog = _axis(ax, "x", [s[x_key] for s in summaries]
                     + ([st.hi[x_key] for st in stats] if stats else []))
        ylog = _axis(ax, "y", [s[y_key] for s in summaries]
                     + ([st.hi[y_key] for st in stats] if stats else []))
        _place(ax, labels)
        ax.set_xlabel(style.axis_label(f"{_name(x_key)} (ms", xlog))
        ax.set_ylabel(style.axis_label(f"{_name(y_key)} (ms", ylog))
        ax.set_title(f"{_name(y_key)} vs {_name(x_key)} (down-left is better)\n"
                     f"labels: chunk tokens ({_name(y_key)} change vs whole)", fontsize=9)
    axes[0, 0].legend(title="fleet · policy" if len(layouts) > 1 else "policy", loc="best")
    fig.suptitle(f"Trade-off across chunk sizes (median; whiskers = range over seeds)\n{title}")
    fig.tight_layout()
    return fig


def _name(key: str) -> str:
    if key == "max_decode_stall_ms":
        return "worst stall (max ITL)"
    stat, metric = key.removesuffix("_ms").split("_", 1)
    return f"{stat.upper()} {metric.upper()}"

"""The latency–throughput knee: SLO metrics against request rate per configuration, with
the SLO bounds, and the capacities as bars."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chunksim.reports import style
from chunksim.sweep.capacity import CapacityEntry

_LEAD = ("p99_itl_ms", "p99_ttft_ms")


def panel_keys(slos: Mapping[str, float]) -> list[str]:
    """P99 ITL and P99 TTFT always, then any other SLO'd metric."""
    return list(_LEAD) + [k for k in slos if k not in _LEAD]


def knee_figure(entries: Sequence[CapacityEntry], slos: Mapping[str, float], title: str):
    plt = style.pyplot()
    keys = panel_keys(slos)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 4.4), squeeze=False,
                             layout="constrained")
    for ax, key in zip(axes[0], keys, strict=True):
        xs, ys = [], []
        for e in entries:
            # a probe that completed nothing has no latency to draw
            pts = [(p.rate, p.summary[key], p.met) for p in e.probes
                   if p.summary.get(key) is not None and p.summary[key] > 0]
            xs += [p[0] for p in pts]
            ys += [p[1] for p in pts]
            if not pts:
                continue
            c = style.color(e.config)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c,
                    ls=style.linestyle(e.config), lw=1.3, label=e.config.label, zorder=1)
            # filled = met every SLO, hollow = missed one (one collection a configuration)
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=style.marker(e.config),
                       s=22, zorder=2, facecolors=[c if p[2] else "white" for p in pts],
                       edgecolors=c, linewidth=1)
            if e.at_max is not None:
                ax.scatter([e.max_rate], [e.at_max[key]], marker="*", s=120, color=c,
                           edgecolor="black", linewidth=0.5, zorder=3)
        if key in slos:
            ax.axhline(slos[key], color="black", ls="--", lw=1.1)
            ax.annotate(f"SLO {slos[key]:g} ms", (0.01, slos[key]),
                        xycoords=("axes fraction", "data"), xytext=(0, 3),
                        textcoords="offset points", fontsize=8)
        x_log = style.log_axis(ax, "x", xs, min_ratio=1.0)
        y_log = style.log_axis(ax, "y", ys + ([slos[key]] if key in slos else []),
                               min_ratio=1.0)
        if not ys:
            ax.text(0.5, 0.5, "no probe completed a request", transform=ax.transAxes,
                    ha="center", va="center")
        ax.set_xlabel(style.axis_label("request rate (req/s", x_log))
        ax.set_ylabel(style.axis_label(f"{metric_name(key)} (ms", y_log))
        ax.set_title(metric_name(key) + (f" (SLO ≤ {slos[key]:g} ms)" if key in slos else ""))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(f"Latency vs load (filled = met every SLO, hollow = missed one, ★ = capacity)"
                 f"\n{title}")
    fig.legend(handles, labels, loc="outside right center", title="configuration")
    return fig


def metric_name(key: str) -> str:
    """`p99_itl_ms` -> `P99 ITL`, `median_sched_delay_ms` -> `median sched delay`."""
    stat, _, metric = key.removesuffix("_ms").partition("_")
    stat = stat.upper() if stat.startswith("p") and stat[1:].isdigit() else stat
    upper = metric.upper() if metric in ("ttft", "itl", "tpot", "e2el") else metric
    return f"{stat} {upper.replace('_', ' ')}".strip()


def capacity_bars_figure(entries: Sequence[CapacityEntry], recommended: CapacityEntry | None,
                         title: str):
    plt = style.pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(entries) + 2.5), 4.2))
    xs = range(len(entries))
    bars = ax.bar(xs, [e.max_rate for e in entries], color=[style.color(e.config)
                  for e in entries], edgecolor="black", linewidth=0.4)
    for b, e in zip(bars, entries, strict=True):
        best = recommended is not None and e.config == recommended.config
        txt = (f"≥{e.max_rate:.3g}" if e.capped else f"{e.max_rate:.3g}") + (" ★" if best else "")
        ax.annotate(txt, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                    va="bottom", xytext=(0, 2), textcoords="offset points", fontsize=8,
                    fontweight="bold" if best else "normal")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([e.config.label for e in entries], rotation=35, ha="right")
    ax.set_xlabel("configuration (policy, chunk tokens)")
    ax.set_ylabel("max sustainable rate (req/s)")
    ax.set_title(f"Capacity under the SLOs (★ = recommended)\n{title}")
    fig.tight_layout()
    return fig

"""Throughput and goodput bars per configuration."""

from __future__ import annotations

from collections.abc import Sequence

from chunksim.reports import style
from chunksim.sweep.configs import Config


def throughput_figure(configs: Sequence[Config], summaries: Sequence[dict], title: str):
    """Left: requests/s (throughput and, if SLOs were given, goodput); right: output and
    total tokens/s."""
    plt = style.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    n = len(configs)
    xs = list(range(n))
    colors = [style.color(c) for c in configs]
    labels = [c.label for c in configs]
    good = [s.get("request_goodput") for s in summaries]
    has_good = any(g is not None for g in good)
    w = 0.4 if has_good else 0.7
    ax1.bar([x - (w / 2 if has_good else 0) for x in xs],
            [s["request_throughput"] for s in summaries], w, color=colors,
            edgecolor="black", linewidth=0.4, label="throughput")
    if has_good:
        slos = summaries[0].get("goodput_slos_ms") or {}
        slo_txt = ", ".join(f"{k} ≤ {v:g} ms" for k, v in slos.items())
        ax1.bar([x + w / 2 for x in xs], [g or 0.0 for g in good], w, color=colors,
                hatch="///", edgecolor="black", linewidth=0.4,
                label=f"goodput ({slo_txt})")
        from matplotlib.patches import Patch

        ax1.legend(handles=[Patch(facecolor="0.55", edgecolor="black", label="throughput"),
                            Patch(facecolor="0.55", edgecolor="black", hatch="///",
                                  label=f"goodput ({slo_txt})")],
                   loc="lower right", framealpha=0.9)
    else:
        ax1.text(0.5, 0.02, "goodput: add --goodput itl=MS (or ttft, tpot, e2el) to plot it",
                 transform=ax1.transAxes, ha="center", va="bottom", fontsize=7.5,
                 color="0.2", bbox={"facecolor": "white", "alpha": 0.85, "linewidth": 0})
    ax1.set_ylabel("requests / s")
    ax1.set_title("Request throughput" + (" and goodput" if has_good else ""))
    ax2.bar([x - 0.2 for x in xs], [s["output_throughput"] for s in summaries], 0.4,
            color=colors, edgecolor="black", linewidth=0.4)
    ax2.bar([x + 0.2 for x in xs], [s["total_token_throughput"] for s in summaries], 0.4,
            color=colors, alpha=0.4, edgecolor="black", linewidth=0.4)
    ax2.set_ylabel("tokens / s")
    ax2.set_title("Token throughput: output (solid) and prompt + output (pale)")
    for ax in (ax1, ax2):
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=35, ha="right")
        ax.set_xlabel("configuration (policy, chunk tokens)")
    fig.suptitle(f"Throughput · {title}")
    fig.tight_layout()
    return fig

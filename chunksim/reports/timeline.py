"""Step timeline around the longest prompt's arrival: the picture of a decode stall.

One column per configuration, same time window for all. Each step is a bar that starts
when the step starts and is as wide as the step lasts. Top: its tokens (grey = decodes,
colour = prefill); bottom: its duration. Under `whole`, the long prompt is one wide, tall
step during which every running decode waits; chunked policies spread it over many short
steps that keep decoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksim.reports import style
from chunksim.sweep.configs import Config


def longest_request(requests) -> int:
    """Row index of the longest prompt (the earliest on ties), from the records."""
    tokens = requests["prompt_tokens"].to_numpy()
    return int(np.flatnonzero(tokens == tokens.max())[0])


def window(requests_list: Sequence, steps_list: Sequence) -> tuple[float, float, float]:
    """(arrival of the longest prompt, window start, window end), seconds. The window
    covers arrival -> the latest first token of that prompt over the configurations."""
    req0 = requests_list[0]
    i = longest_request(req0)
    t0 = float(req0["arrival_s"].iloc[i])
    firsts = [float(r["first_token_s"].iloc[i]) for r in requests_list]
    firsts = [f for f in firsts if np.isfinite(f)]
    typical = float(np.median(np.concatenate(
        [s["duration_s"].to_numpy() for s in steps_list if len(s)] or [np.ones(1)])))
    span = max((max(firsts) - t0) if firsts else 0.0, 20 * typical)
    return t0, t0 - 0.25 * span, t0 + 1.3 * span


def timeline_figure(configs: Sequence[Config], requests_list: Sequence, steps_list: Sequence,
                    title: str):
    plt = style.pyplot()
    k = len(configs)
    fig, axes = plt.subplots(2, k, figsize=(4.2 * k + 0.6, 6.2), sharex=True, sharey="row",
                             squeeze=False)
    i_long = longest_request(requests_list[0])
    t0, lo, hi = window(requests_list, steps_list)
    long_tokens = int(requests_list[0]["prompt_tokens"].iloc[i_long])
    for col, (cfg, req, steps) in enumerate(zip(configs, requests_list, steps_list,
                                               strict=True)):
        s = steps[(steps["start_s"] + steps["duration_s"] >= lo) & (steps["start_s"] <= hi)]
        x = s["start_s"].to_numpy() - t0
        w = s["duration_s"].to_numpy()
        dec = s["decodes"].to_numpy().astype(float)
        pre = s["prefill_tokens"].to_numpy().astype(float)
        top, bot = axes[0, col], axes[1, col]
        c = style.color(cfg)
        base = 0.8  # log axis floor: bars start here so a 1-token part stays visible
        style.bars(top, x, w, base, np.maximum(dec, base), color="0.6", linewidth=0)
        style.bars(top, x, w, np.maximum(dec, base), np.maximum(dec, base) + pre, color=c,
                   linewidth=0)
        style.bars(bot, x, w, 0.0, w * 1000.0, color=c, linewidth=0.3, edgecolor="0.2")
        first = float(req["first_token_s"].iloc[i_long]) - t0
        for ax in (top, bot):
            ax.axvline(0.0, color="black", ls="--", lw=0.9)
            if np.isfinite(first):
                ax.axvline(first, color="black", ls="-", lw=0.9)
            ax.set_yscale("log")
        worst = float(w.max() * 1000.0) if len(w) else 0.0
        ttft = f"{first:.2f} s" if np.isfinite(first) else "rejected"
        top.set_title(f"{cfg.label}\nlong prompt TTFT {ttft} · longest step {worst:.0f} ms",
                      color=c if cfg.policy.family != "whole" else "black")
        bot.set_xlabel(f"time since the {long_tokens}-token prompt arrived (s)")
    axes[0, 0].set_ylabel("tokens in the step (log)")
    axes[1, 0].set_ylabel("step duration (ms, log)")
    axes[0, 0].set_xlim(lo - t0, hi - t0)
    fig.suptitle(f"Steps around the longest prompt · {title}\n"
                 "bar width = step duration · grey = decode tokens · colour = prefill tokens · "
                 "dashed = long prompt arrives · solid = its first token", fontsize=10)
    fig.tight_layout()
    return fig

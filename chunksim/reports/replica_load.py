"""Per-replica load of fleet runs: how many requests each replica served and how busy it
was, one group of bars per configuration (`sim compare --fleet`).

`replica_load` is a pure function of a run's records: the replica columns of
`requests.csv` (`replica`, or `prefill_replica` / `decode_replica` under P/D), the
`replica` and `duration_s` columns of `steps.csv`, and the fleet size in the run's meta.
A lone engine is one replica. The busy fraction divides by the run's duration as the
summary does (first arrival to last finish), so a replica's figure here equals its
`busy_fraction` in the summary's `replicas` rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from chunksim.reports import style
from chunksim.sim.engine.engine import SimResult
from chunksim.sweep.configs import Config

COLUMNS = ("replica", "pool", "requests", "busy_s", "busy_fraction")
_POOL_COLORS = {"replica": "#1f6fb4", "prefill": "#c0392b", "decode": "#2e8b3e"}


def _pools(meta: dict) -> list[tuple[str, int]]:
    """(pool, instances) in replica order: P/D prefill first, as steps number them."""
    f = meta.get("fleet") or {}
    if "prefill_instances" in f:
        return [("prefill", int(f["prefill_instances"])), ("decode", int(f["decode_instances"]))]
    return [("replica", int(f.get("replicas", 1)))]


def run_duration(requests: pd.DataFrame) -> float:
    """First arrival to last finish of the completed requests (the summary's duration)."""
    done = requests[~requests["rejected"].to_numpy()]
    if not len(done):
        return 0.0
    return float(np.nanmax(done["finish_s"].to_numpy()) - requests["arrival_s"].min())


def replica_load(result: SimResult) -> pd.DataFrame:
    """One row per replica (`COLUMNS`): requests routed to it (under P/D: to prefill
    there, or to decode there after a handoff; rejected ones included, as in the
    summary's rows), seconds it spent in steps, and that over the run's duration."""
    req, steps = result.requests, result.steps
    busy = (steps.groupby("replica")["duration_s"].sum() if "replica" in steps.columns
            else pd.Series({0: float(steps["duration_s"].sum())}))
    duration = max(run_duration(req), 1e-12)
    rows, base = [], 0
    for pool, n in _pools(result.meta):
        col = {"prefill": "prefill_replica", "decode": "decode_replica"}.get(pool, "replica")
        served = (req[col].to_numpy() if col in req.columns
                  else np.zeros(len(req), dtype=np.int64))
        for r in range(n):
            b = float(busy.get(base + r, 0.0))
            rows.append({"replica": base + r, "pool": pool,
                         "requests": int((served == r).sum()), "busy_s": b,
                         "busy_fraction": b / duration})
        base += n
    return pd.DataFrame(rows, columns=list(COLUMNS))


def replica_load_figure(configs: Sequence[Config], loads: Sequence[pd.DataFrame], title: str):
    """Busy fraction (top) and requests served (bottom) per replica, one group of bars per
    configuration; colour = pool (replica, prefill, decode)."""
    plt = style.pyplot()
    width = max(6.0, 0.28 * sum(len(x) for x in loads) + 0.6 * len(loads) + 2.0)
    fig, axes = plt.subplots(2, 1, figsize=(width, 6.4), sharex=True)
    ticks, names, x = [], [], 0.0
    seen: set[str] = set()
    for cfg, load in zip(configs, loads, strict=True):
        xs = x + np.arange(len(load))
        colors = [_POOL_COLORS[p] for p in load["pool"]]
        for ax, key in zip(axes, ("busy_fraction", "requests"), strict=True):
            ax.bar(xs, load[key], width=0.8, color=colors, edgecolor="black", linewidth=0.3)
        for pool in dict.fromkeys(load["pool"]):
            if pool not in seen:
                seen.add(pool)
                axes[0].bar([np.nan], [np.nan], color=_POOL_COLORS[pool], label=pool)
        ticks.append(float(xs.mean()) if len(xs) else x)
        names.append(cfg.label)
        x += len(load) + 1.0
    axes[0].set_ylabel("busy fraction (step time / run)")
    axes[0].set_ylim(0, max(1.0, max((float(x_["busy_fraction"].max()) for x_ in loads
                                      if len(x_)), default=1.0)) * 1.05)
    axes[1].set_ylabel("requests served")
    axes[1].set_xticks(ticks)
    axes[1].set_xticklabels(names, rotation=30, ha="right")
    axes[0].legend(title="pool", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[0].set_title(f"Per-replica load (one bar per replica, first seed)\n{title}")
    fig.tight_layout()
    return fig

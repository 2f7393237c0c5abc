"""The latency table as heatmaps: median step time over chunk_len x decode_count, one
panel per kv_len (a few, spread over the measured grid). Cells the profiler pruned (KV
beyond device memory) are blank: the simulator extrapolates there."""

from __future__ import annotations

import numpy as np

from chunksim.reports import style


def step_table(profile):
    """The whole-step rows a heatmap shows: the table itself, or for a component profile
    its composed step times on a small grid (one chunk, equal decode contexts)."""
    if profile.kind != "components":
        return profile.table
    import pandas as pd

    from chunksim.core.shape import BatchShape
    from chunksim.latency.select import latency_model

    lat = latency_model(profile, 0.0)
    rows = []
    for c in (0, 64, 256, 1024, 2048, 4096):
        for d in (0, 1, 8, 32, 64, 128):
            for k in ((256, 1024, 4096) if d else (0,)):
                if c or d:
                    t = lat.step_s(BatchShape(c, 0.0, d, float(k)))[0]
                    rows.append({"chunk_len": c, "prior_len": 0, "decode_count": d,
                                 "kv_len": k, "median_s": t})
    return pd.DataFrame(rows)


def pick_kv(table, n: int = 3) -> list[int]:
    """Up to n kv_len values spread over the measured ones (smallest, middle, largest)."""
    kvs = sorted(int(k) for k in table.loc[table["decode_count"] > 0, "kv_len"].unique())
    if len(kvs) <= n:
        return kvs
    idx = np.unique(np.round(np.linspace(0, len(kvs) - 1, n)).astype(int))
    return [kvs[i] for i in idx]


def heatmap_figure(table, title: str, n_kv: int = 3):
    """`table`: the profile's rows (columns of docs/profile-format.md)."""
    from matplotlib.colors import LogNorm

    plt = style.pyplot()
    main = table[table["prior_len"] == 0]
    chunks = sorted(int(c) for c in main["chunk_len"].unique())
    decodes = sorted(int(d) for d in main["decode_count"].unique())
    kvs = pick_kv(main, n_kv) or [0]
    grids = []
    for kv in kvs:
        g = np.full((len(decodes), len(chunks)), np.nan)
        for r in main.itertuples(index=False):
            # decode_count == 0 rows are measured once (kv_len 0) and hold for every kv_len
            if r.decode_count == 0 or r.kv_len == kv:
                g[decodes.index(int(r.decode_count)), chunks.index(int(r.chunk_len))] = (
                    r.median_s * 1000.0)
        grids.append(g)
    vals = np.concatenate([g[np.isfinite(g)] for g in grids])
    norm = LogNorm(vmin=float(vals.min()), vmax=float(vals.max()))
    fig, axes = plt.subplots(1, len(kvs), figsize=(4.6 * len(kvs) + 1.2, 4.4), squeeze=False,
                             layout="constrained")
    annotate = len(chunks) * len(decodes) <= 80
    for n, (ax, kv, g) in enumerate(zip(axes[0], kvs, grids, strict=True)):
        im = ax.imshow(g, origin="lower", cmap="viridis", norm=norm, aspect="auto")
        ax.set_xticks(range(len(chunks)))
        ax.set_xticklabels(chunks, rotation=45, ha="right")
        ax.set_yticks(range(len(decodes)))
        ax.set_yticklabels(decodes)
        ax.set_xlabel("chunk_len (prefill tokens in the step)")
        if n == 0:
            ax.set_ylabel("decode_count (sequences decoding)")
        ax.set_title(f"kv_len = {kv} tokens per decode")
        ax.grid(False)
        if annotate:
            mid = np.sqrt(norm.vmin * norm.vmax)
            for (i, j), v in np.ndenumerate(g):
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6,
                            color="white" if v < mid else "black")
    fig.colorbar(im, ax=axes[0].tolist(), label="median step time (ms, log scale)",
                 shrink=0.9)
    fig.suptitle(f"Latency table (step time) · profile {title}")
    return fig

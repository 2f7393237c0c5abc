"""The latency table as heatmaps: median step time over chunk_len x decode_count, one
panel per kv_len (a few, spread over the measured grid). Cells the profiler pruned (KV
beyond device memory) are blank: the simulator extrapolates there. Given the runs' steps,
the cells they used are ringed (○, nearest cell in log space) and the edge cells that
steps beyond the grid were extrapolated from are crossed (×)."""

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


def _nearest(grid: list[int], values) -> np.ndarray:
    """Index of the nearest grid value in log space (0 maps to a 0 entry if present).
    Each distinct value is looked up once: a run's steps repeat a few token counts."""
    g = np.log1p(np.asarray(grid, dtype=float))
    distinct, back = np.unique(np.asarray(values, dtype=float), return_inverse=True)
    v = np.log1p(distinct)
    return np.abs(v[:, None] - g[None, :]).argmin(axis=1)[back.reshape(-1)]


def used_cells(steps, chunks: list[int], decodes: list[int]) -> tuple[set, set]:
    """(cells used, cells extrapolated from) as (decode index, chunk index) pairs."""
    if steps is None or len(steps) == 0:
        return set(), set()
    ci = _nearest(chunks, steps["prefill_tokens"].to_numpy())
    di = _nearest(decodes, steps["decodes"].to_numpy())
    ext = steps["extrapolated"].to_numpy().astype(bool)
    used = set(zip(di[~ext].tolist(), ci[~ext].tolist(), strict=True))
    extrap = set(zip(di[ext].tolist(), ci[ext].tolist(), strict=True))
    return used, extrap


def heatmap_figure(table, title: str, n_kv: int = 3, steps=None):
    """`table`: the profile's rows (columns of docs/profile-format.md); `steps`: the runs'
    step records (one frame, or a list of frames), to mark the cells they used."""
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
    if isinstance(steps, (list, tuple)):
        import pandas as pd

        steps = pd.concat(list(steps), ignore_index=True) if steps else None
    used, extrap = used_cells(steps, chunks, decodes)
    fig, axes = plt.subplots(1, len(kvs), figsize=(4.6 * len(kvs) + 1.2, 4.8), squeeze=False,
                             layout="constrained")
    annotate = len(chunks) * len(decodes) <= 80
    for n, (ax, kv, g) in enumerate(zip(axes[0], kvs, grids, strict=True)):
        im = ax.imshow(g, origin="lower", cmap="viridis", norm=norm, aspect="auto")
        ax.set_xticks(range(len(chunks)))
        ax.set_xticklabels(chunks, rotation=45, ha="right", fontsize=9)
        ax.set_yticks(range(len(decodes)))
        ax.set_yticklabels(decodes, fontsize=9)
        # one collection per kind of mark (the cells' marks never overlap)
        if used:
            i, j = np.array(sorted(used)).T
            ax.scatter(j, i, s=150, facecolor="none", edgecolor="white", linewidth=1.4)
            ax.scatter(j, i, s=150, facecolor="none", edgecolor="black", linewidth=0.6)
        if extrap:
            i, j = np.array(sorted(extrap)).T
            ax.scatter(j, i, s=110, marker="x", color="red", linewidth=1.6)
        ax.set_xlabel("chunk_len (prefill tokens in the step)")
        if n == 0:
            ax.set_ylabel("decode_count (sequences decoding)")
        ax.set_title(f"kv_len = {kv} tokens per decode")
        ax.grid(False)
        if annotate:
            mid = np.sqrt(norm.vmin * norm.vmax)
            for (i, j), v in np.ndenumerate(g):
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                            color="white" if v < mid else "black")
    fig.colorbar(im, ax=axes[0].tolist(), label="median step time (ms, log scale)",
                 shrink=0.9)
    marks = " · ○ = cell the runs used, × = extrapolated beyond the grid" if steps is not None \
        else ""
    fig.suptitle(f"Latency table (step time) · profile {title}{marks}")
    return fig

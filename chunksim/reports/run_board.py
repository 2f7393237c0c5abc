"""`sim run --out D --report`: D/report.html, the operator's board of one simulated
deployment over the run's time (series from `reports.board`, pure functions of the records):

- queue: waiting and running requests (window mean, and max), and the requests rejected
  at arrival in each window;
- KV: blocks in use against the capacity;
- busy: the share of each window a step was in flight (not a utilisation: small steps
  back to back read 100 %), and beside it the budget use, the tokens the steps scheduled
  against what the step budget allowed (`reports.board.budget_use`);
- tokens: prefill and decode tokens per step against the step budget;
- TTFT and ITL: P50 and P99 per window, per request class, against the SLOs;
- the observables: what the series point at (`reports.board.observables`), their windows
  shaded on the panels they concern.

Each figure function takes optional `measured` series of the same shape (a bench run's,
from `sim validate --against`) and draws them dashed beside the predicted ones.
"""

from __future__ import annotations

from pathlib import Path

from chunksim.reports import style
from chunksim.reports.board import Observable
from chunksim.reports.document import Document
from chunksim.sim.metrics.metric_registry import shown

PANELS = {
    "queue": ("board_queue", "Waiting and running requests"),
    "kv": ("board_kv", "KV blocks in use"),
    "busy": ("board_busy", "Step in flight, and step budget used"),
    "tokens": ("board_tokens", "Prefill and decode tokens per step"),
    "ttft": ("board_ttft", "TTFT per window, by request class"),
    "itl": ("board_itl", "ITL per window, by request class"),
}
"""Panel -> (file stem, title)."""

MARKS = {"rejected": ("queue",), "long_idle": ("queue", "tokens"),
         "long_rationed": ("queue", "tokens"),
         "long_blocked": ("queue", "kv"), "itl": ("itl", "tokens"), "ttft": ("ttft", "queue"),
         "busy": ("busy",)}
"""Observable -> the panels whose windows it shades."""
_SHADE = {"rejected": "#e67e22", "long_idle": "#f6c343", "long_rationed": "#f39c12",
          "long_blocked": "#8e44ad",
          "itl": "#e74c3c", "ttft": "#c0392b", "busy": "#95a5a6"}


def _shade(ax, obs: list[Observable], panel: str, window_s: float) -> list[str]:
    """Shade the windows of every fired observable that marks `panel`; returns their keys."""
    marked = []
    for o in obs:
        if not o.fired or panel not in MARKS.get(o.key, ()) or not o.windows:
            continue
        first = True
        for t in _merge(o.windows, window_s):
            ax.axvspan(t[0], t[1], color=_SHADE.get(o.key, "#ccc"), alpha=0.18, lw=0,
                       label=o.key if first else None)
            first = False
        marked.append(o.key)
    return marked


def _merge(times: tuple[float, ...], width: float) -> list[tuple[float, float]]:
    """Window starts (or step starts) -> merged [start, end) spans of `width` each."""
    spans: list[list[float]] = []
    for t in sorted(times):
        if spans and t <= spans[-1][1] + 1e-12:
            spans[-1][1] = max(spans[-1][1], t + width)
        else:
            spans.append([t, t + width])
    return [(a, b) for a, b in spans]


def _fig(title: str):
    plt = style.pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 2.6))
    ax.set_title(title)
    ax.set_xlabel("time, s")
    return fig, ax


def queue_figure(w, obs, window_s, measured=None):
    fig, ax = _fig(PANELS["queue"][1])
    ax.step(w["t_s"], w["waiting_mean"], where="post", label="waiting (mean)", color="#c0392b")
    ax.step(w["t_s"], w["running_mean"], where="post", label="running (mean)", color="#1f6fb4")
    ax.step(w["t_s"], w["waiting_max"], where="post", lw=0.6, color="#c0392b", alpha=0.5,
            label="waiting (max)")
    if "rejected" in w and w["rejected"].any():
        ax.step(w["t_s"], w["rejected"], where="post", color="#e67e22", lw=1.4,
                label="rejected (in window)")
    if measured is not None and "waiting_mean" in measured:
        ax.step(measured["t_s"], measured["waiting_mean"], where="post", ls="--",
                color="#c0392b", label="waiting (measured)")
    ax.set_ylabel("requests")
    fig.marked = _shade(ax, obs, "queue", window_s)
    ax.legend(loc="upper left", ncol=3)
    return fig


def kv_figure(w, obs, window_s, kv_capacity: int | None, measured=None):
    fig, ax = _fig(PANELS["kv"][1])
    ax.step(w["t_s"], w["kv_blocks_mean"], where="post", label="in use (mean)", color="#16a085")
    ax.step(w["t_s"], w["kv_blocks_max"], where="post", lw=0.6, color="#16a085", alpha=0.5,
            label="in use (max)")
    if kv_capacity:
        ax.axhline(kv_capacity, color="k", ls=":", lw=1, label=f"capacity {kv_capacity}")
    if measured is not None and "kv_blocks_mean" in measured:
        ax.step(measured["t_s"], measured["kv_blocks_mean"], where="post", ls="--",
                color="#16a085", label="in use (measured)")
    ax.set_ylabel("KV blocks")
    fig.marked = _shade(ax, obs, "kv", window_s)
    ax.legend(loc="upper left", ncol=3)
    return fig


def busy_figure(w, obs, window_s, measured=None):
    fig, ax = _fig(PANELS["busy"][1])
    ax.step(w["t_s"], w["busy_fraction"] * 100, where="post", label="step in flight",
            color="#34495e")
    if "budget_use" in w and w["budget_use"].notna().any():
        ax.step(w["t_s"], w["budget_use"] * 100, where="post", label="budget used",
                color="#d35400")
    if measured is not None and "busy_fraction" in measured:
        ax.step(measured["t_s"], measured["busy_fraction"] * 100, where="post", ls="--",
                color="#34495e", label="busy (measured)")
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of the window")
    fig.marked = _shade(ax, obs, "busy", window_s)
    ax.legend(loc="lower left", ncol=3)
    return fig


def tokens_figure(w, obs, window_s, budget: int | None, measured=None):
    fig, ax = _fig(PANELS["tokens"][1])
    ax.step(w["t_s"], w["prefill_tokens_per_step"], where="post", label="prefill",
            color="#8e44ad")
    ax.step(w["t_s"], w["decode_tokens_per_step"], where="post", label="decode",
            color="#2e8b3e")
    if budget:
        ax.axhline(budget, color="k", ls=":", lw=1, label=f"budget {budget}")
    if measured is not None and "prefill_tokens_per_step" in measured:
        ax.step(measured["t_s"], measured["prefill_tokens_per_step"], where="post", ls="--",
                color="#8e44ad", label="prefill (measured)")
    ax.set_ylabel("tokens per step (mean)")
    fig.marked = _shade(ax, obs, "tokens", window_s)
    ax.legend(loc="upper left", ncol=3)
    return fig


def latency_figure(kind: str, frame, obs, window_s, slo_ms: float | None, measured=None):
    """TTFT or ITL (`kind`): P50 (thin) and P99 (thick) per window, one colour per class."""
    fig, ax = _fig(PANELS[kind][1])
    plt = style.pyplot()
    classes = list(dict.fromkeys(frame["request_class"])) if len(frame) else []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, c in enumerate(classes):
        f = frame[frame["request_class"] == c]
        col = "#222" if c == "all" else colors[i % len(colors)]
        ax.plot(f["t_s"], f["p99_ms"], color=col, lw=1.6, marker=".", label=f"{c} P99")
        ax.plot(f["t_s"], f["p50_ms"], color=col, lw=0.8, alpha=0.7, label=f"{c} P50")
    if measured is not None and len(measured):
        m = measured[measured["request_class"] == "all"] if "request_class" in measured \
            else measured
        ax.plot(m["t_s"], m["p99_ms"], color="#222", ls="--", lw=1.4, label="measured P99")
        ax.plot(m["t_s"], m["p50_ms"], color="#222", ls=":", lw=1.0, label="measured P50")
    if slo_ms is not None:
        ax.axhline(slo_ms, color="#e74c3c", ls=":", lw=1.2, label=f"SLO {slo_ms:g} ms")
    ax.set_ylabel(f"{kind.upper()}, ms")
    if len(frame) and (frame["p99_ms"] > 0).all() and \
            frame["p99_ms"].max() / max(frame["p50_ms"].min(), 1e-9) > 50:
        ax.set_yscale("log")
    fig.marked = _shade(ax, obs, kind, window_s)
    ax.legend(loc="upper left", ncol=4, fontsize=7)
    return fig


def board_figures(board: dict, measured: dict | None = None) -> dict:
    """Panel -> matplotlib figure (each carries `marked`: the observables it shades).
    `board` holds windows, ttft, itl, observables, window_s, kv_capacity, budget, slos_ms;
    `measured` the same keys for a bench run (any subset)."""
    m = measured or {}
    obs, ws = board["observables"], board["window_s"]
    slos = board.get("slos_ms", {})
    return {
        "queue": queue_figure(board["windows"], obs, ws, m.get("windows")),
        "kv": kv_figure(board["windows"], obs, ws, board.get("kv_capacity"), m.get("windows")),
        "busy": busy_figure(board["windows"], obs, ws, m.get("windows")),
        "tokens": tokens_figure(board["windows"], obs, ws, board.get("budget"),
                                m.get("windows")),
        "ttft": latency_figure("ttft", board["ttft"], obs, ws, slos.get("ttft"), m.get("ttft")),
        "itl": latency_figure("itl", board["itl"], obs, ws, slos.get("itl"), m.get("itl")),
    }


def board_document(board: dict, summary: dict, figure_files: dict[str, str]) -> Document:
    """The page: what the run says (the observables), then every panel."""
    title = (f"chunksim run board — {summary.get('workload', '?')} · "
             f"{summary.get('policy', '?')} · {summary.get('profile_label', '')}")
    doc = Document(title)
    fired = [o for o in board["observables"] if o.fired]
    lines = [f"**{o.text}** — {o.advice}." for o in fired] or [
        "Nothing on the board points at a knob: every observable is within its bound."]
    rejected = board.get("rejected", summary.get("rejected") or 0)
    lines.append(f"Windows of {board['window_s']:g} s over {board['end_s']:.1f} s; "
                 f"{summary.get('completed', 0)} requests completed"
                 + (f", {rejected} rejected at arrival" if rejected else "") + ".")
    doc.verdict("What the run says", lines)
    doc.bullets([f"{o.key}: {o.text}" for o in board["observables"] if not o.fired]
                or ["every observable fired"])
    for panel, (_stem, caption) in PANELS.items():
        doc.heading(caption)
        doc.figure(figure_files[panel], _caption(panel, board))
    gaps = board.get("gap_facts", {})
    if gaps:
        doc.para(f"ITL: {gaps['exact'] * 100:.1f} % of the {gaps['gaps']:,} token gaps are "
                 "read exactly off the step ends; the rest (requests that paused) carry their "
                 "mean gap" + (f"; every {gaps['every']}-th request read" if gaps['every'] > 1
                               else "") + ".")
    use = board.get("run_budget_use", float("nan"))
    doc.table(["metric", "value"], [
        ["requests rejected", f"{rejected} of {summary.get('completed', 0) + rejected}"],
        ["step in flight, share of time",
         f"{board['windows']['busy_fraction'].mean() * 100:.1f} %"],
        ["budget used (tokens per step / budget)",
         f"{use * 100:.1f} %" if use == use else "– (no step budget)"],
        ["peak waiting", f"{board['windows']['waiting_max'].max():.0f}"],
        ["peak KV blocks", f"{board['windows']['kv_blocks_max'].max():.0f}"
         + (f" of {board['kv_capacity']}" if board.get("kv_capacity") else "")],
        *([f"{m.label}, {m.unit}", _fmt(summary.get(m.key))] for m in shown("board")),
    ], numeric=False)
    return doc


def _fmt(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def _caption(panel: str, board: dict) -> str:
    shaded = [k for k, ps in MARKS.items() if panel in ps and any(
        o.key == k and o.fired for o in board["observables"])]
    base = {
        "queue": "Mean (and max) waiting and running requests over the steps of each "
                 "window, and the requests rejected at arrival in it",
        "kv": "KV blocks in use, against the capacity",
        "busy": "Share of each window a step was in flight (100 % when steps run back to "
                "back, however small), and budget used: the tokens the window's steps "
                "scheduled over steps × the step budget (100 %: every step full)",
        "tokens": "Mean prefill and decode tokens per step, against the step budget",
        "ttft": "P99 (thick) and P50 (thin) TTFT of the requests arriving in each window",
        "itl": "P99 (thick) and P50 (thin) gap between tokens made in each window",
    }[panel]
    return base + (f"; shaded: {', '.join(shaded)}" if shaded else "") + "."


def render_board(board: dict, summary: dict, measured: dict | None = None) -> dict[str, bytes]:
    """{file name: bytes} of report.html and its PNGs (what `sim run --report` adds)."""
    import tempfile

    figs = board_figures(board, measured)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for panel, fig in figs.items():
            stem = PANELS[panel][0]
            (path,) = style.save(fig, Path(tmp), stem, ("png",))
            files[path.name] = path.read_bytes()
        doc = board_document(board, summary, {p: f"{PANELS[p][0]}.png" for p in PANELS})
        html = doc.to_html(Path(tmp))
    files["report.html"] = html.encode()
    return files

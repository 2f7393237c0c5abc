"""Figure style shared by every plot: the Agg backend, one colour per configuration,
atomic saving. matplotlib is imported inside functions so `sim run` never loads it.

Colours: each policy family (and variant) owns one distinct hue (`family_color`) and a
line style; the chunk size picks a marker (`marker`) and a shade of the hue on a fixed
log2 scale (bigger chunk = darker; `color`), so a configuration looks the same in every
figure and every report, and two chunk sizes of one family differ by marker, not only by
a shade. In a fleet grid (`Config.fleet` set) the hue is the layout's instead: blues for
colocated replicas, one hue per prefill count for P/D splits (`_fleet_cmap`); the chunk
size still picks the marker and shade. PNGs are written at 2x (`PNG_SCALE`) so they stay
sharp on high-density screens.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

from chunksim import atomic
from chunksim.sweep.configs import Config

# (family, variant or None) -> colormap; one hue per family, variants get a sibling hue.
_CMAPS = {
    ("whole", None): "Reds",
    ("whole", "mixed"): "Oranges",
    ("chunk", None): "Purples",
    ("chunk", "two-pass"): "RdPu",
    ("chunk", "alternate"): "Greys",
    ("budget", None): "Blues",
    ("sjf", None): "Greens",
}
_FAMILY_COLORS = {
    ("whole", None): "#c0392b", ("whole", "mixed"): "#e67e22", ("chunk", None): "#8e44ad",
    ("chunk", "two-pass"): "#d63384", ("chunk", "alternate"): "#555555",
    ("budget", None): "#1f6fb4", ("sjf", None): "#2e8b3e",
}
_CHUNK_MARKERS = {64: "P", 128: "X", 256: "o", 512: "^", 1024: "D", 2048: "v", 4096: "p",
                  8192: "*", 16384: "h"}
_UNCHUNKED_MARKER = "s"
_LINESTYLES = {"whole": "-", "chunk": "--", "budget": "-", "sjf": "-."}
# a family with no style of its own (a newly registered policy) still draws, in these
_DEFAULT_CMAP, _DEFAULT_MARKER, _DEFAULT_LINESTYLE = "YlOrBr", "8", ":"
_DEFAULT_FAMILY_COLOR = "#b7950b"
DPI = 110
PNG_SCALE = 2
"""PNGs are rendered at PNG_SCALE x DPI and shown at 1/PNG_SCALE of their pixel size."""


_loading: list = []
"""The thread importing matplotlib in the background (`load_in_background`), once
started."""


def load_in_background(also: tuple[str, ...] = ()) -> None:
    """Start importing matplotlib, then the modules `also` names (e.g. pandas, where the
    report builds tables), on a background thread. A command that draws figures once its
    runs are done calls this first: its main thread mostly waits on worker processes
    meanwhile, so the imports (a few tenths of a second each) are off the critical path.
    `pyplot` waits for the thread to finish; an import of one of `also` meanwhile waits
    for that module (Python's import lock), never imports it twice. Only the first call
    starts the thread: a later one changes nothing, whatever it names."""
    import threading

    if not _loading:
        t = threading.Thread(target=_load, args=(also,), name="chunksim-load-matplotlib",
                             daemon=True)
        _loading.append(t)
        t.start()


def _load(also: tuple[str, ...] = ()):
    import importlib

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    for name in also:
        importlib.import_module(name)
    return plt


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    if _loading and _loading[0].is_alive():
        _loading[0].join()
    plt = _load()
    plt.rcParams.update({
        "figure.dpi": DPI, "savefig.dpi": DPI, "font.size": 9, "axes.titlesize": 10,
        "axes.labelsize": 9, "legend.fontsize": 8, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False,
        "svg.hashsalt": "chunksim",  # deterministic SVG ids
    })
    return plt


_FLEET_PD_CMAPS = ("Reds", "Greens", "Purples", "Oranges", "RdPu", "Greys", "YlOrBr")


def _fleet_cmap(config: Config) -> str | None:
    """The layout's colormap: Blues for colocated replicas, P/D by its prefill count (1:3
    and 1:7 share a hue, 2:2 gets another); None outside fleet grids."""
    f = config.fleet
    if f is None:
        return None
    return "Blues" if f.pd is None else _FLEET_PD_CMAPS[(f.pd[0] - 1) % len(_FLEET_PD_CMAPS)]


def color(config: Config) -> tuple[float, float, float, float]:
    """The configuration's colour (family or fleet-layout hue, chunk-size shade)."""
    from matplotlib import colormaps

    p = config.policy
    cmap = colormaps[_fleet_cmap(config) or _CMAPS.get(
        (p.family, p.variant), _CMAPS.get((p.family, None), _DEFAULT_CMAP))]
    if config.chunk is None:
        shade = 0.75
    else:  # 64 -> 0.35 ... 4096 -> 0.95, fixed so it never depends on the grid
        shade = min(0.95, max(0.35, 0.35 + 0.1 * (math.log2(config.chunk) - 6)))
    return cmap(shade)


def family_color(config: Config) -> str:
    """The family's (and variant's) one hue, whatever the chunk size (in a fleet grid,
    the layout's)."""
    if (fleet_cmap := _fleet_cmap(config)) is not None:
        from matplotlib import colormaps
        from matplotlib.colors import to_hex

        return to_hex(colormaps[fleet_cmap](0.75))
    p = config.policy
    return _FAMILY_COLORS.get((p.family, p.variant),
                              _FAMILY_COLORS.get((p.family, None), _DEFAULT_FAMILY_COLOR))


def marker(config: Config) -> str:
    """The chunk size's marker (a square for unchunked `whole`)."""
    if config.chunk is None:
        return _UNCHUNKED_MARKER
    return _CHUNK_MARKERS.get(config.chunk, _DEFAULT_MARKER)


def linestyle(config: Config) -> str:
    return _LINESTYLES.get(config.policy.family, _DEFAULT_LINESTYLE)


def bars(ax, x, width, bottom, top, **kw) -> None:
    """Bars from `x` to `x + width` and from `bottom` to `top` (arrays, or scalars for
    all), as one collection: `ax.bar` makes an artist per bar, which thousands of steps
    make slow to build and to draw. Zero-height bars are left out, as they draw nothing.
    The axis limits take the bars in, as `ax.bar`'s do, with no margin below their base."""
    import numpy as np
    from matplotlib.collections import PolyCollection

    x = np.asarray(x, dtype=float)
    n = len(x)
    w = np.broadcast_to(np.asarray(width, dtype=float), n)
    y0 = np.broadcast_to(np.asarray(bottom, dtype=float), n)
    y1 = np.broadcast_to(np.asarray(top, dtype=float), n)
    keep = y1 != y0
    x, w, y0, y1 = x[keep], w[keep], y0[keep], y1[keep]
    verts = np.stack([np.column_stack(p) for p in
                      ((x, y0), (x, y1), (x + w, y1), (x + w, y0))], axis=1)
    coll = PolyCollection(verts, closed=True, **kw)
    if len(y0):  # as ax.bar: no margin below the bars' base
        coll.sticky_edges.y.append(float(y0.min()))
    ax.add_collection(coll, autolim=True)
    ax.autoscale_view()


def save(fig, out_dir: Path, stem: str, formats: tuple[str, ...]) -> list[Path]:
    """Write `stem.<fmt>` for each format atomically; close the figure.

    The figure is drawn once, at the PNG's resolution, and its tight bounding box taken
    from that draw, once for every format (savefig's "tight" lays the figure out again per
    file, which costs about as much as drawing it). Where everything drawn lies on the
    canvas (the padding may not), the PNG is that draw cropped to the box: the same
    pixels savefig renders for it, without a second draw. Else, and for other formats,
    savefig draws it again into the box. The layout is frozen where the first draw put
    it, as savefig freezes it for its own "tight" box, so that a layout engine
    (constrained layout) does not solve it again for each format."""
    plt = pyplot()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    paths = []
    png_dpi = DPI * PNG_SCALE
    fig.dpi = png_dpi  # (as savefig sets it while it draws)
    # (a figure made under another backend, an interactive session's, gets an Agg canvas)
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    tight = fig.get_tightbbox(canvas.get_renderer())
    bbox = tight.padded(plt.rcParams["savefig.pad_inches"])
    fig.set_layout_engine("none")
    w_in, h_in = fig.get_size_inches()
    on_canvas = tight.x0 >= 0 and tight.y0 >= 0 and tight.x1 <= w_in and tight.y1 <= h_in
    for fmt in formats:
        buf = io.BytesIO()
        if fmt == "png" and on_canvas:
            _crop_png(canvas, bbox, png_dpi, buf)
        else:
            # No creation date in the metadata: same data, same bytes.
            meta = {"Date": None} if fmt == "svg" else {}
            dpi = png_dpi if fmt == "png" else DPI
            fig.savefig(buf, format=fmt, bbox_inches=bbox, metadata=meta, dpi=dpi)
        path = Path(out_dir) / f"{stem}.{fmt}"
        atomic.write_bytes(path, buf.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths


def _crop_png(canvas, bbox, dpi: float, buf) -> None:
    """Write the part of the drawn Agg `canvas` inside `bbox` (inches, clipped to the
    canvas) to `buf` as a PNG of `dpi`, as savefig writes one."""
    import matplotlib.image
    import numpy as np

    width, height = canvas.get_width_height()
    x0, x1 = max(0, math.floor(bbox.x0 * dpi)), min(width, math.ceil(bbox.x1 * dpi))
    y0, y1 = max(0, math.floor(bbox.y0 * dpi)), min(height, math.ceil(bbox.y1 * dpi))
    rgba = np.asarray(canvas.buffer_rgba())[height - y1 : height - y0, x0:x1]
    matplotlib.image.imsave(buf, rgba, format="png", dpi=dpi)


def save_drawn(make, out_dir: Path, stem: str, formats: tuple[str, ...],
               left_out: dict[str, str]) -> list[Path]:
    """Draw `make()` and `save` it; a figure that cannot be drawn (no positive value for a
    log axis, nothing to plot) is left out instead of failing the report: its files are
    removed, the reason is kept in `left_out` (keyed `stem.png`, as the page names it)
    and the page says so in its place."""
    try:
        return save(make(), out_dir, stem, formats)
    except Exception as exc:  # noqa: BLE001 - matplotlib raises many kinds; all mean "no figure"
        pyplot().close("all")
        for fmt in formats:
            (Path(out_dir) / f"{stem}.{fmt}").unlink(missing_ok=True)
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        left_out[f"{stem}.png"] = f"it could not be drawn ({reason[:160]})"
        return []


MAX_FIGURE_PROCESSES = 4
"""Most processes drawing one report's figures at once (`save_all`)."""


def save_all(figs: dict, out_dir: Path, formats: tuple[str, ...],
             left_out: dict[str, str], order: Sequence[str] = ()) -> list[Path]:
    """`save_drawn` every figure of `figs` (stem -> a function drawing it), the figures
    shared among up to one process per core: drawing is most of a report's time, and
    each figure is drawn alone. Where processes fork (POSIX), each forked child draws
    figures from the data the parent holds, writes their files atomically and hands back
    the paths and the figures it left out; elsewhere, or on one core, the parent draws
    them all. Each process takes the next figure not yet taken as soon as it is free, in
    `order` (stems; those it does not name follow in `figs` order), so naming the
    costliest first keeps every process busy to the end. Returns the paths in `figs`
    order: the bytes are the same whoever draws what."""
    import os

    stems = list(figs)
    procs = min(len(stems), os.cpu_count() or 1, MAX_FIGURE_PROCESSES)
    if procs < 2 or not hasattr(os, "fork"):
        return [p for stem in stems for p in save_drawn(figs[stem], out_dir, stem, formats,
                                                        left_out)]
    queue = [s for s in order if s in figs]
    queue += [s for s in stems if s not in queue]
    pyplot()  # the style, set once before forking
    # the figures not yet taken: one byte each (its index in `queue`) in a pipe whose
    # write end is closed before forking, so each process takes the next with one read
    # and reads the end of the file once all are taken
    r, w = os.pipe()
    os.write(w, bytes(range(len(queue))))
    os.close(w)
    pending: list[tuple[int, int]] = []
    done: dict[str, list[Path]] = {}
    try:
        for _ in range(procs - 1):
            pending.append(_fork_drawing(figs, queue, r, out_dir, formats))
        for stem in _taken(queue, r):
            done[stem] = save_drawn(figs[stem], out_dir, stem, formats, left_out)
        while pending:
            pid, fd = pending[0]
            got = _collect(pid, fd)
            pending.pop(0)
            if got is not None:
                paths, lost = got
                left_out.update(lost)
                done.update({stem: [Path(p) for p in ps] for stem, ps in paths.items()})
        for stem in queue:  # taken by a child that failed: drawn here
            if stem not in done:
                done[stem] = save_drawn(figs[stem], out_dir, stem, formats, left_out)
    finally:
        os.close(r)
        _stop(pending)  # interrupted: no child writes on after the parent has gone
    return [p for stem in stems for p in done[stem]]


def _taken(queue: list[str], fd: int):
    """The figures this process takes from the pipe `fd`, one at a time, until none is
    left."""
    import os

    while b := os.read(fd, 1):
        yield queue[b[0]]


def _fork_drawing(figs: dict, queue: list[str], fd: int, out_dir: Path,
                  formats: tuple[str, ...]) -> tuple[int, int]:
    """Fork a child that draws figures taken from the pipe `fd` (`_taken`) until none is
    left; returns (pid, read end of the pipe it reports on)."""
    import json
    import os
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: draw, report, and leave without running the parent's code
        code = 1
        try:
            os.close(r)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            lost: dict[str, str] = {}
            paths = {stem: [str(p) for p in save_drawn(figs[stem], out_dir, stem, formats,
                                                       lost)] for stem in _taken(queue, fd)}
            data = json.dumps({"paths": paths, "left_out": lost}).encode()
            while data:
                data = data[os.write(w, data):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _collect(pid: int, fd: int) -> tuple[dict, dict] | None:
    """What child `pid` drew (its pipe read to the end, then reaped); None if it failed."""
    import json
    import os

    with os.fdopen(fd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    doc = json.loads(data)
    return doc["paths"], doc["left_out"]


def _stop(children: list[tuple[int, int]]) -> None:
    import os
    import signal

    for pid, fd in children:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        try:
            os.close(fd)
        except OSError:
            pass


def title(workload: str, profile: str) -> str:
    return f"workload {workload} · profile {profile}"


def log_axis(ax, axis: str, values=None, min_ratio: float = 4.0) -> bool:
    """Log-scale `axis` ('x' or 'y') with plain-number tick labels (2, 5, 10, not 2x10^0);
    if `values` span less than `min_ratio`, keep it linear (a log scale on a narrow range
    only distorts). Returns whether the axis is logarithmic."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if values is not None:
        v = np.asarray([x for x in values if x is not None], dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if len(v) == 0 or v.max() / v.min() < min_ratio:
            return False
    getattr(ax, f"set_{axis}scale")("log")
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    a.set_minor_formatter(NullFormatter())
    return True


def axis_label(name: str, is_log: bool) -> str:
    return f"{name}, log scale)" if is_log else f"{name})"

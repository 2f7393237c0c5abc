"""`style.save_all`: figures drawn in forked processes are the files one process draws,
in the same order, with the same figures left out; a child that dies is drawn again."""

from __future__ import annotations

import os

import numpy as np
import pytest

from chunksim.reports import style

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _line(k: int):
    def make():
        plt = style.pyplot()
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot([0, 1, 2], [k, k * k, 1])
        ax.set_title(f"figure {k}")
        return fig
    return make


def _broken():
    raise ValueError("no positive value for a log axis")


def _figs(parent: int) -> dict:
    def dies_in_a_child():
        if os.getpid() != parent:
            os._exit(3)
        return _line(9)()
    return {"a": _line(1), "b": _broken, "c": _line(2), "d": dies_in_a_child,
            "e": _line(3)}


def _bytes(paths) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in paths]


@pytest.mark.parametrize("order", [(), ("e", "d", "not-a-figure", "a")])
@pytest.mark.parametrize("cores", [2, 4])
def test_forked_drawing_writes_what_one_process_writes(tmp_path, monkeypatch, cores, order):
    one, many = tmp_path / "one", tmp_path / "many"
    one.mkdir()
    many.mkdir()
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    lost_one: dict[str, str] = {}
    seq = style.save_all(_figs(os.getpid()), one, ("png", "svg"), lost_one)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    lost_many: dict[str, str] = {}
    par = style.save_all(_figs(os.getpid()), many, ("png", "svg"), lost_many, order=order)
    assert [p.name for p in seq] == [p.name for p in par] == [
        f"{s}.{f}" for s in "acde" for f in ("png", "svg")]
    assert _bytes(seq) == _bytes(par)
    assert lost_one == lost_many and list(lost_many) == ["b.png"]
    assert "no positive value" in lost_many["b.png"]
    assert sorted(x.name for x in many.iterdir()) == sorted(p.name for p in par)


def test_each_figure_is_taken_once_in_queue_order():
    r, w = os.pipe()
    os.write(w, bytes([2, 0, 1]))
    os.close(w)
    try:
        assert list(style._taken(["a", "b", "c"], r)) == ["c", "a", "b"]
    finally:
        os.close(r)


def test_a_layout_engine_lays_a_figure_out_once_for_every_format(tmp_path, monkeypatch):
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    calls = []
    execute = ConstrainedLayoutEngine.execute

    def counted(self, fig):
        calls.append(fig)
        return execute(self, fig)

    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", counted)
    plt = style.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(4, 2), layout="constrained")
    for ax in axes:
        ax.plot([1, 2, 3], [3, 1, 2])
        ax.set_ylabel("a long label that needs room")
    paths = style.save(fig, tmp_path, "f", ("png", "svg"))
    assert [p.name for p in paths] == ["f.png", "f.svg"] and len(calls) == 1
    # and laid out as a figure saved with savefig's own "tight" box is
    from matplotlib.image import imread

    fig2, axes2 = plt.subplots(1, 2, figsize=(4, 2), layout="constrained")
    for ax in axes2:
        ax.plot([1, 2, 3], [3, 1, 2])
        ax.set_ylabel("a long label that needs room")
    fig2.savefig(tmp_path / "g.png", bbox_inches="tight", dpi=style.DPI * style.PNG_SCALE)
    plt.close(fig2)
    a, b = imread(paths[0]), imread(tmp_path / "g.png")
    assert abs(a.shape[0] - b.shape[0]) <= 2 and abs(a.shape[1] - b.shape[1]) <= 2


def _tight_png(plt, draw, path):
    """`draw`'s figure saved by savefig's own "tight" box, as the PNG reference."""
    fig = draw(plt)
    fig.savefig(path, bbox_inches="tight", dpi=style.DPI * style.PNG_SCALE)
    plt.close(fig)
    from matplotlib.image import imread

    return imread(path)


def test_a_png_on_its_canvas_is_drawn_once_and_matches_savefigs_tight_box(tmp_path,
                                                                           monkeypatch):
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    def draw(plt):
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot([1, 2, 3], [3, 1, 2], color="tab:red", lw=3)
        ax.set_title("a title")
        ax.set_xlabel("x")
        fig.tight_layout()  # (else the x label hangs below the canvas)
        return fig

    plt = style.pyplot()
    ref = _tight_png(plt, draw, tmp_path / "ref.png")
    draws = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: (draws.append(1), real(self, r))[1])
    (path,) = style.save(draw(plt), tmp_path, "f", ("png",))
    assert len(draws) == 1  # one draw, cropped; savefig's path draws twice
    got = imread(path)
    assert abs(got.shape[0] - ref.shape[0]) <= 2 and abs(got.shape[1] - ref.shape[1]) <= 2
    h, w = min(got.shape[0], ref.shape[0]), min(got.shape[1], ref.shape[1])
    # the same picture: red line pixels in both, in the same places to within a pixel
    red_got = (got[:h, :w, 0] > 0.8) & (got[:h, :w, 1] < 0.3)
    red_ref = (ref[:h, :w, 0] > 0.8) & (ref[:h, :w, 1] < 0.3)
    assert red_ref.sum() > 100
    assert abs(int(red_got.sum()) - int(red_ref.sum())) < 0.05 * red_ref.sum()
    assert float(np.abs(got[:h, :w, :3] - ref[:h, :w, :3]).mean()) < 0.03


def test_a_figure_drawn_past_its_canvas_is_saved_whole(tmp_path):
    from matplotlib.image import imread

    def draw(plt):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot([1, 2], [1, 2])
        fig.suptitle("a suptitle much wider than this small figure is, on both sides " * 2)
        return fig

    plt = style.pyplot()
    ref = _tight_png(plt, draw, tmp_path / "ref.png")
    canvas_w = 3 * style.DPI * style.PNG_SCALE
    (path, svg) = style.save(draw(plt), tmp_path, "f", ("png", "svg"))
    got = imread(path)
    assert got.shape[1] > canvas_w * 1.5  # the title is not cut at the canvas
    assert abs(got.shape[1] - ref.shape[1]) <= 2 and abs(got.shape[0] - ref.shape[0]) <= 2
    assert svg.read_text().startswith("<?xml")


def test_a_figure_without_an_agg_canvas_is_saved_too(tmp_path):
    """A figure made outside pyplot (or under an interactive backend) has no Agg canvas
    to crop: save gives it one."""
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    fig = Figure(figsize=(3, 2))
    fig.subplots().plot([1, 2, 3], [3, 1, 2])
    fig.tight_layout()
    png, svg = style.save(fig, tmp_path, "f", ("png", "svg"))
    assert imread(png).shape[1] > 300 and svg.read_text().startswith("<?xml")

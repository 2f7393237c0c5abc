"""`style.save_all`: figures drawn in forked processes are the files one process draws,
in the same order, with the same figures left out; a child that dies is drawn again."""

from __future__ import annotations

import os

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


@pytest.mark.parametrize("cores", [2, 4])
def test_forked_drawing_writes_what_one_process_writes(tmp_path, monkeypatch, cores):
    one, many = tmp_path / "one", tmp_path / "many"
    one.mkdir()
    many.mkdir()
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    lost_one: dict[str, str] = {}
    seq = style.save_all(_figs(os.getpid()), one, ("png", "svg"), lost_one)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    lost_many: dict[str, str] = {}
    par = style.save_all(_figs(os.getpid()), many, ("png", "svg"), lost_many)
    assert [p.name for p in seq] == [p.name for p in par] == [
        f"{s}.{f}" for s in "acde" for f in ("png", "svg")]
    assert _bytes(seq) == _bytes(par)
    assert lost_one == lost_many and list(lost_many) == ["b.png"]
    assert "no positive value" in lost_many["b.png"]
    assert sorted(x.name for x in many.iterdir()) == sorted(p.name for p in par)

"""Report building blocks: colours, heatmaps with pruned cells, documents, file writing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.reports import style
from chunksim.reports.capacity_plot import metric_name
from chunksim.reports.document import Document
from chunksim.reports.heatmap import heatmap_figure, pick_kv
from chunksim.reports.timeline import longest_request
from chunksim.sweep.configs import Config, PolicySpec


def test_colours_are_fixed_per_configuration_and_distinct_per_family():
    b512 = Config(PolicySpec("budget"), 512)
    assert style.color(b512) == style.color(Config(PolicySpec("budget"), 512))
    whole, chunk = Config(PolicySpec("whole")), Config(PolicySpec("chunk"), 512)
    assert len({style.color(whole), style.color(chunk), style.color(b512)}) == 3
    # bigger chunk = darker shade of the same family
    assert sum(style.color(Config(PolicySpec("budget"), 4096))[:3]) < sum(style.color(b512)[:3])
    assert style.color(Config(PolicySpec("whole", "mixed"))) != style.color(whole)


@pytest.mark.slow
def test_heatmap_handles_pruned_cells(linear_profile, tmp_path):
    table = linear_profile.table
    pruned = table[~((table["decode_count"] == 256) & (table["kv_len"] == 16384))]
    assert pick_kv(pruned) == [1, 1024, 16384]
    fig = heatmap_figure(pruned, "synthetic")
    paths = style.save(fig, tmp_path, "heat", ("png",))
    assert paths[0].stat().st_size > 10_000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=300))
def test_nearest_cell_is_the_closest_grid_value_in_log_space(values):
    """Each value maps to the grid value nearest it in log1p space, the lowest index on
    a tie, as a search over the whole grid finds it."""
    from chunksim.reports.heatmap import _nearest

    grid = [0, 1, 8, 32, 64, 128, 256, 1024, 2048, 4096]
    got = _nearest(grid, values)
    g = np.log1p(np.array(grid, dtype=float))
    for v, i in zip(values, got.tolist(), strict=True):
        d = np.abs(np.log1p(float(v)) - g)
        assert i == int(np.flatnonzero(d == d.min())[0])


@pytest.mark.slow
def test_heatmap_rings_each_used_cell_once_per_panel(linear_profile):
    """Every cell the steps used is ringed (white under black) and every extrapolated one
    crossed, in each kv_len panel, one marker per cell."""
    import pandas as pd

    steps = pd.DataFrame({"prefill_tokens": [0, 0, 256, 300, 16384, 0],
                          "decodes": [1, 1, 16, 16, 0, 64],
                          "extrapolated": [False, False, False, False, True, False]})
    fig = heatmap_figure(linear_profile.table, "synthetic", steps=[steps.iloc[:3],
                                                                   steps.iloc[3:]])
    main = linear_profile.table[linear_profile.table["prior_len"] == 0]
    chunks = sorted(main["chunk_len"].unique().tolist())
    decodes = sorted(main["decode_count"].unique().tolist())

    def at(c: int, d: int) -> tuple[float, float]:  # (x, y) = (chunk index, decode index)
        return float(chunks.index(c)), float(decodes.index(d))

    for ax in fig.axes[:-1]:  # (the last is the colour bar)
        marks = [c.get_offsets() for c in ax.collections]
        assert [len(m) for m in marks] == [3, 3, 1]  # rings white, black; crosses
        assert np.array_equal(marks[0], marks[1])
        # 300 prefill tokens ring the 256 cell, as 256 does: one ring
        assert set(map(tuple, marks[0].tolist())) == {at(0, 1), at(256, 16), at(0, 64)}
        assert set(map(tuple, marks[2].tolist())) == {at(16384, 0)}
    style.pyplot().close(fig)


def test_saved_figures_are_byte_identical(tmp_path):
    plt = style.pyplot()
    for name in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [1, 4, 9])
        style.save(fig, tmp_path, name, ("png", "svg"))
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_log_axis_stays_linear_on_a_narrow_range():
    plt = style.pyplot()
    fig, ax = plt.subplots()
    assert not style.log_axis(ax, "x", [2.0, 2.1])
    assert style.log_axis(ax, "y", [1.0, 100.0])
    assert ax.get_yscale() == "log" and ax.get_xscale() == "linear"
    plt.close(fig)


def test_document_renders_markdown_and_self_contained_html(tmp_path):
    plt = style.pyplot()
    fig, ax = plt.subplots()
    style.save(fig, tmp_path, "f", ("png",))
    doc = Document("T")
    doc.para("a `code` and **bold** <tag>")
    doc.table(["x", "y"], [["1", "a|b"]])
    doc.figure("f.png", "cap")
    doc.definitions([("TTFT", "def")])
    md, page = doc.to_markdown(), doc.to_html(tmp_path)
    assert "| 1 | a\\|b |" in md and "![cap](f.png)" in md
    assert "<code>code</code>" in page and "<b>bold</b>" in page and "&lt;tag&gt;" in page
    assert "data:image/png;base64," in page


def test_longest_request_takes_the_earliest_on_ties():
    import pandas as pd

    assert longest_request(pd.DataFrame({"prompt_tokens": [5, 9, 9, 1]})) == 1


@pytest.mark.parametrize("key,name", [("p99_itl_ms", "P99 ITL"),
                                      ("median_sched_delay_ms", "median sched delay"),
                                      ("mean_ttft_ms", "mean TTFT")])
def test_metric_names(key, name):
    assert metric_name(key) == name


def test_cdf_curve_never_claims_beyond_the_sample():
    from chunksim.reports.cdf import _curve

    x, q = _curve(np.arange(1, 11, dtype=float))
    assert q.max() <= 0.95 and q.min() >= 0.05 and np.all(np.diff(x) >= 0)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(40, 120), st.integers(2, 12), st.integers(1, 5))
def test_console_tables_keep_every_cell_whole_at_any_width(width, ncols, nrows):
    """A table wider than the terminal is split into column groups that each fit, every
    group repeating the row's name: no cell reads `4…`, and every value is printed."""
    from rich.console import Console
    from rich.table import Table

    from chunksim.reports.console import print_table

    t = Table(title="t", show_edge=False, pad_edge=False, caption="the caption")
    t.add_column("configuration", no_wrap=True)
    for j in range(ncols):
        t.add_column(f"P{j} metric ms", justify="right")
    rows = [[f"budget {512 * (i + 1)}"] + [f"{1234.5 * (i + 1) * (j + 1):.1f}"
                                           for j in range(ncols)] for i in range(nrows)]
    for r in rows:
        t.add_row(*r)
    import io

    con = Console(width=width, file=io.StringIO(), emoji=False)
    print_table(con, t)
    text = con.file.getvalue()
    assert "…" not in text
    assert max(len(ln) for ln in text.splitlines()) <= width
    for r in rows:
        for cell in r:
            assert cell in text
    assert text.count("the caption") <= 1

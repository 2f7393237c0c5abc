"""Report building blocks: colours, heatmaps with pruned cells, documents, file writing."""

from __future__ import annotations

import numpy as np
import pytest

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

"""What each report figure marks, read back from the matplotlib artists: SLO lines where
the SLOs are, the recommended bar starred, the long prompt's arrival and first token on
the timeline, one trade-off point per configuration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from chunksim.reports.capacity_plot import capacity_bars_figure, knee_figure, panel_keys
from chunksim.reports.timeline import timeline_figure
from chunksim.reports.tradeoff import Y_KEYS, tradeoff_figure
from chunksim.sweep.capacity import CapacityEntry, Probe
from chunksim.sweep.configs import Config, PolicySpec

BUDGET = Config(PolicySpec("budget"), 512)
WHOLE = Config(PolicySpec("whole"))


def _entry(cfg: Config, rates: list[float], itl: list[float], ttft: list[float],
           slos: dict) -> CapacityEntry:
    probes = []
    for r, i, t in zip(rates, itl, ttft, strict=True):
        s = {"p99_itl_ms": i, "p99_ttft_ms": t, "median_sched_delay_ms": 10.0}
        probes.append(Probe(r, all(s[k] <= b for k, b in slos.items()), s, [s], [True]))
    met = [p.rate for p in probes if p.met]
    return CapacityEntry(cfg, max(met) if met else 0.0, False, probes)


def _close(fig) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_knee_draws_each_slo_bound_on_its_own_panel_and_stars_the_capacity():
    slos = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0, "median_sched_delay_ms": 2000.0}
    e = _entry(BUDGET, [1, 2, 4], [20, 60, 300], [100, 800, 5000], slos)
    fig = knee_figure([e], slos, "t")
    keys = panel_keys(slos)
    assert keys[:2] == ["p99_itl_ms", "p99_ttft_ms"] and len(fig.axes) == len(keys)
    for ax, key in zip(fig.axes, keys, strict=True):
        horizontals = [ln.get_ydata()[0] for ln in ax.get_lines()
                       if len(set(ln.get_ydata())) == 1 and ln.get_linestyle() == "--"]
        assert horizontals == [slos[key]], key
        assert f"SLO ≤ {slos[key]:g} ms" in ax.get_title()
    # the star sits at the capacity (2 req/s: the last rate meeting both bounds)
    itl_ax = fig.axes[0]
    stars = [c for c in itl_ax.collections if c.get_offsets().shape[0] == 1
             and c.get_sizes()[0] == 120]
    assert len(stars) == 1 and tuple(stars[0].get_offsets()[0]) == (2.0, 60.0)
    # filled = met, hollow = missed: the 4 req/s probe is drawn hollow
    points = [(tuple(xy), tuple(fc[:3])) for c in itl_ax.collections
              if c.get_sizes()[0] == 22
              for xy, fc in zip(c.get_offsets(), c.get_facecolor(), strict=True)]
    assert len(points) == 3
    assert [xy for xy, fc in points if fc == (1.0, 1.0, 1.0)] == [(4.0, 300.0)]
    _close(fig)


def test_capacity_bars_star_only_the_recommendation_and_mark_capped_rates():
    slos = {"p99_itl_ms": 100.0}
    a = _entry(BUDGET, [1, 2], [10, 20], [1, 1], slos)
    b = _entry(WHOLE, [1, 2], [10, 500], [1, 1], slos)
    capped = CapacityEntry(Config(PolicySpec("sjf"), 512), 8.0, True, a.probes)
    fig = capacity_bars_figure([a, b, capped], a, "t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["2 ★", "1", "≥8"]
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [2.0, 1.0, 8.0]
    _close(fig)


def _run_records(long_first_token_s: float):
    requests = pd.DataFrame({"prompt_tokens": [100, 4000, 4000, 50],
                             "arrival_s": [0.0, 1.0, 1.5, 2.0],
                             "first_token_s": [0.1, long_first_token_s, 3.0, 2.1]})
    starts = np.arange(0.0, 4.0, 0.05)
    steps = pd.DataFrame({"start_s": starts, "duration_s": np.full(len(starts), 0.05),
                          "decodes": np.ones(len(starts), int),
                          "prefill_tokens": np.zeros(len(starts), int)})
    return requests, steps


def test_timeline_marks_the_longest_prompts_arrival_and_each_configs_first_token():
    # the longest prompt is the earliest of the two 4000-token ones (arrives at 1.0 s)
    r1, s1 = _run_records(1.8)
    r2, s2 = _run_records(2.6)
    fig = timeline_figure([BUDGET, WHOLE], [r1, r2], [s1, s2], "t")
    for col, first in ((0, 0.8), (1, 1.6)):
        for row in (0, 1):
            ax = fig.axes[row * 2 + col]
            xs = sorted(round(ln.get_xdata()[0], 9) for ln in ax.get_lines())
            assert xs == [0.0, first]
    assert "long prompt TTFT 0.80 s" in fig.axes[0].get_title()
    assert "long prompt TTFT 1.60 s" in fig.axes[1].get_title()
    _close(fig)


def test_timeline_says_rejected_when_the_long_prompt_never_got_a_token():
    r1, s1 = _run_records(float("nan"))
    fig = timeline_figure([BUDGET], [r1], [s1], "t")
    assert "long prompt TTFT rejected" in fig.axes[0].get_title()
    assert [ln.get_xdata()[0] for ln in fig.axes[0].get_lines()] == [0.0]
    _close(fig)


def test_tradeoff_plots_one_point_per_configuration_at_its_summary_values():
    sums = [{"p99_itl_ms": 40.0, "p99_ttft_ms": 900.0, "max_decode_stall_ms": 50.0},
            {"p99_itl_ms": 400.0, "p99_ttft_ms": 300.0, "max_decode_stall_ms": 450.0}]
    fig = tradeoff_figure([BUDGET, WHOLE], sums, "t")
    panels = [ax for ax in fig.axes if ax.collections]
    assert len(panels) == len(Y_KEYS)
    for ax, y_key in zip(panels, Y_KEYS, strict=True):
        points = sorted(tuple(float(v) for v in c.get_offsets()[0]) for c in ax.collections
                        if c.get_sizes()[0] == 55)
        assert points == sorted((s["p99_ttft_ms"], s[y_key]) for s in sums), y_key
    _close(fig)


def _fresh_python(*lines: str) -> list[str]:
    """What `lines` print in a fresh interpreter that imports chunksim's report style."""
    import subprocess
    import sys

    code = "\n".join(("import sys", "from chunksim.reports import style", *lines))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.split()


def test_matplotlib_loaded_in_the_background_is_the_styled_agg_pyplot():
    """`load_in_background` starts one import thread however often it is called, and
    `pyplot` waits for it, then styles what it loaded (a fresh interpreter: nothing of
    matplotlib loaded before)."""
    assert _fresh_python(
        "assert 'matplotlib' not in sys.modules",
        "style.load_in_background()",
        "style.load_in_background()",
        "assert len(style._loading) == 1",
        "plt = style.pyplot()",
        "assert not style._loading[0].is_alive()",
        "print(plt.get_backend().lower(), plt.rcParams['svg.hashsalt'])",
    ) == ["agg", "chunksim"]


def test_the_background_thread_imports_what_a_report_also_needs():
    """`load_in_background(also=...)` imports those modules after matplotlib on the same
    thread, so a report finds them loaded once `pyplot` has waited for it (a fresh
    interpreter: pandas not loaded before)."""
    assert _fresh_python(
        "assert 'pandas' not in sys.modules and 'matplotlib' not in sys.modules",
        "style.load_in_background(also=('pandas',))",
        "style.pyplot()",
        "print('pandas' in sys.modules)",
    ) == ["True"]

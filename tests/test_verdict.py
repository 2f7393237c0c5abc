"""The verdict alone: seeds folded, clear and unclear winners, infeasible loads, the box."""

from __future__ import annotations

import math

import pytest

from chunksim.reports.document import Document
from chunksim.reports.tables import class_rows, ranged_cell, seed_rows
from chunksim.reports.verdict_text import verdict_lines
from chunksim.sweep.configs import Config, PolicySpec
from chunksim.sweep.seeds import fold, median_value, seed_list
from chunksim.sweep.verdict import decide, long_class, swamped

SLOS = {"p99_itl_ms": 100.0, "p99_ttft_ms": 2000.0}


def _s(ttft, itl, stall, long_ttft=None, completed=10):
    s = {"completed": completed, "p99_ttft_ms": ttft, "p99_itl_ms": itl,
         "max_decode_stall_ms": stall}
    if long_ttft is not None:
        s["by_class"] = {
            "chat": {"completed": completed - 1, "total_input_tokens": 2560,
                     "p99_ttft_ms": ttft},
            "long": {"completed": 1, "total_input_tokens": 8192, "p99_ttft_ms": long_ttft}}
    return s


def _cfg(family, chunk=None):
    return Config(PolicySpec(family), chunk)


def test_seed_list_defaults_to_three_from_the_seed_flag():
    assert seed_list(None, 3) == [3, 4, 5]
    assert seed_list("2,0", 9) == [0, 2]
    with pytest.raises(ValueError, match="--seeds"):
        seed_list("a", 0)


def test_fold_takes_median_min_max_recursively_and_keeps_counts_integral():
    st = fold([_s(10.0, 1.0, 5.0, 100.0, completed=9), _s(30.0, 2.0, 6.0, 300.0),
               _s(20.0, 9.0, 7.0, 200.0, completed=11)])
    assert (st.median["p99_ttft_ms"], st.lo["p99_ttft_ms"], st.hi["p99_ttft_ms"]) == (20, 10, 30)
    assert st.median["completed"] == 10 and isinstance(st.median["completed"], int)
    assert st.median["by_class"]["long"]["p99_ttft_ms"] == 200.0
    assert st.hi["by_class"]["long"]["p99_ttft_ms"] == 300.0
    assert median_value([{"completed": 0, "x": 1.0}, {"completed": 1, "x": 2.0},
                         {"completed": 1, "x": math.nan}], "x") == math.inf


def test_clear_winner_on_the_tradeoff_when_the_slos_tie():
    configs = [_cfg("whole"), _cfg("budget", 512), _cfg("budget", 2048)]
    runs = [[_s(100, 6, 500 + k, 490 + k, 10) for k in range(3)],     # stalls everyone
            [_s(90, 5, 50 + k, 560 + k, 10) for k in range(3)],      # balanced
            [_s(95, 5, 200 + k, 520 + k, 10) for k in range(3)]]
    v = decide(configs, runs, SLOS, False, [0, 1, 2])
    assert v.basis == "headroom" and v.decided_by == "tradeoff" and len(v.tied) == 3
    assert v.recommended.label == "budget 512" and v.runner_up.label == "budget 2048"
    assert v.clear
    text = "\n".join(verdict_lines(v, capacity_searched=False))
    assert "**Recommended: budget 512**" in text and "**Runner-up: budget 2048**" in text
    assert "the long request's TTFT" in text and "worst stall" in text
    assert "No clear winner" not in text and "defaults; set yours with --slo" in text
    assert "beats budget 2048 on each of the 3 seeds" in text


def test_overlapping_seed_ranges_say_no_clear_winner_and_what_would_separate():
    configs = [_cfg("chunk", 512), _cfg("budget", 512)]
    runs = [[_s(90, 5, s, t) for s, t in ((50, 560), (58, 600), (52, 580))],
            [_s(90, 5, s, t) for s, t in ((51, 570), (55, 590), (57, 575))]]
    v = decide(configs, runs, SLOS, True, [0, 1, 2])
    assert not v.clear
    text = "\n".join(verdict_lines(v, capacity_searched=False))
    assert "**No clear winner between" in text and "more load" in text
    assert "defaults" not in text


def test_capacity_ranks_first_and_separated_capacities_are_clear():
    configs = [_cfg("whole"), _cfg("budget", 1024)]
    runs = [[_s(100, 6, 500)] * 3, [_s(100, 6, 80)] * 3]
    v = decide(configs, runs, SLOS, True, [0, 1, 2],
               capacities=[(7.0, (6.5, 7.2)), (11.0, (10.5, 11.6))])
    assert v.basis == "capacity" and v.decided_by == "score" and v.clear
    assert v.recommended.label == "budget 1024"
    text = "\n".join(verdict_lines(v, capacity_searched=True))
    assert "highest capacity under the SLOs, 11 req/s [10.5–11.6]" in text
    assert "capacity -36 % vs budget 1024" in text


def test_nothing_feasible_says_so_and_names_the_closest():
    configs = [_cfg("whole"), _cfg("chunk", 256)]
    runs = [[_s(5000, 6, 500)] * 3, [_s(2500, 6, 50)] * 3]
    v = decide(configs, runs, SLOS, True, [0, 1, 2])
    assert v.recommended is None and not v.ranked
    text = "\n".join(verdict_lines(v, capacity_searched=False))
    assert "No configuration meets the SLOs" in text and "**chunk 256**" in text


def test_swamped_marks_a_metric_whose_spread_exceeds_its_differences():
    a = fold([_s(50, 5, 40), _s(400, 5, 41)])
    b = fold([_s(60, 5, 90), _s(380, 5, 92)])
    c = fold([_s(70, 5, 200), _s(390, 5, 210)])
    assert swamped([a, b, c], "p99_ttft_ms") and not swamped([a, b, c], "max_decode_stall_ms")


def test_long_class_is_the_one_with_the_longest_prompts():
    assert long_class(_s(1, 1, 1, 5)) == "long" and long_class(_s(1, 1, 1)) is None


def test_tables_show_ranges_and_a_row_group_per_class():
    assert ranged_cell(5.0, 4.0, 7.0, "{:.1f}") == "5.0 [4.0–7.0]"
    assert ranged_cell(5.0, 5.0, 5.0, "{:.1f}") == "5.0"
    stats = [fold([_s(10, 1, 5, 100), _s(20, 1, 5, 300)]), fold([_s(10, 1, 5, 50)] * 2)]
    headers, rows = seed_rows(["a", "b"], stats, marked=["p99_ttft_ms"])
    assert "P99 TTFT ms †" in headers and rows[0][2] == "15 [10–20]"
    _, crows = class_rows(["a", "b"], stats)
    assert crows[0].startswith("class chat") and crows[3].startswith("class long")
    assert crows[4][0] == "a" and "200 [100–300]" in crows[4]
    doc = Document("T")
    doc.table(["configuration", *headers[1:3]], [crows[0], ["a", "1", "2"]])
    doc.verdict("Verdict", ["**Recommended: a**"])
    page = doc.to_html(".")
    assert "<tr class='group'><th colspan='3'>class chat" in page
    assert "<section class='verdict' id='verdict'>" in page and "<b>Recommended: a</b>" in page
    assert "<div class='scroll'><table>" in page
    assert "> **Recommended: a**" in doc.to_markdown()


# --- wording generated from the data: no sentence contradicts its table ---------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LABELS = [_cfg("whole"), _cfg("chunk", 256), _cfg("chunk", 1024), _cfg("budget", 512),
          _cfg("budget", 2048), _cfg("budget", 8192)]


@st.composite
def tables(draw):
    """A random table: 2-5 configurations x 1-3 seeds of summaries (some completing
    nothing, some rejecting), with or without a long class, with or without capacities."""
    n = draw(st.integers(2, 5))
    seeds = draw(st.integers(1, 3))
    classes = draw(st.booleans())
    value = st.floats(1, 4000, allow_nan=False).map(lambda x: round(x, 1))
    runs = []
    for _ in range(n):
        rs = []
        for _ in range(seeds):
            completed = draw(st.sampled_from([0, 10, 10, 10]))
            s = _s(draw(value), draw(st.floats(1, 150).map(lambda x: round(x, 1))),
                   draw(value), draw(value) if classes else None, completed)
            s["rejected"] = draw(st.sampled_from([0, 0, 0, 2, 10]))
            s["request_throughput"] = draw(st.floats(0.1, 50))
            rs.append(s)
        runs.append(rs)
    caps = None
    if draw(st.booleans()):
        caps = []
        for _ in range(n):
            c = draw(st.sampled_from([0.0, 2.0, 4.0, 4.5, 8.0]))
            caps.append((c, (c * 0.9, c * 1.1)))
    return (LABELS[:n], runs, list(range(seeds)), caps,
            draw(st.sampled_from([0.0, 0.0, 50.0])))


def _median(runs, path) -> float:
    import numpy as np

    vals = []
    for s in runs:
        v = s
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            vals.append(float(v))
    return float(np.median(vals)) if vals else math.inf


def _claims(line: str, labels: list[str], metrics: dict[str, tuple]):
    """(configuration, metric label, clause) for each `<label> … best on <metric>` in
    `line`: the configuration is the last label named before the claim."""
    import re

    by_len = sorted(labels, key=len, reverse=True)
    names = re.compile("|".join(re.escape(x) for x in by_len))
    out = []
    for m in re.finditer(r"best on ", line):
        before = [x for x in names.finditer(line, 0, m.start())]
        clause = re.split(r"; |\. | but ", line[m.start():])[0]
        for label in metrics:
            if f"on {label}" in clause and before:
                out.append((before[-1].group(0), label, clause))
    return out


@settings(max_examples=200, deadline=None, derandomize=True)
@given(tables())
def test_no_sentence_calls_a_configuration_best_where_another_beats_it(table):
    configs, runs, seeds, caps, max_reject = table
    v = decide(configs, runs, SLOS, True, seeds, caps, max_reject)
    lines = verdict_lines(v, capacity_searched=caps is not None)
    by_label = {c.label: rs for c, rs in zip(configs, runs, strict=True)}
    metrics = {m.label: m.path for m in v.metrics}
    for line in lines:
        for label, metric, clause in _claims(line, list(by_label), metrics):
            if "among" in clause:
                continue
            mine = _median(by_label[label], metrics[metric])
            others = [_median(rs, metrics[metric]) for x, rs in by_label.items() if x != label]
            assert all(mine <= o for o in others), (line, label, metric)
    text = "\n".join(lines)
    rejecting = {c.label for c in v.candidates
                 if any(100 * s["rejected"] / (s["rejected"] + s["completed"]) > max_reject
                        for s in c.runs if s["rejected"] + s["completed"])}
    if v.recommended is None:
        # every configuration fails: said plainly, the closest never one that rejects
        if rejecting == set(by_label):
            assert "rejects more than --max-reject-pct" in text and "Closest" not in text
        for label in rejecting:
            assert f"Closest: **{label}**" not in text
        assert "× its tightest bound" not in text


def test_an_extreme_best_on_both_metrics_is_named_once_with_what_it_costs():
    """The README's 4-GPU case: a lower-capacity split best on both trade-off metrics."""
    configs = [_cfg("budget", 512), _cfg("budget", 2048), _cfg("budget", 8192)]
    runs = [[_s(75, 44, 202, 237)], [_s(170, 11, 11.8, 260)], [_s(150, 7, 7.2, 215)]]
    v = decide(configs, runs, SLOS, True, [0],
               capacities=[(362.0, (362.0, 362.0)), (298.0, (298.0, 298.0)),
                           (131.0, (131.0, 131.0))])
    text = "\n".join(verdict_lines(v, capacity_searched=True))
    extremes = next(x for x in text.splitlines() if x.startswith("Extremes"))
    assert extremes.count("budget 8192 is best") == 1
    assert "best on worst stall (7.2 ms) and on the long request's TTFT (215 ms)" in extremes
    assert "but capacity -64 % vs budget 512" in extremes
    assert "but best on" not in text


def test_best_among_the_group_says_among_when_an_excluded_configuration_beats_it():
    """Two meet the SLOs; a third misses them but has the lowest stall: the one called best
    on stall is best among those meeting the SLOs, and says so."""
    configs = [_cfg("whole"), _cfg("budget", 512), _cfg("budget", 2048)]
    runs = [[_s(5000, 6, 5)], [_s(90, 5, 50)], [_s(95, 5, 200)]]
    v = decide(configs, runs, SLOS, True, [0], capacities=[(0.0, (0.0, 0.0)),
                                                             (4.0, (4.0, 4.0)),
                                                             (8.0, (8.0, 8.0))])
    text = "\n".join(verdict_lines(v, capacity_searched=True))
    assert ("budget 512: best on worst stall and on P99 TTFT among the configurations "
            "meeting the SLOs") in text


def test_every_configuration_rejecting_says_so_without_a_closest():
    configs = [_cfg("whole"), _cfg("budget", 512)]
    runs = [[{**_s(1, 1, 1, completed=1), "rejected": 39}],
            [{**_s(1, 1, 1, completed=0), "rejected": 40}]]
    v = decide(configs, runs, SLOS, True, [0])
    text = "\n".join(verdict_lines(v, capacity_searched=False))
    assert "every configuration rejects more than --max-reject-pct 0 % of its requests" in text
    assert "40 of 40 requests rejected (100 %)" in text
    assert "Closest" not in text and "tightest bound" not in text

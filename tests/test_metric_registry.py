"""The registry is the summary's schema (`sim.metrics.metric_registry`): every summary key has one
declaration and every declaration is in a run's summary, in summary.json's order; each
metric has one computation; the console, the report tables, the run board, capacity's
rows, validation and the definitions take their keys, columns and wording from it; `--slo`
and `--goodput` share one spelling and one parser."""

from __future__ import annotations

import json

import numpy as np
import pytest
from factories import workload
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.speculative import SpecConfig
from chunksim.reports.console import (
    class_table,
    comparison_table,
    print_summary,
    run_lines,
    summary_table,
)
from chunksim.reports.definitions import DEFINITIONS
from chunksim.reports.tables import seed_rows
from chunksim.sim.engine.engine import EngineConfig
from chunksim.sim.metrics.metric_registry import (
    ENGINE_METRICS,
    FACTS,
    FAMILIES,
    METRICS,
    PERCENTILES,
    SUMMARY,
    VIEWS,
    Family,
    ms_keys,
    parse_bounds,
    shown,
    summary_keys,
)
from chunksim.sim.metrics.metrics import COMPUTE, max_concurrent, parse_slos
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.seeds import fold
from chunksim.sweep.slos import parse_capacity_slos
from chunksim.sweep.verdict import tradeoff_metrics


def _summary(linear_profile) -> dict:
    spec = SpecConfig(speculative_method="ngram", num_speculative_tokens=2,
                      spec_acceptance_rate=0.5)
    cfg = RunConfig(chunk=256, kv_blocks=400, slos_s={"ttft": 1.0},
                    engine=EngineConfig(speculative=spec))
    w = workload([(0.01 * i, 100 + 37 * i, 5 + i) for i in range(12)])
    return simulate(w, linear_profile, cfg)[1]


def test_the_summary_opens_with_the_declared_metrics_in_order(linear_profile):
    s = _summary(linear_profile)
    keys = summary_keys()
    assert list(s)[:len(keys)] == list(keys)
    for f in FAMILIES:
        for stat in ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES)):
            assert isinstance(s[f.key(stat)], float), f.key(stat)
    # what follows the metrics is a fact of the run, or a metric the engine reports
    rest = list(s)[len(keys):]
    assert [k for k in rest if k not in FACTS and k not in METRICS] == []
    assert {m.key for m in ENGINE_METRICS} <= set(s)


def test_every_metric_has_one_declaration_and_one_computation():
    keys = summary_keys()
    assert len(keys) == len(set(keys))
    assert not set(keys) & set(FACTS)
    computed = [e.key for e in SUMMARY if not isinstance(e, Family)]
    assert set(COMPUTE) == set(computed)  # a family's statistics are computed together
    for name, view in VIEWS.items():
        assert set(view) <= set(METRICS), name


_RUNS = (
    ["--num-requests", "30", "--speculative-method", "ngram", "--num-speculative-tokens",
     "2", "--spec-acceptance-rate", "0.6"],
    ["--num-requests", "30", "--kv-offload-gib", "1"],
    ["--num-requests", "30", "--replicas", "2"],
    ["--num-requests", "30", "--pd", "1:1"],
)


@pytest.fixture(scope="module")
def summaries(tmp_path_factory) -> list[dict]:
    trace = tmp_path_factory.mktemp("classes") / "cls.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens,cls\n" + "".join(
        f"{0.05 * i},{200 + 97 * (i % 7)},{5 + i % 9},{'b' if i % 3 == 0 else 'a'}\n"
        for i in range(60)))
    runs = [["--trace", str(trace), "--trace-format", "generic", "--time-unit", "s",
             "--class-column", "cls", "--goodput", "ttft=500"], *_RUNS]
    out = []
    for args in runs:
        r = CliRunner().invoke(app, ["run", *args, "--json"])
        assert r.exit_code == 0, (args, r.output[-500:])
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


def test_every_summary_key_is_declared_and_every_declaration_is_written(summaries):
    seen: set[str] = set()
    for s in summaries:
        assert list(s)[:len(summary_keys())] == list(summary_keys())
        seen |= set(s)
        for section in (s.get("by_class") or {}).values():
            run_wide = {m.key for m in METRICS.values() if m.run_wide}
            assert list(section) == [k for k in summary_keys() if k not in run_wide]
    declared = set(METRICS) | set(FACTS)
    assert sorted(seen - declared) == []
    assert sorted(declared - seen) == []


def test_tables_take_their_columns_from_the_declarations(linear_profile):
    s = _summary(linear_profile)
    # the report's table over seeds: a column per declaration, each cell in its format
    headers, (row,) = seed_rows(["a"], [fold([s, s])])
    assert headers[1:] == [m.header for m in shown("seeds")]
    assert row[1:] == [m.fmt.format(s[m.key]) for m in shown("seeds")]
    table = comparison_table(["a"], [s])
    assert [c.header for c in table.columns][1:] == [m.label for m in shown("console")]
    cells = [next(iter(c.cells)) for c in table.columns][1:]
    assert cells == [m.fmt.format(s[m.key]) for m in shown("console")]
    assert [next(iter(c.cells)) for c in summary_table(s).columns][0] == FAMILIES[0].label
    per_class = class_table({"x": s, "y": {"completed": 0}})
    assert [c.header for c in per_class.columns][1:] == [m.label for m in
                                                         shown("console_classes")]
    x, y = ([list(c.cells)[i] for c in per_class.columns][1:] for i in (0, 1))
    assert x == [m.fmt.format(s[m.key]) for m in shown("console_classes")]
    assert y == ["0", *["-"] * (len(shown("console_classes")) - 1)]


class _Recording(dict):
    """A summary that notes every key read from it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def test_the_prose_under_the_run_table_reads_declared_keys(linear_profile):
    from io import StringIO

    from rich.console import Console

    s = _Recording(_summary(linear_profile))
    print_summary(s, console=Console(file=StringIO(), width=200))
    assert set(VIEWS["run_line"]) <= s.read
    assert sorted(s.read - set(METRICS) - set(FACTS)) == []
    lines = run_lines(s)
    for m in shown("run_line"):  # each in its declared format (the stall to 0.1 ms)
        want = f"{s[m.key]:.1f}" if m.key == "max_decode_stall_ms" else m.fmt.format(s[m.key])
        assert f" {want}" in lines, m.key
    # a renamed key would be read under its new name: the prose follows the declaration
    assert "goodput" in lines and "goodput" not in run_lines({**s, "request_goodput": None})


def test_the_verdicts_tradeoff_reads_the_declarations(linear_profile):
    s = _summary(linear_profile)
    stall, ttft = tradeoff_metrics(s)
    assert [stall.path, ttft.path] == [(k,) for k in VIEWS["tradeoff"]]
    assert [stall.label, ttft.label] == [m.label for m in shown("tradeoff")]
    assert stall.value(s) == s[stall.path[0]] and ttft.value(s) == s[ttft.path[0]]
    by_class = {**s, "by_class": {"short": {**s, "total_input_tokens": 1, "completed": 2},
                                  "long": {**s, "total_input_tokens": 900, "completed": 2}}}
    assert tradeoff_metrics(by_class)[1].path == ("by_class", "long", VIEWS["tradeoff"][1])


def test_every_family_and_defined_metric_is_defined_on_every_page():
    labels = [label for label, _ in DEFINITIONS]
    assert [f.label for f in FAMILIES] == labels[:len(FAMILIES)]
    assert {m.label for m in shown("glossary")} <= set(labels)
    assert len(labels) == len(set(labels))
    assert all(m.definition for m in METRICS.values())


def test_one_spelling_for_both_slo_flags():
    # the same words, `=` or vLLM's `:`, commas or spaces, over each flag's own keys
    assert parse_slos(["ttft=500,tpot:50", "itl_ms=20"]) == {"ttft": 0.5, "tpot": 0.05,
                                                             "itl": 0.02}
    assert parse_capacity_slos(["p99_ttft_ms=500,p99_itl_ms:50"]) == {
        "p99_ttft_ms": 500.0, "p99_itl_ms": 50.0, "median_sched_delay_ms": 2000.0}
    assert parse_capacity_slos(["p99_itl_ms=50", "median_sched_delay_ms=off"]) == {
        "p99_itl_ms": 50.0}
    for bad, says in (("ttft", "use METRIC=MS"), ("ttft=abc", "is not a number of ms"),
                      ("ttft=-1", "the SLO must be a finite number > 0 ms"),
                      ("ttft=off", "is not a number of ms"), ("p99_ttft_ms=5", "use METRIC")):
        with pytest.raises(ValueError, match=says):
            parse_slos([bad])
    for bad, says in (("p99_ttft", "use KEY=MS"), ("p99_ttft_ms=x", "is not a number"),
                      ("p99_ttft_ms=inf5", "is not a number"),
                      ("p99_ttft_ms=0", "the bound must be a finite number > 0 ms")):
        with pytest.raises(ValueError, match=says):
            parse_capacity_slos([bad])
    # --slo takes every key in ms the registry declares, and nothing else
    assert set(ms_keys()) == {k for k in summary_keys() if METRICS[k].unit == "ms"}
    assert "max_decode_stall_ms" in ms_keys() and "request_throughput" not in ms_keys()


def test_the_parser_reads_what_it_is_given():
    bounds, off = parse_bounds(["a=1 b:2.5", "c=off"], "--x", ("a", "b", "c"), "K=MS",
                               off=True)
    assert bounds == {"a": 1.0, "b": 2.5} and off == {"c"}
    with pytest.raises(ValueError, match=r"--x 'P:d=1': use K=MS"):
        parse_bounds(["d=1"], "--x", ("a",), "K=MS", prefix="P:")


def _vllm_max_concurrent(arrival, finish) -> int:
    """`vllm bench serve`'s loop, as it is written there (benchmarks/serve.py)."""
    t0 = min(arrival)
    buckets = [0] * (int(np.ceil(max(finish) - t0)) + 1)
    for a, f in zip(arrival, finish, strict=True):
        for second in range(int(a - t0), int(f - t0) + 1):
            buckets[second] += 1
    return max(buckets)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.floats(0, 30), st.floats(0, 8)), min_size=1, max_size=40))
def test_peak_concurrency_counts_as_vllm_does(reqs):
    arrival = np.array([a for a, _ in reqs])
    finish = arrival + np.array([d for _, d in reqs])
    assert max_concurrent(arrival, finish) == _vllm_max_concurrent(arrival, finish)


def test_peak_concurrency_in_closed_form():
    # n requests inside one second: all n; back-to-back in separate seconds: 1
    assert max_concurrent(np.full(5, 3.2), np.full(5, 3.7)) == 5
    assert max_concurrent(np.arange(4.0) * 2, np.arange(4.0) * 2 + 0.5) == 1
    assert max_concurrent(np.zeros(0), np.zeros(0)) == 0


def test_peak_concurrency_is_in_the_summary(linear_profile):
    s = _summary(linear_profile)  # 12 requests arriving within 0.12 s
    assert s["max_concurrent_requests"] == s["completed"] == 12

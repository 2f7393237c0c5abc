"""Metrics are declared once (`sim.metric_registry`): every declared key is in a run's
summary, and the console, the report tables and the definitions take their columns and
wording from the declarations, so adding one is one line there."""

from __future__ import annotations

from factories import workload

from chunksim.core.speculative import SpecConfig
from chunksim.reports.console import comparison_table, summary_table
from chunksim.reports.definitions import DEFINITIONS
from chunksim.reports.tables import seed_rows
from chunksim.sim.engine import EngineConfig
from chunksim.sim.metric_registry import FAMILIES, METRICS, PERCENTILES, shown
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.seeds import fold


def _summary(linear_profile) -> dict:
    spec = SpecConfig(speculative_method="ngram", num_speculative_tokens=2,
                      spec_acceptance_rate=0.5)
    cfg = RunConfig(chunk=256, kv_blocks=400, slos_s={"ttft": 1.0},
                    engine=EngineConfig(speculative=spec))
    w = workload([(0.01 * i, 100 + 37 * i, 5 + i) for i in range(12)])
    return simulate(w, linear_profile, cfg)[1]


def test_every_declared_metric_is_in_a_runs_summary(linear_profile):
    s = _summary(linear_profile)
    for f in FAMILIES:
        for stat in ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES)):
            assert isinstance(s[f.key(stat)], float), f.key(stat)
    missing = [m.key for m in METRICS if m.key not in s]
    assert missing == []


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


def test_every_family_and_defined_metric_is_defined_on_every_page():
    labels = [label for label, _ in DEFINITIONS]
    assert [f.label for f in FAMILIES] == labels[:len(FAMILIES)]
    assert {m.label for m in METRICS if m.definition} <= set(labels)
    assert len(labels) == len(set(labels))

"""Comparison: one workload replayed under several configurations and seeds.

Each configuration runs once per seed (the same requests for every configuration of a
seed); its row holds the median over the seeds, with the range in `SeedStats`. Rows are
ordered by configuration then seed and every cell is formatted by `table.cell`, so the
same inputs and seeds give byte-identical `comparison.csv` / `.json`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from chunksim.progress import ProgressBar
from chunksim.sim.engine.engine import SimResult
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.job import SimJob
from chunksim.sweep.runner import Runner
from chunksim.sweep.seeds import SeedStats, fold
from chunksim.sweep.table import Row, columns_of, csv_text, flatten
from chunksim.workloads.options import WorkloadOptions

KEY_COLUMNS = ("config", "policy", "chunk")
"""Every row's key columns; a fleet grid's rows add `fleet_layout` (`config_keys`)."""


@dataclass
class Comparison:
    """Per configuration (sorted) and seed: its summary and, if kept, its records."""

    configs: list[Config]
    runs: list[list[dict]]
    """runs[i][k]: configuration i's summary under seeds[k]."""
    run_records: list[list[SimResult | None]]
    seeds: list[int]

    def __post_init__(self) -> None:
        self.stats: list[SeedStats] = [fold(r) for r in self.runs]

    @property
    def summaries(self) -> list[dict]:
        """Per configuration, the median over the seeds of every numeric field."""
        return [s.median for s in self.stats]

    @property
    def records(self) -> list[SimResult | None]:
        """Per configuration, the first seed's records (the step timeline draws one run)."""
        return [r[0] for r in self.run_records]

    def subset(self, indices: list[int]) -> Comparison:
        """The comparison of the configurations at `indices` only."""
        return Comparison([self.configs[i] for i in indices], [self.runs[i] for i in indices],
                          [self.run_records[i] for i in indices], self.seeds)

    def keys(self, i: int) -> dict[str, object]:
        return config_keys(self.configs[i])

    def rows(self) -> list[Row]:
        """Flat text rows, one per configuration and seed: configuration keys, then every
        summary field (the run's `seed` among them)."""
        return [flatten(s, self.keys(i)) for i, runs in enumerate(self.runs) for s in runs]

    def csv(self) -> str:
        rows = self.rows()  # fleet rows differ in keys (P/D adds kv_transfer): the union
        return csv_text(rows, columns_of(rows))

    def json_rows(self) -> list[dict]:
        """One row per configuration with native types (nested values kept) for
        comparison.json: the median over the seeds, `range` = {key: [min, max]} for every
        numeric key that differs between seeds, and `seeds`."""
        out = []
        for i, st in enumerate(self.stats):
            row = {**self.keys(i), **{k: v for k, v in st.median.items()
                                      if k not in KEY_COLUMNS and k != "fleet_layout"}}
            row["seed"] = self.seeds if len(self.seeds) > 1 else self.seeds[0]
            row["range"] = {k: [st.lo[k], st.hi[k]] for k in st.median
                            if k != "seed" and isinstance(st.lo[k], (int, float))
                            and not isinstance(st.lo[k], bool) and st.lo[k] != st.hi[k]}
            out.append(row)
        return out

    def frame(self):
        """The table as a DataFrame of scalars (reports and the console read this)."""
        import pandas as pd

        rows = [{k: v for k, v in r.items() if not isinstance(v, (dict, list))}
                for r in self.json_rows()]
        return pd.DataFrame(rows)


def config_keys(c: Config) -> dict[str, object]:
    """A configuration's key columns: config, policy, chunk, fleet_layout for fleet grids
    and num_speculative_tokens for grids over draft tokens."""
    keys: dict[str, object] = {"config": c.label, "policy": c.policy.label, "chunk": c.chunk}
    if c.fleet is not None:
        keys["fleet_layout"] = c.fleet.label
    if c.spec_tokens is not None:
        keys["num_speculative_tokens"] = c.spec_tokens
    return keys


def run_comparison(configs: list[Config], workload: WorkloadOptions, run: RunConfig,
                   runner: Runner, keep_records: bool = True,
                   progress: ProgressBar | None = None,
                   seeds: Sequence[int] | None = None) -> Comparison:
    """Replay `workload` under every configuration (same requests for each) and every
    seed (default: the workload's own seed only)."""
    configs = sorted(configs, key=lambda c: c.sort_key)
    seeds = list(seeds) if seeds else [workload.seed]
    jobs = [SimJob(dataclasses.replace(workload, seed=k), run, c, keep_records)
            for c in configs for k in seeds]
    results = runner.map(jobs, progress=progress)
    n = len(seeds)
    return Comparison(configs, [[r.summary for r in results[i * n:(i + 1) * n]]
                                for i in range(len(configs))],
                      [[r.records for r in results[i * n:(i + 1) * n]]
                       for i in range(len(configs))], seeds)

"""Comparison: one workload replayed under several configurations, one row each.

Rows are ordered by configuration and every cell is formatted by `table.cell`, so the
same inputs and seed give byte-identical `comparison.csv` / `.json`.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunksim.progress import ProgressBar
from chunksim.sim.engine import SimResult
from chunksim.sim.run import RunConfig
from chunksim.sweep.configs import Config
from chunksim.sweep.job import SimJob
from chunksim.sweep.runner import Runner
from chunksim.sweep.table import Row, csv_text, flatten
from chunksim.workloads.options import WorkloadOptions

KEY_COLUMNS = ("config", "policy", "chunk")


@dataclass
class Comparison:
    """Per configuration (sorted): its summary and, if kept, its records."""

    configs: list[Config]
    summaries: list[dict]
    records: list[SimResult | None]

    def keys(self, i: int) -> dict[str, object]:
        c = self.configs[i]
        return {"config": c.label, "policy": c.policy.label, "chunk": c.chunk}

    def rows(self) -> list[Row]:
        """Flat text rows: configuration keys, then every summary field."""
        return [flatten(s, self.keys(i)) for i, s in enumerate(self.summaries)]

    def csv(self) -> str:
        rows = self.rows()
        return csv_text(rows, list(rows[0]))

    def json_rows(self) -> list[dict]:
        """Rows with native types (nested values kept) for comparison.json."""
        return [{**self.keys(i), **{k: v for k, v in s.items() if k not in KEY_COLUMNS}}
                for i, s in enumerate(self.summaries)]

    def frame(self):
        """The table as a DataFrame of scalars (reports and the console read this)."""
        import pandas as pd

        rows = [{k: v for k, v in r.items() if not isinstance(v, (dict, list))}
                for r in self.json_rows()]
        return pd.DataFrame(rows)


def run_comparison(configs: list[Config], workload: WorkloadOptions, run: RunConfig,
                   runner: Runner, keep_records: bool = True,
                   progress: ProgressBar | None = None) -> Comparison:
    """Replay `workload` under every configuration (same requests for each)."""
    configs = sorted(configs, key=lambda c: c.sort_key)
    jobs = [SimJob(workload, run, c, keep_records) for c in configs]
    results = runner.map(jobs, progress=progress)
    return Comparison(configs, [r.summary for r in results], [r.records for r in results])

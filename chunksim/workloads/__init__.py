"""Workloads: immutable request specs from seeded generators, scenarios and trace loaders.

Public API (import from here):
- `RequestSpec`, `Workload` — the contract every policy replays.
- `WorkloadOptions`, `build_workload` — CLI flags -> Workload (see `options.py`).
- `SyntheticConfig`, `generate`, `ArrivalProcess`, `ArrivalKind`, length dists.
- `LongPromptConfig`, `long_prompt`, `longest_request_id` — the seed scenario.
- `describe_workload` — summary statistics; `plot.plot_workload` draws them.
- `load_trace`, `TraceOptions`, `TraceFormat`, `TimeUnit` — production trace replay.
- `sample_path` — small shipped trace samples.
"""

from chunksim.core.spec import RequestSpec, Workload
from chunksim.workloads.arrivals import ArrivalKind, ArrivalProcess, sample_arrivals
from chunksim.workloads.build import workload_from_arrays
from chunksim.workloads.lengths import (
    Constant,
    Empirical,
    LengthKind,
    LogNormal,
    Normal,
    Uniform,
    empirical_from_csv,
    empirical_pair_from_csv,
)
from chunksim.workloads.options import WorkloadKind, WorkloadOptions, build_workload
from chunksim.workloads.samples import sample_path
from chunksim.workloads.scenarios import (
    LONG_PROMPT_DEFAULT_RATE_PER_S,
    LongPromptConfig,
    long_prompt,
    longest_request_id,
)
from chunksim.workloads.shared_prefix import SharedPrefixConfig, shared_prefix
from chunksim.workloads.stats import describe_workload
from chunksim.workloads.synthetic import SyntheticConfig, generate
from chunksim.workloads.traces.config import TimeUnit, TraceFormat, TraceOptions
from chunksim.workloads.traces.load import load_trace

__all__ = [
    "LONG_PROMPT_DEFAULT_RATE_PER_S",
    "ArrivalKind",
    "ArrivalProcess",
    "Constant",
    "Empirical",
    "LengthKind",
    "LogNormal",
    "LongPromptConfig",
    "Normal",
    "RequestSpec",
    "SharedPrefixConfig",
    "SyntheticConfig",
    "TimeUnit",
    "TraceFormat",
    "TraceOptions",
    "Uniform",
    "Workload",
    "WorkloadKind",
    "WorkloadOptions",
    "build_workload",
    "describe_workload",
    "empirical_from_csv",
    "empirical_pair_from_csv",
    "generate",
    "load_trace",
    "long_prompt",
    "longest_request_id",
    "sample_arrivals",
    "sample_path",
    "shared_prefix",
    "workload_from_arrays",
]

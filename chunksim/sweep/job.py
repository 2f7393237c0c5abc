"""One simulation as a picklable job: what a worker process (or Ray task) runs.

The profile is not part of the job: the runner ships it once per worker (process pool
initializer, or one Ray object), so jobs stay small and no worker needs the profile's
path. Workers cache the workload they last built, so a pool that replays one workload
under many configurations generates it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from chunksim.core.spec import Workload
from chunksim.latency.profile import Profile
from chunksim.sim.engine import SimResult
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.configs import Config
from chunksim.workloads.options import WorkloadOptions, build_workload


@dataclass(frozen=True)
class SimJob:
    """Everything one simulation needs besides the profile; plain picklable data."""

    workload: WorkloadOptions
    """The workload flags, with this job's rate and seed already set."""
    run: RunConfig
    """Engine/KV settings shared by the grid (policy and chunk come from `config`)."""
    config: Config
    """The policy and chunk size this job simulates."""
    keep_records: bool = False
    """Return the request/step records too (compare's plots need them; sweeps do not)."""


@dataclass
class JobResult:
    """A job's summary dict and, when asked for, its records."""

    summary: dict
    records: SimResult | None = None


def run_config(job: SimJob) -> RunConfig:
    """The RunConfig this job simulates (the seed also drives jitter, as in `sim run`)."""
    spec = job.config.policy
    return job.run.variant(spec.family, job.config.chunk, job.workload.seed, spec.variant)


_worker_profile: Profile | None = None


def init_worker(profile: Profile) -> None:
    """Process-pool initializer: keep the profile for every job this worker runs."""
    global _worker_profile
    _worker_profile = profile


@lru_cache(maxsize=8)
def _workload(opts: WorkloadOptions) -> Workload:
    return build_workload(opts)


def run_job(job: SimJob, profile: Profile | None = None) -> JobResult:
    """Simulate one job. Top-level so process pools and Ray can pickle it by name."""
    prof = profile if profile is not None else _worker_profile
    if prof is None:
        raise RuntimeError("run_job needs a profile: pass one or call init_worker first")
    result, summary = simulate(_workload(job.workload), prof, run_config(job))
    return JobResult(summary, result if job.keep_records else None)

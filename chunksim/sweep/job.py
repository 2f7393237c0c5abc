"""One simulation as a picklable job: what a worker process (or Ray task) runs.

The profile is not part of the job: the runner ships it once per worker (process pool
initializer, or one Ray object), so jobs stay small and no worker needs the profile's
path. Workers cache the workload they last built, so a pool that replays one workload
under many configurations generates it once.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

from chunksim.core.spec import Workload
from chunksim.latency.profile import Profile
from chunksim.sim.engine.engine import SimResult
from chunksim.sim.engine.settle import Settled
from chunksim.sim.run import RunConfig, simulate
from chunksim.sweep.configs import Config, with_spec_tokens
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
    settle_slos_ms: tuple[tuple[str, float], ...] = ()
    """(summary key, bound ms) pairs: stop the run once one has certainly failed
    (`sim.engine.settle`); its summary then holds that decision only (`stopped`: True)."""


@dataclass
class JobResult:
    """A job's summary dict and, when asked for, its records."""

    summary: dict
    records: SimResult | None = None


def run_config(job: SimJob) -> RunConfig:
    """The RunConfig this job simulates (the seed also drives jitter, as in `sim run`)."""
    spec = job.config.policy
    cfg = job.run.variant(spec.family, job.config.chunk, job.workload.seed, spec.variant)
    if job.config.fleet is not None:
        cfg = dataclasses.replace(cfg, fleet=job.config.fleet.apply(cfg.fleet))
    if job.config.spec_tokens is not None:
        cfg = with_spec_tokens(cfg, job.config.spec_tokens)
    return cfg


_worker_profile: Profile | None = None


def init_worker(profile: Profile, parent_pid: int | None = None) -> None:
    """Process-pool initializer: keep the profile for every job this worker runs; leave
    Ctrl-C to the parent (a terminal sends SIGINT to the whole process group, and the
    parent stops the pool); exit when the parent `parent_pid` dies (`_orphan_watch`)."""
    global _worker_profile
    _worker_profile = profile
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_pid is not None:
        threading.Thread(target=_orphan_watch, args=(parent_pid,), daemon=True,
                         name="orphan-watch").start()


ORPHAN_POLL_S = 0.25
"""How often a worker checks that its parent lives."""


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            return state != b"Z"
        except (OSError, IndexError):
            return False
    return True


def _orphan_watch(parent_pid: int) -> None:
    """A worker whose parent died (SIGKILL leaves it no chance to stop the pool) would
    block on the job queue forever: every worker holds that queue's write end too, so
    it never reads EOF. Exit at once instead; the forkserver and the resource tracker
    follow when their last client is gone."""
    while _alive(parent_pid):
        time.sleep(ORPHAN_POLL_S)
    os._exit(1)


@lru_cache(maxsize=8)
def _workload(opts: WorkloadOptions) -> Workload:
    return build_workload(opts)


def run_job(job: SimJob, profile: Profile | None = None) -> JobResult:
    """Simulate one job. Top-level so process pools and Ray can pickle it by name."""
    prof = profile if profile is not None else _worker_profile
    if prof is None:
        raise RuntimeError("run_job needs a profile: pass one or call init_worker first")
    workload = _workload(job.workload)
    try:
        result, summary = simulate(workload, prof, run_config(job),
                                   settle_slos_ms=dict(job.settle_slos_ms) or None)
    except Settled as s:
        return JobResult(s.summary(workload))
    return JobResult(summary, result if job.keep_records else None)

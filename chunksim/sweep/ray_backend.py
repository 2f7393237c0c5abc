"""Ray backend (optional extra `chunksim[ray]`, imported only when `--ray` is given).

The profile goes into the object store once; every task gets a reference. Cluster nodes
need chunksim installed (`pip install 'chunksim[ray]'`), and trace files must exist at the
same path on every node (the job carries the path, not the trace).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from chunksim.latency.profile import Profile
from chunksim.sweep.job import JobResult, SimJob, run_job


class RayBackend:
    """Submit jobs as Ray tasks and yield (index, result) as they finish."""

    def __init__(self, address: str, profile: Profile) -> None:
        try:
            import ray
        except ImportError:
            raise ValueError(
                "--ray needs Ray: pip install 'chunksim[ray]' (or drop --ray to use local "
                "worker processes)") from None
        self.ray = ray
        if not ray.is_initialized():  # a caller (or a test in local mode) may have done it
            ray.init(address=address or None, ignore_reinit_error=True,
                     log_to_driver=False)
        self.task = ray.remote(run_job)
        self.profile_ref = ray.put(profile)

    def completed(self, jobs: Sequence[SimJob]) -> Iterator[tuple[int, JobResult]]:
        refs = {self.task.remote(job, self.profile_ref): i for i, job in enumerate(jobs)}
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for ref in done:
                yield refs[ref], self.ray.get(ref)

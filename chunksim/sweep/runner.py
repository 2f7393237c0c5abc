"""The one runner behind `sim compare`, `sim capacity` and `sim sweep`.

Jobs run inline (one worker), on local worker processes (ProcessPoolExecutor), or on a
Ray cluster. Results come back in *job order* whatever the completion order, so tables
are deterministic; `on_result(index, result)` sees them as they complete (checkpoints,
progress bars). The pool lives as long as the Runner, so a capacity search's many
rounds reuse warm workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from types import TracebackType

from chunksim.latency.profile import Profile
from chunksim.progress import ProgressBar
from chunksim.sweep import pool as sweep_pool
from chunksim.sweep.job import JobResult, SimJob, init_worker, run_job

OnResult = Callable[[int, JobResult], None]


def default_workers() -> int:
    return os.cpu_count() or 1


_stop_now = sweep_pool.stop_now


class Runner:
    """Run SimJobs against one profile; `map` returns results in job order."""

    def __init__(self, profile: Profile, workers: int | None = None,
                 ray_address: str | None = None) -> None:
        """`workers`: local processes (None = os.cpu_count(); 1 = inline, no pool).
        `ray_address`: run on Ray instead ("" = ray.init()'s default: an existing cluster
        if one is found, else a local one; or an address such as ray://head:10001)."""
        if workers is not None and workers < 1:
            raise ValueError(f"--workers {workers}: must be >= 1")
        self.profile = profile
        self.workers = workers or default_workers()
        self.ray_address = ray_address
        self._pool: ProcessPoolExecutor | None = None
        self._ray = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # whatever ends the block early (Ctrl-C, or the command's own message for it, or an
        # error) leaves nobody to wait for the running jobs: stop them at once
        self.close(interrupted=exc_type is not None)

    def close(self, interrupted: bool = False) -> None:
        """Stop the pool: after the running jobs finish, or (`interrupted`: Ctrl-C, an
        error) at once, terminating the workers."""
        if self._pool is not None:
            if interrupted:
                _stop_now(self._pool)
            else:
                try:
                    self._pool.shutdown(wait=True, cancel_futures=True)
                except BaseException:  # Ctrl-C while waiting for the last jobs
                    _stop_now(self._pool)
                    raise
            self._pool = None

    @property
    def backend(self) -> str:
        if self.ray_address is not None:
            return "ray"
        return "inline" if self.workers == 1 else f"{self.workers} processes"

    def map(self, jobs: Sequence[SimJob], on_result: OnResult | None = None,
            progress: ProgressBar | None = None) -> list[JobResult]:
        """Run every job; results[i] belongs to jobs[i]."""
        results: list[JobResult | None] = [None] * len(jobs)
        for i, res in self._completed(jobs):
            results[i] = res
            if on_result is not None:
                on_result(i, res)
            if progress is not None:
                progress.advance()
        return results  # type: ignore[return-value]  # every slot was filled above

    def _completed(self, jobs: Sequence[SimJob]) -> Iterator[tuple[int, JobResult]]:
        if not jobs:
            return iter(())
        if self.ray_address is not None:
            from chunksim.sweep.ray_backend import RayBackend

            if self._ray is None:
                self._ray = RayBackend(self.ray_address, self.profile)
            return self._ray.completed(jobs)
        if self.workers == 1:
            return ((i, run_job(job, self.profile)) for i, job in enumerate(jobs))
        return self._pool_completed(jobs)

    @property
    def pooled(self) -> bool:
        """Jobs run on local worker processes (`submit` may be used)."""
        return self.ray_address is None and self.workers > 1

    def submit(self, job: SimJob) -> Future:
        """Start one job on the local pool (`pooled` runners only): for callers that pick
        the next jobs from the results so far, as each comes in (a capacity search)."""
        pool = self._local_pool()
        with sweep_pool.sigint_held():
            return pool.submit(run_job, job)

    def _local_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # forkserver, not fork: the parent runs a progress-bar thread, and forking a
            # threaded process can deadlock; its preload makes each worker start cheap
            # (`sweep.pool`: a command may have started it already)
            self._pool = ProcessPoolExecutor(self.workers, mp_context=sweep_pool.start(),
                                             initializer=init_worker,
                                             initargs=(self.profile, os.getpid()))
        return self._pool

    def _pool_completed(self, jobs: Sequence[SimJob]) -> Iterator[tuple[int, JobResult]]:
        pool = self._local_pool()
        with sweep_pool.sigint_held():
            futures: dict[Future, int] = {pool.submit(run_job, job): i
                                          for i, job in enumerate(jobs)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                # Within one wake-up, hand results over in job order (stable checkpoints).
                for fut in sorted(done, key=futures.__getitem__):
                    yield futures[fut], fut.result()
        finally:
            for fut in pending:
                fut.cancel()

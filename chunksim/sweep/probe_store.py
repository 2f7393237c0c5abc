"""A capacity search's finished runs, kept under --out while it runs, so that the same
command run again after a Ctrl-C reuses them instead of running them again.

Each run is one record appended to `RESUME_FILE` as it finishes: the key of its job (a
digest of the job's every setting and of the profile's content) and its summary. A
record cut short by the stop is ignored when the file is read back. The file is the
user's own output, read back only by the command that wrote it; the answer's file set,
swapped in whole when the search completes, replaces it (`reports.answer_files`)."""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path

from chunksim.sweep.job import JobResult, SimJob
from chunksim.sweep.runner import Runner

RESUME_FILE = "capacity_resume.pkl"
"""The name of the kept runs' file under --out."""
_FORMAT = "chunksim-probe-runs/1"


def job_key(job: SimJob, profile_sha256: str) -> str:
    """A digest of everything a run's summary depends on: the job (workload with its rate
    and seed, engine settings, configuration) and the profile."""
    return hashlib.sha256(repr((_FORMAT, profile_sha256, job)).encode()).hexdigest()


class ProbeStore:
    """The finished runs under one --out: read at start, appended to as runs finish."""

    def __init__(self, path: Path, profile_sha256: str) -> None:
        self.path = Path(path)
        self.profile = profile_sha256
        self.runs, self._whole = _read(self.path)
        self.found = len(self.runs)
        """Runs read back from an interrupted search."""
        self.reused = 0
        """Of those, how many this search used instead of running."""
        self._lock = threading.Lock()
        self._file = None

    def get(self, job: SimJob) -> dict | None:
        summary = self.runs.get(job_key(job, self.profile))
        if summary is not None:
            self.reused += 1
        return summary

    def put(self, job: SimJob, summary: dict) -> None:
        """Keep one finished run (thread-safe: pool results land on another thread)."""
        key = job_key(job, self.profile)
        record = pickle.dumps((key, summary), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            if key in self.runs:
                return
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                if self.path.exists():  # drop a record cut short, so new ones follow whole
                    os.truncate(self.path, self._whole)
                self._file = open(self.path, "ab")  # noqa: SIM115 - open for the search
            self._file.write(record)
            self._file.flush()
            self.runs[key] = summary

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _read(path: Path) -> tuple[dict[str, dict], int]:
    """(the records of `path`, the length of its whole records): ({}, 0) if it is not
    there; a last record cut short is left out."""
    runs: dict[str, dict] = {}
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return runs, 0
    whole = 0
    with f:
        while True:
            try:
                key, summary = pickle.load(f)
            except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError,
                    ImportError, IndexError):
                break
            runs[key] = summary
            whole = f.tell()
    return runs, whole


class ResumableRunner(Runner):
    """A Runner that takes each job's summary from `store` when a run of it finished
    before, and keeps every run it finishes there. Jobs that keep their records (the
    comparison's) are always run."""

    def __init__(self, profile, workers: int | None, ray_address: str | None,
                 store: ProbeStore) -> None:
        super().__init__(profile, workers, ray_address)
        self.store = store

    def submit(self, job: SimJob) -> Future:
        kept = None if job.keep_records else self.store.get(job)
        if kept is not None:
            fut: Future = Future()
            fut.set_result(JobResult(kept))
            return fut
        fut = super().submit(job)
        if not job.keep_records:
            fut.add_done_callback(lambda f, job=job: self._keep(job, f))
        return fut

    def _keep(self, job: SimJob, fut: Future) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.store.put(job, fut.result().summary)

    def _completed(self, jobs: Sequence[SimJob]) -> Iterator[tuple[int, JobResult]]:
        todo = []
        for i, job in enumerate(jobs):
            kept = None if job.keep_records else self.store.get(job)
            if kept is not None:
                yield i, JobResult(kept)
            else:
                todo.append(i)
        for j, res in super()._completed([jobs[i] for i in todo]):
            if not jobs[todo[j]].keep_records:
                self.store.put(jobs[todo[j]], res.summary)
            yield todo[j], res


def open_store(out: Path, profile_sha256: str) -> ProbeStore:
    return ProbeStore(Path(out) / RESUME_FILE, profile_sha256)


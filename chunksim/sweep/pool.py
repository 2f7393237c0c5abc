"""The process server the local worker pool forks its workers from (`multiprocessing`'s
forkserver), started as early as a command knows it will run jobs on the pool.

The server imports the simulator once (`PRELOAD`), so each worker forked from it starts in
milliseconds. That import costs about what the command's own import costs, so a command
that will run a pool starts the server first thing (`start`, from `cli.main`): the two
imports then run side by side on two cores instead of one after the other. This module
imports nothing of the simulator itself.

Ctrl-C never reaches the server: it starts with SIGINT ignored (its own code ignores it
only once its imports are done, so a Ctrl-C in the meantime would print its traceback);
the parent stops the pool and its workers (`runner.Runner.close`, `stop_now`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PRELOAD = ("chunksim.sweep.job",)
"""What the server imports before it forks any worker: everything a job runs."""
_STARTED_BY = [0]
"""The process that started the server with SIGINT ignored (0: none yet)."""


def context():
    """The forkserver context the pool runs on, with `PRELOAD` set."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def start():
    """Start the server now, if it is not running yet (a no-op after the first call);
    returns the pool's context (`context`)."""
    from multiprocessing import forkserver, resource_tracker

    ctx = context()
    old = signal.getsignal(signal.SIGINT)
    if (_STARTED_BY[0] == os.getpid() or old is None or _other_threads()
            or threading.current_thread() is not threading.main_thread()):
        # Started before, it runs (or restarts, if it died) and no signal is touched: the
        # dance below would lose a Ctrl-C once this process has other threads (numpy's,
        # a progress bar's), as one that does not block SIGINT takes it and, while SIGINT
        # is ignored, drops it. (Dispositions are set on the main thread only.)
        forkserver.ensure_running()
        return ctx
    # an ignored signal stays ignored in the program a process executes, and Python then
    # installs no KeyboardInterrupt handler for it; blocked meanwhile here, a Ctrl-C that
    # comes while it is ignored stays pending (Linux) and reaches this process after. The
    # resource tracker starts first: starting it unblocks SIGINT again, which would drop a
    # Ctrl-C that came meanwhile.
    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(
        signal, "pthread_sigmask") else None
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, old)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _STARTED_BY[0] = os.getpid()
    return ctx


def _other_threads() -> bool:
    """Whether this process runs threads besides this one (native ones included, where
    /proc tells)."""
    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        return threading.active_count() > 1


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C that comes inside the block and raise it as the block ends.

    Submitting a job may start a worker: the parent writes the new process its start-up
    data and then records it among the pool's processes. Interrupted in between, the
    half-started worker prints a traceback (its data cut short, or the pool's locks
    already gone) and escapes the pool's clean-up. A no-op off the main thread, or when
    Python code does not handle SIGINT."""
    old = signal.getsignal(signal.SIGINT)
    hold = callable(old) and threading.current_thread() is threading.main_thread()
    frames: list = []
    if hold:
        signal.signal(signal.SIGINT, lambda signum, frame: frames.append(frame))
    try:
        yield
    finally:
        if hold:
            signal.signal(signal.SIGINT, old)
            if frames:
                old(signal.SIGINT, frames[0])


def stop_now(pool) -> None:
    """Terminate a ProcessPoolExecutor's workers and let its manager thread end, so the
    interpreter's exit (which joins that thread) neither hangs nor prints.

    Jobs already handed to the pool's call queue may still be in its feeder thread's
    hands, writing into a pipe that no (terminated) worker will read again; the manager
    thread, cleaning up the broken pool, joins that feeder thread, and the exit joins the
    manager thread. So while the manager thread winds down (5 s at most), this process
    reads what is left in that pipe (the workers are gone: nobody else reads it), and a
    full pipe never keeps the feeder, the manager and the exit waiting on each other."""
    import time
    from concurrent.futures import InvalidStateError

    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    calls = getattr(pool, "_call_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(timeout=5)
    if manager is None:
        return
    previous = threading.excepthook

    def quiet(args: threading.ExceptHookArgs) -> None:
        # CPython before 3.12 fails a cancelled job's future once more as the pool
        # breaks (InvalidStateError, gh-107219): nothing is lost, nothing to print
        if not (args.thread is manager and args.exc_type is InvalidStateError):
            previous(args)

    threading.excepthook = quiet
    if results is not None:
        # a worker stopped in the middle of sending a result leaves part of it in the
        # queue, and the manager thread would wait for the rest forever: with the last
        # write end closed it reads the end of the pipe instead
        results._writer.close()
    # let the manager thread finish closing its wakeup pipe too: the interpreter's exit
    # hook writes to that pipe, and racing its close prints a traceback
    deadline = time.monotonic() + 5
    while manager.is_alive() and time.monotonic() < deadline:
        manager.join(timeout=0.05)
        _drain(calls)
    if not manager.is_alive():
        threading.excepthook = previous


def _drain(calls) -> None:
    """Read and drop what the call queue's feeder wrote for workers that are gone."""
    reader = getattr(calls, "_reader", None)
    try:
        while reader is not None and reader.poll(0):
            reader.recv_bytes()
    except (OSError, EOFError, ValueError):  # closed meanwhile: nothing left to read
        pass

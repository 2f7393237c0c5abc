"""The worker pool's process server started early (`sweep.pool`, `cli.pools`): which
command lines start it, that the pool then forks from that very server, and that Ctrl-C
cannot reach it while it imports (read at once, before its own code ignores it)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chunksim.cli import POOLED, pools

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args, expected", [
    (["compare"], True),
    (["capacity", "--slo", "p99_itl_ms=100"], True),
    (["sweep", "--workers", "2"], True),
    (["compare", "--workers", "1"], False),
    (["compare", "--workers=1"], False),
    (["capacity", "--ray", "auto"], False),
    (["sweep", "--ray=local"], False),
    (["run", "--policy", "budget"], False),
    (["validate"], False),
    ([], False),
])
def test_a_pool_is_guessed_from_the_command_line(monkeypatch, args, expected):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert pools(args) is expected
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one core: workers run inline
    assert pools(args) is False
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # no forkserver (Windows): the pool
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert pools(args) is False  # reports that itself when it starts


def test_every_pooled_command_runs_a_pool():
    """The commands named in POOLED take --workers and run a pool: the command itself or
    the flow it calls below the CLI (`reports/NAME_flow.py`) builds a `Runner`."""
    for name in POOLED:
        source = (ROOT / "chunksim" / "cli" / f"{name}.py").read_text()
        flow = ROOT / "chunksim" / "reports" / f"{name}_flow.py"
        below = flow.read_text() if flow.exists() else ""
        assert "WorkersOpt" in source and "Runner(" in source + below, name


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_pool_forks_from_the_server_started_early(tmp_path):
    script = textwrap.dedent("""
        from multiprocessing import forkserver
        from pathlib import Path

        from chunksim.sweep import pool
        pool.start()
        server = forkserver._forkserver._forkserver_pid
        status = Path(f"/proc/{server}/status").read_text()
        ignored = int(next(ln.split()[1] for ln in status.splitlines()
                           if ln.startswith("SigIgn:")), 16)
        print("sigint_ignored", bool(ignored & (1 << 1)))

        from chunksim.latency.profile import load_profile
        from chunksim.sim.run import RunConfig
        from chunksim.sweep.configs import make_configs, parse_policies
        from chunksim.sweep.job import SimJob
        from chunksim.sweep.runner import Runner
        from chunksim.workloads.options import WorkloadOptions

        cfg = make_configs(parse_policies("budget"), [512])[0]
        jobs = [SimJob(WorkloadOptions(num_requests=5, seed=k), RunConfig(), cfg)
                for k in range(2)]
        with Runner(load_profile(None), workers=2) as runner:
            done = runner.map(jobs)
        print("completed", [r.summary["completed"] for r in done])
        print("same_server", forkserver._forkserver._forkserver_pid == server)
    """)
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "sigint_ignored True" in res.stdout
    assert "completed [5, 5]" in res.stdout
    assert "same_server True" in res.stdout


@pytest.mark.slow
def test_stopping_the_pool_at_once_ends_its_manager_thread_mid_result(linear_profile,
                                                                      monkeypatch):
    """A worker terminated in the middle of sending a result leaves part of it in the
    result pipe: stopping the pool at once must still end the pool's manager thread (the
    interpreter's exit waits for it), and print nothing."""
    import struct
    import threading

    from chunksim.sim.run import RunConfig
    from chunksim.sweep.compare import run_comparison
    from chunksim.sweep.configs import make_configs, parse_policies
    from chunksim.sweep.runner import Runner
    from chunksim.workloads import WorkloadKind, WorkloadOptions

    printed = []
    monkeypatch.setattr(threading, "excepthook", printed.append)
    runner = Runner(linear_profile, 2)
    run_comparison(make_configs(parse_policies("chunk,budget"), [256]),
                   WorkloadOptions(workload=WorkloadKind.POISSON, duration_s=2.0), RunConfig(),
                   runner, keep_records=False)
    pool = runner._pool
    manager = pool._executor_manager_thread
    # a header promising 1000 bytes, and 10 of them: the manager thread reads on, blocked
    os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1000) + b"x" * 10)
    runner.close(interrupted=True)
    manager.join(timeout=10)
    assert not manager.is_alive()
    assert printed == []
    assert threading.excepthook == printed.append  # put back once the thread ended


def test_a_ctrl_c_inside_sigint_held_is_raised_as_the_block_ends():
    import signal

    from chunksim.sweep.pool import sigint_held

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not handled by Python in this process")
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with sigint_held():
            signal.raise_signal(signal.SIGINT)
            reached.append("after the signal")
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with sigint_held():  # no Ctrl-C: nothing raised
        pass


_CTRL_C_AS_THE_POOL_STARTS = """
import os, signal, sys, threading, time
from multiprocessing import forkserver
from chunksim.sweep import pool

if sys.argv[1] == "again":
    pool.start()  # a command's first start
if sys.argv[1] != "first":
    threading.Thread(target=threading.Event().wait, daemon=True).start()  # numpy's, say
start_server = forkserver.ensure_running


def ensure_running():  # a Ctrl-C comes as the server (and the resource tracker) starts
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # (a thread that may take the signal has the time to)
    start_server()


forkserver.ensure_running = ensure_running
try:
    pool.start()
    time.sleep(0.3)
    print("lost")
except KeyboardInterrupt:
    print("delivered")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux signal delivery")
@pytest.mark.parametrize("when", ["first", "threads", "again"])
def test_a_ctrl_c_as_the_pool_starts_is_never_lost(when):
    """A Ctrl-C that comes while the pool's server starts reaches the command: on a first
    start (the resource tracker's own start unblocks SIGINT while the server's start has
    it ignored), with another thread running (it would take the signal while ignored and
    drop it), and on a later start."""
    import signal

    # SIGINT at its default in the child, as a terminal's command has it, however this
    # test was started (a shell's background job inherits SIGINT ignored)
    res = subprocess.run([sys.executable, "-c", _CTRL_C_AS_THE_POOL_STARTS, when], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert res.stdout.strip() == "delivered", res.stdout + res.stderr

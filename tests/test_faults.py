"""Faults: a killed sweep leaves no process behind; Ctrl-C of `sim sweep` and `sim
profile` says what was saved and prints the exact command that resumes, which works."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import default_sigint

ROOT = Path(__file__).resolve().parents[1]
LINUX = sys.platform.startswith("linux")
SIM = [sys.executable, "-m", "chunksim.cli"]
SWEEP = ["sweep", "-n", "2000", "--policies", "budget,chunk", "--chunks", "128,256,512",
         "--seeds", "0,1,2,3", "--workers", "2"]
"""Long enough a grid point that Ctrl-C at the first saved row lands mid-sweep: with
shorter runs the workers finish most of the grid while the first row is awaited, and
the signal can come as the command exits."""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _descendants(pid: int) -> set[int]:
    kids, out, todo = _children(), set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def _wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _rows(path: Path) -> int:
    return max(len(path.read_text().splitlines()) - 1, 0) if path.is_file() else 0


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_sigkill_of_a_sweep_leaves_no_process_behind(tmp_path):
    proc = subprocess.Popen([*SIM, *SWEEP, "--out", str(tmp_path / "s.csv")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        # the forkserver, the resource tracker and two workers
        _wait_for(lambda: len(_descendants(proc.pid)) >= 4, 60, "the worker pool")
        family = _descendants(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    _wait_for(lambda: not any(_running(p) for p in family), 15,
              f"orphans {[p for p in family if _running(p)]} to exit")


@pytest.mark.slow
def test_ctrl_c_of_a_sweep_says_what_was_saved_and_how_to_resume(tmp_path):
    out = tmp_path / "s.csv"
    proc = subprocess.Popen([*SIM, *SWEEP, "--out", str(out)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=default_sigint)
    _wait_for(lambda: _rows(out) >= 1 or proc.poll() is not None, 120, "a first saved row")
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    saved = _rows(out)
    assert f"interrupted: {saved} of 24 grid points are saved in {out}" in err
    resume = next(ln for ln in err.splitlines() if ln.startswith("resume with: "))
    args = shlex.split(resume.removeprefix("resume with: "))
    assert args[0] == "sim" and args[1:] == [*SWEEP, "--out", str(out)]
    done = subprocess.run([*SIM, *args[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{24 - saved} simulated, {saved} already in" in done.stdout
    assert _rows(out) == 24


@pytest.mark.torch
@pytest.mark.slow
def test_ctrl_c_of_a_profile_says_what_was_saved_and_how_to_resume(tmp_path):
    out = tmp_path / "p.csv"
    cmd = ["profile", "--chunk-lens", "0,16,64,128", "--decode-counts", "0,1,2,4",
           "--kv-lens", "1,32,64", "--prior-lens", "", "--warmup", "1", "--repeats", "300",
           "--quiet", "--out", str(out)]
    proc = subprocess.Popen([*SIM, *cmd], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=default_sigint)
    partial = out.with_name("p.partial.csv")
    _wait_for(lambda: _rows(partial) >= 2 or proc.poll() is not None, 180, "saved points")
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    n = _rows(partial)
    assert f"interrupted: {n} measured point(s) are saved in {partial}" in err
    resume = next(ln for ln in err.splitlines() if ln.startswith("resume with: "))
    args = shlex.split(resume.removeprefix("resume with: "))
    assert args == ["sim", *cmd, "--resume"]


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_ctrl_c_while_the_pool_server_imports_prints_no_traceback(tmp_path):
    """The worker pool's server imports the simulator for a while after it starts: a
    Ctrl-C then reaches it too (a terminal signals the whole group), and must not print
    its traceback beside the command's one-line message."""
    code, err = _compare_interrupted(tmp_path, 0.0)
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def _compare_interrupted(tmp_path, delay_s: float) -> tuple[int, str]:
    """Ctrl-C to a `sim compare`'s process group `delay_s` after its pool's server
    started (unless it ended first): its exit status and stderr."""
    proc = subprocess.Popen([*SIM, "compare", "-n", "50", "--out", str(tmp_path / "c")],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=default_sigint)
    try:
        # the resource tracker, then the server
        _wait_for(lambda: len(_descendants(proc.pid)) >= 2 or proc.poll() is not None, 30,
                  "the pool's server")
        time.sleep(delay_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


_EXEC_CTRL_C = """
import sys
from chunksim.cli import errors
try:
    exec("raise KeyboardInterrupt")  # as a Ctrl-C landing in a dataclass's generated code
except KeyboardInterrupt:
    pass
if sys.argv[1] == "forget":
    errors.forget_interrupt_mark()
sys.exit(130)
"""


def test_a_ctrl_c_handled_after_exec_code_keeps_the_chosen_exit_status(tmp_path):
    """Run as `python -m` (as `python -m chunksim.cli` runs), CPython kills itself with
    SIGINT at exit once a KeyboardInterrupt ended code run by `exec` of a string, however
    it was handled: `forget_interrupt_mark` keeps 130."""
    (tmp_path / "exec_ctrl_c.py").write_text(_EXEC_CTRL_C)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}

    def status(arg):
        return subprocess.run([sys.executable, "-m", "exec_ctrl_c", arg], cwd=tmp_path,
                              env=env, preexec_fn=default_sigint,
                              capture_output=True).returncode

    assert status("keep") == -signal.SIGINT  # what the mark does unless forgotten
    assert status("forget") == 130


_UNRAISABLE_CTRL_C = """
import signal, sys, time
from chunksim.cli import errors
errors.install_signal_handlers()

class Dropped:
    def __del__(self):  # a Ctrl-C landing here is "ignored" by Python: printed, lost
        signal.raise_signal(signal.SIGINT)

try:
    Dropped()
    time.sleep(5)
    print("lost")
except KeyboardInterrupt:
    print("delivered")
"""


def test_a_ctrl_c_landing_where_python_ignores_errors_is_delivered_again():
    res = subprocess.run([sys.executable, "-c", _UNRAISABLE_CTRL_C], cwd=ROOT, text=True,
                         preexec_fn=default_sigint, capture_output=True, timeout=60)
    assert res.stdout.strip() == "delivered"
    assert res.stderr == ""


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="reads /proc")
@pytest.mark.parametrize("delay_s", [0.0, 0.2, 0.5, 0.9, 1.4])
def test_ctrl_c_at_any_moment_of_a_compare_ends_it_quietly(tmp_path, delay_s):
    """Wherever a Ctrl-C lands (imports, worker start-up, runs, results in transit,
    figures), the command ends at once with its one line and status 130 (or, done
    already, 0): no traceback from it or its workers, no hang, no death by SIGINT."""
    code, err = _compare_interrupted(tmp_path, delay_s)
    assert code in (0, 130), err
    assert "Traceback" not in err and "Exception" not in err, err
    if code == 130:
        assert err.strip().splitlines()[-1].startswith("interrupted: "), err

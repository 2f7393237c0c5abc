"""Ctrl-C at any moment of `sim compare`, `sim capacity` and `sim sweep` (imports, pool
start-up, runs, results in transit, figures, writing): the command ends within 5 s with
one honest line and no traceback; what the line says was kept is there. And the parts
alone: what this process wrote under --out, a capacity search's kept runs."""

from __future__ import annotations

import os
import pickle
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import default_sigint

from chunksim.cli.interrupts import written_since

ROOT = Path(__file__).resolve().parents[1]
SIM = [sys.executable, "-m", "chunksim.cli"]
COMMANDS = {
    # (arguments, about how long an uninterrupted run takes on two cores, s)
    "compare": (["compare", "-n", "60", "--policies", "whole,budget", "--chunks", "512",
                 "--seeds", "0,1", "--workers", "2"], 4.0),
    "capacity": (["capacity", "-n", "120", "--policies", "budget", "--chunks", "256,1024",
                  "--seeds", "0", "--workers", "2"], 5.0),
    "sweep": (["sweep", "-n", "200", "--policies", "budget,chunk", "--chunks", "128,512",
               "--seeds", "0,1", "--workers", "2"], 4.0),
}
MOMENTS = 10
"""Ctrl-Cs in all, spread over the three commands."""


STARTUP_S = 0.12
"""Before this, a Ctrl-C may land in the interpreter's own start-up (its site
packages, runpy), before the first line of chunksim runs: Python's, not the command's."""


def _moments() -> list[tuple[str, float]]:
    """(command, seconds after start) for each Ctrl-C: seeded, so every run of the suite
    sends the same ones; one in each command's first 0.4 s (its imports) included."""
    rng = random.Random(51)
    names = list(COMMANDS)
    out = []
    for i in range(MOMENTS):
        name = names[i % len(names)]
        span = COMMANDS[name][1] if i >= len(names) else 0.4
        out.append((name, round(rng.uniform(STARTUP_S, span), 2)))
    return out


def _interrupt(args: list[str], delay_s: float) -> tuple[int | None, str, float]:
    """(exit status, stderr, seconds from the Ctrl-C to the exit): the Ctrl-C goes to the
    whole process group, as a terminal sends it."""
    proc = subprocess.Popen([*SIM, *args], cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=default_sigint)
    time.sleep(delay_s)
    sent = time.monotonic()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return None, err, float("inf")
    return proc.returncode, err, time.monotonic() - sent


def _records(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while True:
            try:
                pickle.load(f)
            except (EOFError, pickle.UnpicklingError):
                return n
            n += 1


def _honest(name: str, err: str, out: Path) -> None:
    """What the interrupted line says was kept is there, and nothing more is claimed."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    said = next(ln for ln in lines if ln.startswith("interrupted: "))
    assert "already written are complete" not in err
    if "nothing was written" in said:
        visible = [p for p in out.iterdir() if not p.name.startswith(".")] \
            if out.is_dir() else ([out] if out.exists() else [])
        assert not [p for p in visible if p.name != "capacity_resume.pkl"], visible
    m = re.search(r"wrote (\d+) files? to (\S+) before the stop", said)
    if m:
        assert len([p for p in Path(m.group(2)).iterdir()
                    if not p.name.startswith(".")]) >= int(m.group(1))
    m = re.search(r"(\d+) finished probe runs are kept in (\S+?);", said)
    if m:
        assert _records(Path(m.group(2))) == int(m.group(1))
        assert lines[-1] == f"resume with: sim {' '.join(COMMANDS[name][0])} --out {out}"
    m = re.search(r"(\d+) of (\d+) grid points are saved in (\S+)", said)
    if m:
        rows = len(Path(m.group(3)).read_text().splitlines()) - 1 if int(m.group(1)) else 0
        assert rows == int(m.group(1))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, forkserver")
@pytest.mark.parametrize("name, delay_s", _moments(),
                         ids=[f"{n}-{d}s" for n, d in _moments()])
def test_ctrl_c_at_a_random_moment_ends_quietly_and_honestly(name, delay_s, tmp_path):
    args, _ = COMMANDS[name]
    out = tmp_path / ("s.csv" if name == "sweep" else "o")
    code, err, took = _interrupt([*args, "--out", str(out)], delay_s)
    assert code is not None, f"still running 5 s after Ctrl-C: {err[-2000:]}"
    assert took < 5.0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert code in (0, 130), (code, err)
    if code == 130:
        _honest(name, err, out)


def test_written_since_names_only_this_processs_outputs(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("x")
    os.utime(old, (1000.0, 1000.0))
    start = time.time() - 1
    assert written_since(str(tmp_path), start) == []
    (tmp_path / "new.json").write_text("{}")
    (tmp_path / ".new.json.123.tmp").write_text("{}")  # staged: not an output
    assert written_since(str(tmp_path), start) == ["new.json"]
    assert written_since(str(tmp_path / "new.json"), start) == ["new.json"]
    assert written_since(str(tmp_path / "absent"), start) == []


def test_a_capacity_search_reuses_the_runs_kept_before_an_interrupt(tmp_path):
    """The runs of an interrupted search are read back by key; a record cut short by the
    stop is left out and overwritten; a job with other settings is not mistaken for one."""
    import dataclasses

    from chunksim.latency.profile import load_profile
    from chunksim.sim.build import RunConfig
    from chunksim.sweep.configs import Config, PolicySpec
    from chunksim.sweep.job import SimJob
    from chunksim.sweep.probe_store import RESUME_FILE, ResumableRunner, open_store
    from chunksim.workloads.options import WorkloadOptions

    profile = load_profile("tiny-cpu")
    jobs = [SimJob(WorkloadOptions(num_requests=8, rate=r, seed=0), RunConfig(),
                   Config(PolicySpec("budget"), 256)) for r in (2.0, 4.0)]
    store = open_store(tmp_path, profile.sha256)
    with ResumableRunner(profile, 1, None, store) as runner:
        first = runner.map(jobs)
    store.close()
    with open(tmp_path / RESUME_FILE, "ab") as f:
        f.write(pickle.dumps(("torn", {"x": 1}))[:-3])  # a record cut short by a stop
    again = open_store(tmp_path, profile.sha256)
    assert again.found == 2
    other = dataclasses.replace(jobs[0], config=Config(PolicySpec("budget"), 512))
    with ResumableRunner(profile, 1, None, again) as runner:
        second = runner.map([*jobs, other])
    again.close()
    assert again.reused == 2
    assert [r.summary for r in second[:2]] == [r.summary for r in first]
    assert second[2].summary != first[0].summary
    assert _records(tmp_path / RESUME_FILE) == 3  # the torn tail was cut, the new run kept
    assert open_store(tmp_path, "another profile").get(jobs[0]) is None

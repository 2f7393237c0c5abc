"""The cases the corpus table cannot hold in one command: a bug reported as a bug, Ctrl-C
and SIGTERM, files a killed run left, a sweep row cut short, a compare replacing an
earlier set, and tables read through a pipe."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import default_sigint
from typer.testing import CliRunner

from chunksim import atomic
from chunksim.cli import app
from chunksim.cli.errors import BUG_EXIT, INPUT_EXIT, describe, raised_by_chunksim

ROOT = Path(__file__).resolve().parents[1]
SIM = [sys.executable, "-m", "chunksim.cli"]
BUDGET = ["--policies", "budget", "--chunks", "512", "--seeds", "0"]


def _raise(exc_factory):
    try:
        exc_factory()
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("nothing raised")


def test_a_library_value_error_is_a_bug_not_an_input_error():
    exc = _raise(lambda: json.loads("{"))  # a ValueError raised inside the json module
    assert isinstance(exc, ValueError) and not raised_by_chunksim(exc)
    line, code = describe(exc)
    assert code == BUG_EXIT
    assert line.startswith("internal error (a bug in chunksim, not in your input): "
                           "JSONDecodeError")
    log = Path(line.split("traceback in ")[1].split(";")[0])
    try:
        assert "Traceback" in log.read_text() and "json" in log.read_text()
    finally:
        log.unlink()


def test_a_value_error_chunksim_raises_is_an_input_error():
    from chunksim.sweep.slos import parse_capacity_slos

    exc = _raise(lambda: parse_capacity_slos(["nope=1"]))
    assert describe(exc) == (str(exc), INPUT_EXIT)


def test_any_other_exception_is_a_bug():
    line, code = describe(_raise(lambda: {}["missing"]))
    assert code == BUG_EXIT and "KeyError" in line
    Path(line.split("traceback in ")[1].split(";")[0]).unlink()


def test_an_os_error_under_out_names_the_flag(monkeypatch, tmp_path):
    from chunksim.cli.errors import os_error_line

    monkeypatch.setattr(sys, "argv", ["sim", "run", "--out", str(tmp_path / "d")])
    exc = OSError(28, "No space left on device", str(tmp_path / "d" / "summary.json"))
    assert os_error_line(exc).startswith(f"--out {tmp_path / 'd'}: cannot write ")
    assert os_error_line(exc).endswith("No space left on device (ENOSPC)")


@pytest.mark.slow
def test_ctrl_c_in_compare_exits_130_with_what_holds(tmp_path):
    proc = subprocess.Popen([*SIM, "compare", "-n", "4000", "--seeds", "0,1", "--workers", "1",
                             "--out", str(tmp_path / "c")], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_sigint)
    time.sleep(6)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "error:" not in err
    assert err.strip().splitlines()[-1].startswith("interrupted: ")


@pytest.mark.slow
def test_sigterm_removes_the_staged_steps_and_sigkill_leftovers_go_next_run(tmp_path):
    out = tmp_path / "d"
    staged = lambda: sorted(p for p in tmp_path.iterdir() if p.name.startswith(".d."))  # noqa: E731
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen([*SIM, "run", "-n", "100000", "--out", str(out)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not staged() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert staged(), "the run never staged its steps file"
        time.sleep(0.5)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        if sig is signal.SIGTERM:
            assert proc.returncode == 128 + signal.SIGTERM
            assert staged() == []
    left = staged()
    assert left and all(f".{proc.pid}." in p.name for p in left)
    done = subprocess.run([*SIM, "run", "-n", "20", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"note: removed {len(left)} file(s) an interrupted run")
    assert staged() == []


def test_remove_stale_keeps_what_a_live_process_stages(tmp_path):
    out = tmp_path / "d"
    mine = atomic.staging_file(out, "steps")  # this process: alive
    dead = tmp_path / ".d.steps.999999999.abcd1234.tmp"
    dead.write_text("x")
    other = tmp_path / ".e.steps.999999999.abcd1234.tmp"  # another output's
    other.write_text("x")
    assert atomic.remove_stale(out) == [dead]
    assert mine.exists() and other.exists() and not dead.exists()


def test_a_sweep_row_cut_short_runs_again(tmp_path):
    csv = tmp_path / "s.csv"
    args = ["sweep", "-n", "20", "--policies", "budget", "--chunks", "256,512", "--out",
            str(csv)]
    assert CliRunner().invoke(app, args).exit_code == 0
    whole = csv.read_text()
    csv.write_text(whole[:-40])  # the last row loses its tail and its line end
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "line(s) 3 are incomplete" in res.output
    assert "1 simulated, 1 already in" in res.output
    assert csv.read_text() == whole  # the same answer, recomputed (deterministic)


@pytest.mark.slow
def test_compare_replaces_its_whole_file_set(tmp_path):
    out = tmp_path / "c"
    base = ["compare", "-n", "30", *BUDGET, "--out", str(out)]
    assert CliRunner().invoke(app, [*base, "--fleet", "2"]).exit_code == 0
    assert (out / "replica_load.png").exists()
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 0, res.output
    assert not (out / "replica_load.png").exists() and (out / "report.md").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    (out / "notes.txt").write_text("mine")
    res = CliRunner().invoke(app, ["capacity", "-n", "30", *BUDGET, "--out", str(out)])
    assert res.exit_code != 0 and "notes.txt" in str(res.exception)
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("cmd", [
    ["compare", "-n", "60", "--policies", "budget,chunk", "--chunks", "512", "--seeds", "0",
     "--fleet", "2,router=least-tokens", "--fleet", "pd=1:1,kv-link=ib-400g", "--no-report",
     "--gpu", "h200-sxm", "--out", "{tmp}"],
    ["capacity", "-n", "60", *BUDGET, "--fleet", "2", "--fleet", "pd=1:1", "--gpu", "h200-sxm"],
])
def test_tables_into_a_pipe_show_full_numbers(cmd, tmp_path):
    """CliRunner's stdout is not a terminal, as a pipe or a log file is not."""
    cmd = [a.replace("{tmp}", str(tmp_path / "o")) for a in cmd]
    res = CliRunner().invoke(app, cmd, env={"COLUMNS": "60"})
    assert res.exit_code == 0, res.output
    assert "…" not in res.stdout, res.stdout
    tables, block = [], []  # runs of consecutive table rows
    for ln in [*res.stdout.splitlines(), ""]:
        if "│" in ln:
            block.append(ln)
        elif block:
            tables, block = [*tables, block], []
    assert tables and all(len(ln.split("│")) == len(t[0].split("│")) for t in tables for ln in t)
    # no sentence split across lines: every verdict line ends a sentence
    verdict = [ln for ln in res.stdout.splitlines() if ln.startswith(("Recommended", "SLOs"))]
    assert verdict and all(ln.rstrip().endswith(".") for ln in verdict)


def _bad_slo():
    from chunksim.sweep.slos import parse_capacity_slos

    return parse_capacity_slos(["nope=1"])


def test_an_input_error_raised_in_a_worker_process_stays_an_input_error():
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1) as pool:
        exc = pool.submit(_bad_slo).exception()
    exc = _raise(lambda: (_ for _ in ()).throw(exc))  # re-raised here, as Runner does
    assert raised_by_chunksim(exc)
    assert describe(exc)[1] == INPUT_EXIT
    with ProcessPoolExecutor(1) as pool:
        bug = pool.submit(json.loads, "{").exception()
    bug = _raise(lambda: (_ for _ in ()).throw(bug))
    assert not raised_by_chunksim(bug)

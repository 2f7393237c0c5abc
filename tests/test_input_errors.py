"""Bad input and bad output paths give one clear line naming the file, row, column or flag
and the fix: never a traceback, never work done for nothing, never silent acceptance."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from factories import make_profile
from typer.testing import CliRunner

from chunksim import atomic
from chunksim.cli import app
from chunksim.core.errors import InputError
from chunksim.latency.profile import load_profile
from chunksim.workloads import load_trace

pytestmark = pytest.mark.slow  # each case runs the sim command in a fresh process

ROOT = Path(__file__).resolve().parents[1]


def _sim(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


# ------------------------------------------------------------------ output paths
@pytest.mark.parametrize("cmd", [
    ["run", "-n", "3"],
    ["compare", "-n", "3", "--policies", "budget", "--chunks", "256", "--no-report"],
    ["capacity", "-n", "5", "--policies", "budget", "--chunks", "256"],
])
def test_out_that_is_a_file_is_refused(tmp_path, cmd):
    f = tmp_path / "afile"
    f.write_text("mine\n")
    _clean_error(_sim(*cmd, "--out", str(f)), "--out", "is a file")
    assert f.read_text() == "mine\n"


def test_profile_out_under_a_file_is_refused_before_profiling(tmp_path):
    f = tmp_path / "afile"
    f.write_text("")
    _clean_error(_sim("profile", "--chunk-lens", "0,16", "--decode-counts", "0,1",
                      "--kv-lens", "1,64", "--prior-lens", "", "--quiet",
                      "--out", str(f / "x.csv")), "--out", "is a file")


@pytest.mark.parametrize("cmd,flag,out", [
    (["run", "-n", "3"], "--out", "r"),
    (["sweep", "-n", "3", "--policies", "budget", "--chunks", "256"], "--out", "s.csv"),
    (["capacity", "-n", "5", "--policies", "budget", "--chunks", "256"], "--out", "c"),
    (["compare", "-n", "3", "--policies", "budget", "--chunks", "256"], "--out", "c"),
    (["workload", "describe", "-n", "5"], "--plot", "p.png"),
    (["profile", "--quiet"], "--out", "p.csv"),
])
def test_unwritable_out_is_refused_before_any_work(tmp_path, monkeypatch, cmd, flag, out):
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: (
        False if Path(p) == ro and mode & os.W_OK else real_access(p, mode, *a, **k)))
    # any simulation or profiling would be work done for nothing
    import chunksim.profiler.run as prof_run
    import chunksim.sim.run as sim_run
    from chunksim.sweep.runner import Runner

    def no_work(*a, **k):
        raise AssertionError("work started before the output path was checked")

    monkeypatch.setattr(sim_run, "simulate", no_work)
    monkeypatch.setattr(prof_run, "run_profile", no_work)
    monkeypatch.setattr(Runner, "__init__", no_work)
    res = CliRunner().invoke(app, [*cmd, flag, str(ro / out)])
    assert isinstance(res.exception, ValueError), res.output
    assert flag in str(res.exception) and "not writable" in str(res.exception)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_out_directory_is_one_clean_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        _clean_error(_sim("run", "-n", "3", "--out", str(ro / "r")), "--out", "not writable")
    finally:
        ro.chmod(0o755)


def test_run_out_holding_other_files_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    _clean_error(_sim("run", "-n", "3", "--out", str(out)), "notes.txt", "new or empty")
    assert (out / "notes.txt").read_text() == "keep me"


def test_a_rerun_replaces_the_set_and_concurrent_writers_never_mix(tmp_path):
    out = tmp_path / "set"
    names = ("summary.json", "requests.parquet", "steps.parquet")
    seen: list[set[bytes]] = []
    stop = threading.Event()

    def read(d: int, name: str) -> bytes:
        fd = os.open(name, os.O_RDONLY, dir_fd=d)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def reader() -> None:  # opens the directory once, as a reader of one run's set does
        while not stop.is_set():
            try:
                d = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
            except (FileNotFoundError, NotADirectoryError):
                continue  # between two sets the directory may be absent: not a mix
            try:
                seen.append({read(d, n) for n in names})
            except FileNotFoundError:
                pass  # the set was replaced and removed under us: nothing read, no mix
            finally:
                os.close(d)

    def writer(tag: bytes) -> None:
        for _ in range(60):
            atomic.write_dir(out, {n: tag for n in names})

    threads = [threading.Thread(target=reader)] + [
        threading.Thread(target=writer, args=(t,)) for t in (b"A", b"B", b"C")]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()
    assert seen and all(len(s) == 1 for s in seen)  # every read saw one writer's set
    assert sorted(os.listdir(out)) == sorted(names)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no leftovers


# ------------------------------------------------------------------ malformed inputs
def test_azure_trace_with_a_header_only(tmp_path):
    t = tmp_path / "h.csv"
    t.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    _clean_error(_sim("run", "--trace", str(t)), "h.csv", "no requests")


@pytest.mark.parametrize("name,data", [
    ("b.csv", bytes(range(256)) * 3),
    ("b.jsonl", b"\xff\xfe{\x00\x80\n"),
    ("b.bin", b"\x00\xff\xfe\x80abc\n"),
])
def test_binary_trace_names_the_file(tmp_path, name, data):
    t = tmp_path / name
    t.write_bytes(data)
    _clean_error(_sim("run", "--trace", str(t)), name)


def _profile_with(tmp_path: Path, row: int, column: str, value) -> Path:
    prof = make_profile(tmp_path, name="p", provenance={"content_sha256": None})
    df = pd.read_csv(prof.path)
    df[column] = df[column].astype(object)
    df.loc[row, column] = value
    csv = Path(prof.path)
    csv.write_text(df.to_csv(index=False))
    meta = json.loads(csv.with_suffix(".json").read_text())
    meta["content_sha256"] = hashlib.sha256(csv.read_bytes()).hexdigest()
    csv.with_suffix(".json").write_text(json.dumps(meta))
    return csv


@pytest.mark.parametrize("column,value,needle", [
    ("median_s", "fast", "'fast'"),
    ("median_s", float("inf"), "inf"),
    ("kv_len", -4, "-4"),
    ("p10_s", float("nan"), "nan"),
    ("p90_s", -0.5, "-0.5"),
    ("p10_s", -1e-3, "-0.001"),
    ("chunk_len", 3.5, "3.5"),
    ("decode_count", 1e300, "1e+300"),
])
def test_malformed_profile_names_file_row_and_column(tmp_path, column, value, needle):
    csv = _profile_with(tmp_path, 5, column, value)
    with pytest.raises(InputError) as exc:
        load_profile(str(csv))
    msg = str(exc.value)
    assert str(csv) in msg and "row 7" in msg and column in msg and needle in msg
    _clean_error(_sim("run", "-n", "2", "--profile", str(csv)), "p.csv", column)


def test_profile_whose_p90_is_below_its_p10_is_refused(tmp_path):
    csv = _profile_with(tmp_path, 3, "p90_s", 1e-9)
    with pytest.raises(InputError, match=r"row 5.*p90_s"):
        load_profile(str(csv))


def test_huge_duration_is_refused_before_allocating():
    proc = _sim("run", "--duration", "1e9", timeout=60)
    _clean_error(proc, "--duration", "--rate")


def test_huge_num_requests_is_refused():
    _clean_error(_sim("run", "-n", "100000000000", timeout=60), "--num-requests")


def test_trace_loader_errors_are_input_errors(tmp_path):
    t = tmp_path / "h.csv"
    t.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(InputError, match="h.csv"):
        load_trace(t)

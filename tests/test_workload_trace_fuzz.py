"""Property tests of the trace loaders: a malformed row is named by its line, and every
row that is not replayed is counted in the notes."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunksim.workloads import TimeUnit, TraceFormat, TraceOptions, load_trace

FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

row = st.tuples(
    st.integers(0, 10_000),  # ms gap to the previous row
    st.integers(0, 50_000),  # prompt tokens (0 = dropped)
    st.integers(0, 4_000),  # output tokens (0 = dropped)
)
BAD_TOKENS = ["abc", "-3", "12.5", "", "1e12", "nan"]
BAD_TIMES = ["yesterday", "", "2023-13-45 99:00:00", "12:00"]


def _azure_lines(rows):
    lines, t_ms = ["TIMESTAMP,ContextTokens,GeneratedTokens"], 0
    for gap, p, o in rows:
        t_ms += gap
        s, ms = divmod(t_ms, 1000)
        m, s = divmod(s, 60)
        h, m = divmod(m, 60)
        lines.append(f"2023-11-16 {h:02d}:{m:02d}:{s:02d}.{ms:03d}0000,{p},{o}")
    return lines


def _kept(rows):
    return sum(1 for _, p, o in rows if p > 0 and o > 0)


@FUZZ
@given(rows=st.lists(row, min_size=1, max_size=40))
def test_azure_rows_read_equals_rows_kept_plus_counted_drops(tmp_path, rows):
    path = tmp_path / "a.csv"
    path.write_text("\n".join(_azure_lines(rows)) + "\n")
    if _kept(rows) == 0:
        with pytest.raises(ValueError, match="no requests"):
            load_trace(path)
        return
    w = load_trace(path)
    dropped = len(rows) - len(w)
    assert len(w) == _kept(rows)
    assert w.params["rows_read"] == len(rows)
    if dropped:
        assert any(f"dropped {dropped} of {len(rows)}" in n for n in w.notes)
    else:
        assert not any("dropped" in n for n in w.notes)


@FUZZ
@given(
    rows=st.lists(row, min_size=1, max_size=30),
    data=st.data(),
)
def test_azure_bad_value_names_file_line_and_value(tmp_path, rows, data):
    lines = _azure_lines(rows)
    i = data.draw(st.integers(1, len(rows)), label="row")
    col = data.draw(st.integers(0, 2), label="column")
    bad = data.draw(st.sampled_from(BAD_TIMES if col == 0 else BAD_TOKENS), label="value")
    cells = lines[i].split(",")
    cells[col] = bad
    lines[i] = ",".join(cells)
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as exc:
        load_trace(path)
    msg = str(exc.value)
    assert "bad.csv" in msg and f"line {i + 1}" in msg
    assert repr(bad) in msg or bad in msg


@FUZZ
@given(rows=st.lists(row, min_size=2, max_size=30), data=st.data())
def test_mooncake_bad_line_is_named(tmp_path, rows, data):
    objs, t = [], 0
    for gap, p, o in rows:
        t += gap
        objs.append({"timestamp": t, "input_length": p, "output_length": o, "hash_ids": [1]})
    lines = [json.dumps(o) for o in objs]
    i = data.draw(st.integers(0, len(lines) - 1), label="row")
    kind = data.draw(st.sampled_from(["json", "missing", "negative", "float"]), label="kind")
    if kind == "json":
        lines[i] = lines[i][:-3]
    elif kind == "missing":
        lines[i] = json.dumps({"timestamp": 1, "input_length": 5})
    elif kind == "negative":
        lines[i] = json.dumps({**objs[i], "output_length": -1})
    else:
        lines[i] = json.dumps({**objs[i], "input_length": 3.5})
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"m\.jsonl: line {i + 1}\b"):
        load_trace(path)


@FUZZ
@given(
    times=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    zeros=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_generic_unsorted_rows_are_all_kept_and_sorted(tmp_path, times, zeros):
    lines = ["t,p,o"] + [
        f"{t},{0 if z else 7},{3}" for t, z in zip(times, zeros[: len(times)], strict=True)
    ]
    path = tmp_path / "g.csv"
    path.write_text("\n".join(lines) + "\n")
    opts = TraceOptions(
        format=TraceFormat.GENERIC,
        time_unit=TimeUnit.MS,
        time_column="t",
        prompt_column="p",
        output_column="o",
    )
    n_zero = sum(zeros[: len(times)])
    if n_zero == len(times):
        with pytest.raises(ValueError):
            load_trace(path, opts)
        return
    w = load_trace(path, opts)
    assert len(w) + n_zero == len(times)
    arr = [r.arrival_s for r in w.requests]
    assert arr == sorted(arr)
    noted = sum(int(m.group(1)) for n in w.notes for m in [re.search(r"dropped (\d+)", n)] if m)
    assert noted == n_zero


def test_ragged_csv_row_is_named(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,4\n"
        "2023-11-16 18:15:47.1,3,4,9\n"
    )
    with pytest.raises(ValueError, match=r"r\.csv.*line 3"):
        load_trace(path)
    short = tmp_path / "s.csv"
    short.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3\n")
    with pytest.raises(ValueError, match=r"s\.csv: line 2: column 'GeneratedTokens'"):
        load_trace(short)

"""Fuzzing the profile and trace loaders: random bytes, wrong types, NaN/inf, negative and
huge numbers, empty files. Each input either loads or raises InputError naming the file;
any other exception (a traceback for the user) fails."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from factories import make_profile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chunksim.core.errors import InputError
from chunksim.latency.profile import REQUIRED_COLUMNS, load_profile
from chunksim.workloads import TimeUnit, TraceFormat, TraceOptions, load_trace

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

ODD_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["", "fast", "nan", "inf", "-inf", "1e400", "-0", "0x10", "None",
                     "true", " ", "3.5", "1e12", "-1", "\u00e9", "\x00"]),
    st.text(max_size=12),
    st.booleans(),
)


def _loads_or_names_the_file(load, path: Path) -> None:
    try:
        load()
    except InputError as exc:
        assert path.name in str(exc), str(exc)


def _cell(v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return str(v).replace("\n", " ").replace(",", ";").replace('"', "'")


# ------------------------------------------------------------------ profiles
def _base_profile(tmp: Path) -> pd.DataFrame:
    prof = make_profile(tmp, name="base", chunks=(0, 16, 64), decodes=(0, 1, 4),
                        kvs=(1, 256), priors=(256,), provenance={"content_sha256": None})
    return pd.read_csv(prof.path)


@FUZZ
@given(data=st.binary(max_size=400))
@example(data=b"")
@example(data=b"\xff\xfe\x00\x80")
@example(data=",".join(REQUIRED_COLUMNS).encode() + b"\n")
def test_profile_from_random_bytes(tmp_path, data):
    path = tmp_path / "rand.csv"
    path.write_bytes(data)
    _loads_or_names_the_file(lambda: load_profile(str(path)), path)


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(REQUIRED_COLUMNS),
                                ODD_VALUES), min_size=1, max_size=4))
@example(edits=[(0, "median_s", "fast")])
@example(edits=[(3, "median_s", float("inf"))])
@example(edits=[(3, "kv_len", -5)])
@example(edits=[(2, "p10_s", float("nan"))])
@example(edits=[(2, "p90_s", -1.0)])
@example(edits=[(1, "decode_count", 2**70)])
def test_profile_with_odd_cells(tmp_path, edits):
    df = _base_profile(tmp_path).astype(object)
    for row, col, value in edits:
        df.loc[row % len(df), col] = _cell(value)
    path = tmp_path / "odd.csv"
    path.write_text(df.to_csv(index=False))
    _loads_or_names_the_file(lambda: load_profile(str(path)), path)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)


@FUZZ
@given(meta=st.one_of(JSON_VALUES, st.fixed_dictionaries({}, optional={
    "model": JSON_VALUES, "step_overhead": JSON_VALUES, "wake_up": JSON_VALUES,
    "content_sha256": JSON_VALUES, "step_overhead_s": JSON_VALUES})), raw=st.booleans())
def test_profile_with_odd_provenance(tmp_path, meta, raw):
    _base_profile(tmp_path)
    csv = tmp_path / "base.csv"
    side = csv.with_suffix(".json")
    if raw:
        side.write_bytes(json.dumps(meta).encode()[::-1])  # reversed: rarely valid JSON
    else:
        side.write_text(json.dumps(meta))
    try:
        load_profile(str(csv))
    except InputError as exc:
        assert "base" in str(exc), str(exc)


# ------------------------------------------------------------------ traces
@FUZZ
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".csv", ".jsonl", ".txt", ""]))
@example(data=b"", suffix=".csv")
@example(data=b"TIMESTAMP,ContextTokens,GeneratedTokens\n", suffix=".csv")
@example(data=b"\x00\xff\xfe\x80abc\n", suffix=".bin")
@example(data=b"{}\n", suffix=".jsonl")
@example(data=b"[1,2]\n", suffix=".jsonl")
def test_trace_from_random_bytes(tmp_path, data, suffix):
    path = tmp_path / f"rand{suffix}"
    path.write_bytes(data)
    _loads_or_names_the_file(lambda: load_trace(path), path)


AZURE_ROW = ["2023-11-16 18:15:46.6805900", "374", "44"]


@FUZZ
@given(cells=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 2), ODD_VALUES),
                      max_size=4), rows=st.integers(0, 6))
def test_azure_trace_with_odd_cells(tmp_path, cells, rows):
    table = [list(AZURE_ROW) for _ in range(rows)]
    for r, c, v in cells:
        if table:
            table[r % len(table)][c] = _cell(v)
    path = tmp_path / "az.csv"
    path.write_text("\n".join(["TIMESTAMP,ContextTokens,GeneratedTokens"]
                              + [",".join(r) for r in table]) + "\n")
    _loads_or_names_the_file(lambda: load_trace(path), path)


@FUZZ
@given(objs=st.lists(st.fixed_dictionaries({}, optional={
    "timestamp": JSON_VALUES, "input_length": JSON_VALUES, "output_length": JSON_VALUES,
    "hash_ids": JSON_VALUES}), min_size=1, max_size=5))
@example(objs=[{"timestamp": 0, "input_length": 1e308, "output_length": 3}])
@example(objs=[{"timestamp": float("inf"), "input_length": 5, "output_length": 3}])
@example(objs=[{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": "x"}])
def test_mooncake_trace_with_odd_values(tmp_path, objs):
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    opts = TraceOptions(format=TraceFormat.MOONCAKE)
    _loads_or_names_the_file(lambda: load_trace(path, opts), path)


@FUZZ
@given(cells=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3), ODD_VALUES),
                      max_size=4), unit=st.sampled_from(list(TimeUnit)))
def test_generic_trace_with_odd_cells(tmp_path, cells, unit):
    table = [["0", "12", "5", "1"], ["1", "30", "2", "0"], ["3", "7", "9", "2"]]
    for r, c, v in cells:
        table[r % len(table)][c] = _cell(v)
    path = tmp_path / "gen.csv"
    path.write_text("\n".join(["t,p,o,prio"] + [",".join(r) for r in table]) + "\n")
    opts = TraceOptions(format=TraceFormat.GENERIC, time_unit=unit, time_column="t",
                        prompt_column="p", output_column="o", priority_column="prio")
    _loads_or_names_the_file(lambda: load_trace(path, opts), path)

"""The pandas-free CSV reader that profiles are read with (`latency.csv_columns`): it types
and parses a table as `pandas.read_csv` does, bit for bit, and names what is malformed."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunksim.latency.csv_columns import CsvError, numeric, read_columns, row_count

_FLOAT_TEXT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(min_value=1e-12, max_value=1e6).map(lambda x: f"{x:.6g}"),
    st.floats(min_value=1e-12, max_value=1e6).map(lambda x: f"{x:.17e}"),
    st.integers(-10**6, 10**6).map(lambda x: f"{x}.0"),
)
_CELLS = {
    "int": st.integers(-2**63, 2**63 - 1).map(str),
    "float": _FLOAT_TEXT,
    "float_na": st.one_of(_FLOAT_TEXT, st.sampled_from(["", "NaN", "nan", "NA", "null"])),
    "word": st.sampled_from(["dense", "decode_attn", "x y", "fixed", "1a", "-"]),
    "bool": st.sampled_from(["True", "False", "true", "FALSE"]),
}


@st.composite
def _tables(draw) -> str:
    kinds = draw(st.lists(st.sampled_from(sorted(_CELLS)), min_size=1, max_size=5))
    rows = draw(st.integers(1, 12))
    cols = [draw(st.lists(_CELLS[k], min_size=rows, max_size=rows)) for k in kinds]
    header = ",".join(f"c{i}" for i in range(len(kinds)))
    lines = [",".join(f'"{c}"' if " " in c else c for c in row) for row in zip(*cols, strict=True)]
    return "\n".join([header, *lines]) + "\n"


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind == "f":
        return b.dtype == a.dtype and np.array_equal(a.view(np.int64), b.view(np.int64))
    if a.dtype.kind in "biu":
        return b.dtype == a.dtype and np.array_equal(a, b)
    return b.dtype == object and [str(x) for x in a] == [str(x) for x in b]


@given(_tables())
def test_a_table_reads_as_pandas_reads_it(text):
    mine = read_columns(text.encode())
    theirs = pd.read_csv(io.StringIO(text))
    assert list(mine) == list(theirs.columns)
    assert row_count(mine) == len(theirs)
    for name, col in mine.items():
        assert _same(theirs[name].to_numpy(), col), (name, theirs[name].tolist(), col)


@given(st.lists(st.one_of(_FLOAT_TEXT, st.sampled_from(["abc", "", "1_0", "NA", "7"])),
                min_size=1, max_size=10))
def test_numeric_coerces_as_pandas_to_numeric(cells):
    col = read_columns(("v\n" + "\n".join(f'"{c}"' for c in cells) + "\n").encode())["v"]
    theirs = pd.to_numeric(pd.Series(col), errors="coerce").to_numpy(dtype=np.float64)
    got = numeric(col)
    assert np.array_equal(np.isnan(got), np.isnan(theirs))
    assert np.array_equal(got[~np.isnan(got)], theirs[~np.isnan(theirs)])


def test_blank_lines_a_bom_and_short_rows():
    cols = read_columns("\ufeffa,b\n\n1,2.5\n3\n".encode())
    assert list(cols) == ["a", "b"] and cols["a"].tolist() == [1, 3]
    assert cols["b"][0] == 2.5 and math.isnan(cols["b"][1])


@pytest.mark.parametrize("text, needle", [
    (b"", "no header"),
    (b"a,b\n1,2,3\n", "line 2 has 3 fields, the header 2"),
])
def test_malformed_tables_are_named(text, needle):
    with pytest.raises(CsvError, match=needle):
        read_columns(text)


@pytest.mark.parametrize("text", [",a,b\n0,1,2\n1,3,4\n", "a,a,b,a\n1,2,3,4\n",
                                  "a,,a\n1,2,3\n"])
def test_empty_and_repeated_header_names_are_named_as_pandas_names_them(text):
    assert list(read_columns(text.encode())) == list(pd.read_csv(io.StringIO(text)).columns)


def test_a_header_alone_is_a_table_of_no_rows():
    cols = read_columns(b"a,b\n")
    assert list(cols) == ["a", "b"] and row_count(cols) == 0

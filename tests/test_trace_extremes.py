"""Extreme but valid trace numbers (timestamps to 1e18 in any unit, token counts to 10^7,
JSON booleans, duplicate rows): every replay either stops with a clear error naming the
file, or runs to finite, non-negative latencies that recompute from its records."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chunksim.sim.run import RunConfig, simulate
from chunksim.workloads import TimeUnit, TraceFormat, TraceOptions, load_trace

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
token = st.one_of(st.integers(1, 64), st.integers(1, 10**7), st.booleans())
rows = st.lists(st.tuples(st.integers(0, 5), token, token), min_size=1, max_size=6)


@SETTINGS
@given(base=st.one_of(st.just(0), st.integers(0, 10**18)), step=st.integers(0, 10**6),
       unit=st.sampled_from(["s", "ms", "us", "ns"]), rows=rows, dup=st.booleans())
def test_extreme_traces_error_clearly_or_run_true(tmp_path, const_profile, base, step, unit,
                                                  rows, dup):
    lines = [{"t": base + k * step, "prompt_tokens": p, "output_tokens": o}
             for k, p, o in rows]
    if dup:
        lines.append(dict(lines[-1]))  # the same request twice
    path = tmp_path / "x.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    opts = TraceOptions(format=TraceFormat.GENERIC, time_column="t", time_unit=TimeUnit(unit))
    try:
        w = load_trace(path, opts)
    except ValueError as exc:  # clearly: one message naming the file
        event("refused")
        assert str(path) in str(exc) and "\n" not in str(exc).strip(), str(exc)
        return
    assert any(isinstance(v, bool) for x in lines for v in x.values()) is False
    event("replayed")
    result, summary = simulate(w, const_profile, RunConfig(policy="budget", chunk=256))
    req = result.requests
    assert summary["completed"] + summary["rejected"] == len(w) == len(req)
    done = req[~req["rejected"].to_numpy()]
    ttft = (done["first_token_s"] - done["arrival_s"]).to_numpy()
    e2el = (done["finish_s"] - done["arrival_s"]).to_numpy()
    assert np.isfinite(ttft).all() and np.isfinite(e2el).all()
    assert (ttft >= 0).all() and (e2el >= ttft).all()
    if len(done):
        assert math.isclose(summary["mean_ttft_ms"], ttft.mean() * 1000, rel_tol=1e-9,
                            abs_tol=1e-9)
        assert math.isclose(summary["mean_e2el_ms"], e2el.mean() * 1000, rel_tol=1e-9,
                            abs_tol=1e-9)
        assert summary["duration"] <= 30 * 86400 + e2el.max()

"""Trace loaders: the shipped samples always, the full /work/shared traces when present."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from chunksim.workloads import (
    TimeUnit,
    TraceFormat,
    TraceOptions,
    WorkloadOptions,
    build_workload,
    describe_workload,
    load_trace,
    sample_path,
)
from chunksim.workloads.traces.load import detect_format

SHARED = Path("/work/shared/traces")
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="full traces not present")


def _arrivals(w):
    return np.array([r.arrival_s for r in w.requests])


def _cv(w):
    g = np.diff(_arrivals(w))
    return g.std() / g.mean()


# ---- full traces: the numbers their READMEs state ----


@needs_shared
def test_azure_conv_full_matches_readme_and_loads_fast():
    path = SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    t0 = time.perf_counter()
    w = load_trace(path)
    elapsed_s = time.perf_counter() - t0
    s = describe_workload(w)
    assert s["num_requests"] == 19_366
    assert s["duration_s"] == pytest.approx(3502, abs=1)
    assert s["mean_rate_per_s"] == pytest.approx(5.53, abs=0.01)
    assert s["prompt_tokens_mean"] == pytest.approx(1155, abs=1)
    assert s["output_tokens_mean"] == pytest.approx(211, abs=1)
    assert s["prompt_tokens_p50"] == 1020 and s["prompt_tokens_max"] == 14_050
    assert s["interarrival_cv"] == pytest.approx(1.09, abs=0.01)
    assert w.requests[0].arrival_s == 0.0
    # 100 ns timestamps survive: 18:15:46.6805900 -> 18:15:50.9951690
    assert w.requests[1].arrival_s == pytest.approx(4.314579, abs=1e-7)
    assert elapsed_s < 1.0, f"load took {elapsed_s:.2f} s"


@needs_shared
def test_azure_code_full_is_bursty():
    s = describe_workload(load_trace(SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"))
    assert s["num_requests"] == 8_819 and s["duration_s"] == pytest.approx(3436, abs=1)
    assert s["prompt_tokens_mean"] == pytest.approx(2048, abs=1)
    assert s["output_tokens_mean"] == pytest.approx(27.9, abs=0.1)
    assert s["interarrival_cv"] == pytest.approx(13.2, abs=0.1)


@pytest.mark.slow
@needs_shared
def test_mooncake_conversation_full():
    path = SHARED / "mooncake_fast25" / "conversation_trace.jsonl"
    w = load_trace(path)
    s = describe_workload(w)
    assert s["num_requests"] == 12_031 and s["duration_s"] == pytest.approx(3537, abs=1)
    assert s["prompt_tokens_mean"] == pytest.approx(12_035, abs=1)
    assert s["output_tokens_mean"] == pytest.approx(343, abs=1)
    assert w.prefix_block_tokens == 512
    assert s["prefix_reuse_fraction"] == pytest.approx(0.366, abs=0.001)
    assert s["unique_prefix_blocks"] == 182_790
    assert any("quantized" in n for n in w.notes)
    jit = load_trace(path, TraceOptions(jitter_ticks=True, seed=1))
    assert _cv(jit) == pytest.approx(1.0, abs=0.1)  # the README: close to Poisson once spread
    assert [r.prefix_hashes for r in jit.requests] == [r.prefix_hashes for r in w.requests]
    assert any("jittered" in n for n in jit.notes)


@needs_shared
def test_mooncake_synthetic_full():
    s = describe_workload(load_trace(SHARED / "mooncake_fast25" / "synthetic_trace.jsonl"))
    assert s["num_requests"] == 3_993 and s["duration_s"] == pytest.approx(1022, abs=1)
    assert s["prompt_tokens_mean"] == pytest.approx(15_325, abs=1)
    assert s["prefix_reuse_fraction"] == pytest.approx(0.640, abs=0.001)
    assert s["unique_prefix_blocks"] == 43_924
    assert s["interarrival_cv"] == pytest.approx(1.01, abs=0.01)


@needs_shared
def test_sharegpt_lengths_as_empirical_distribution():
    from chunksim.workloads import LengthKind

    path = SHARED / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    opts = WorkloadOptions(
        prompt_dist=LengthKind.EMPIRICAL,
        output_dist=LengthKind.EMPIRICAL,
        lengths_csv=path,
        num_requests=20_000,
    )
    s = describe_workload(build_workload(opts))
    assert s["prompt_tokens_mean"] == pytest.approx(2340, rel=0.03)
    assert s["output_tokens_mean"] == pytest.approx(439, rel=0.03)


# ---- shipped samples: always ----


@pytest.mark.parametrize(
    "name, fmt, rows, kept",
    [
        ("azure-conv", "azure", 300, 300),
        ("azure-code", "azure", 300, 300),
        ("mooncake-conversation", "mooncake", 300, 300),
        ("mooncake-synthetic", "mooncake", 300, 300),
        ("burstgpt-v1", "burstgpt", 400, 384),
        ("burstgpt-v3", "burstgpt", 400, 384),
    ],
)
def test_samples_load_with_every_row_accounted(name, fmt, rows, kept):
    path = sample_path(name)
    assert detect_format(path).value == fmt
    w = load_trace(path)
    assert len(w) == kept and w.params["rows_read"] == rows and w.params["format"] == fmt
    assert w.requests[0].arrival_s == 0.0
    assert w.notes[0].startswith(f"read {rows} rows")
    if kept < rows:
        assert any(f"dropped {rows - kept} of {rows}" in n for n in w.notes)


def test_azure_sample_first_gap_and_lengths():
    w = load_trace(sample_path("azure-conv"))
    assert (w.requests[0].prompt_tokens, w.requests[0].output_tokens) == (374, 44)
    assert w.requests[1].arrival_s == pytest.approx(4.314579, abs=1e-7)


def test_azure_2024_layout_with_zone_and_mixed_precision(tmp_path):
    src = sample_path("azure-conv").read_text().splitlines()
    out = [src[0]]
    prev_whole = ""
    for line in src[1:]:
        ts, p, o = line.split(",")
        day, clock = ts.split(" ")
        whole, frac = clock.split(".")
        frac = frac[:6].rstrip("0")  # 2024 style: microseconds, trailing zeros dropped
        if whole > prev_whole:
            frac = ""  # first row of each second: no fraction at all (order unchanged)
        prev_whole = whole
        clock = f"{whole}.{frac}" if frac else whole
        out.append(f"2024-05-10 {clock}+00:00,{p},{o}")
    path = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv"
    path.write_text("\n".join(out) + "\n")
    w24 = load_trace(path)
    w23 = load_trace(sample_path("azure-conv"))
    assert len(w24) == len(w23)
    assert np.allclose(_arrivals(w24), _arrivals(w23), atol=1.0)  # fractions were cut
    assert [r.prompt_tokens for r in w24.requests] == [r.prompt_tokens for r in w23.requests]


def test_burstgpt_v1_and_v3_read_by_header_agree():
    v1, v3 = load_trace(sample_path("burstgpt-v1")), load_trace(sample_path("burstgpt-v3"))
    assert [r.prompt_tokens for r in v1.requests] == [r.prompt_tokens for r in v3.requests]
    assert [r.request_class for r in v1.requests] == [r.request_class for r in v3.requests]
    assert set(r.request_class for r in v1.requests) == {"conversation", "api"}
    assert np.allclose(_arrivals(v1), _arrivals(v3), atol=1.0)  # v1 rounds to whole seconds


def test_burstgpt_model_filter_counts_rows():
    w = load_trace(sample_path("burstgpt-v3"), TraceOptions(model="GPT-4"))
    assert any("with Model == 'GPT-4'" in n for n in w.notes)
    all_rows = load_trace(sample_path("burstgpt-v3"))
    assert 0 < len(w) < len(all_rows)
    with pytest.raises(ValueError, match="models present"):
        load_trace(sample_path("burstgpt-v3"), TraceOptions(model="GPT-5"))


def test_mooncake_sample_hashes_and_jitter():
    path = sample_path("mooncake-conversation")
    w = load_trace(path)
    assert w.prefix_block_tokens == 512
    assert all(len(r.prefix_hashes) == -(-r.prompt_tokens // 512) for r in w.requests)
    a = load_trace(path, TraceOptions(jitter_ticks=True, seed=3))
    b = load_trace(path, TraceOptions(jitter_ticks=True, seed=3))
    c = load_trace(path, TraceOptions(jitter_ticks=True, seed=4))
    assert a == b and a != c
    orig = _arrivals(w)
    ticks = np.unique(orig)
    for r, t0 in zip(a.requests, orig, strict=True):  # stays inside its own tick
        nxt = ticks[np.searchsorted(ticks, t0) + 1] if t0 < ticks[-1] else t0 + 3.0
        assert t0 <= r.arrival_s < nxt
    assert [r.prefix_hashes for r in a.requests] == [r.prefix_hashes for r in w.requests]


def test_window_speedup_and_rate():
    path = sample_path("azure-conv")
    full = load_trace(path)
    win = load_trace(path, TraceOptions(start_s=10, duration_s=30))
    t_full = _arrivals(full)
    expected = int(((t_full >= 10) & (t_full < 40)).sum())
    assert len(win) == expected and 0 <= win.requests[0].arrival_s < 1
    assert win.requests[-1].arrival_s < 30
    capped = load_trace(path, TraceOptions(max_requests=50))
    assert len(capped) == 50 and any("first 50 of 300" in n for n in capped.notes)
    fast = load_trace(path, TraceOptions(speedup=2.0))
    assert fast.duration_s == pytest.approx(full.duration_s / 2)
    for target in (0.5, 3.0, 40.0):
        r = describe_workload(load_trace(path, TraceOptions(rate_per_s=target)))
        assert r["mean_rate_per_s"] == pytest.approx(target)
        assert r["interarrival_cv"] == pytest.approx(_cv(full))
    with pytest.raises(ValueError, match="give one of them"):
        TraceOptions(speedup=2.0, rate_per_s=3.0)
    with pytest.raises(ValueError, match="no request in the window"):
        load_trace(path, TraceOptions(start_s=10_000))


def test_trace_through_workload_options():
    opts = WorkloadOptions(trace=sample_path("azure-code"), rate=5.0, num_requests=100)
    w = build_workload(opts)
    assert len(w) == 100 and describe_workload(w)["mean_rate_per_s"] == pytest.approx(5.0)


def test_unsorted_timestamps_sorted_with_note_or_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,prompt_tokens,output_tokens\n0,5,5\n2,6,6\n1,7,7\n3,8,8\n")
    opts = TraceOptions(format=TraceFormat.GENERIC, time_unit=TimeUnit.S)
    w = load_trace(path, opts)
    assert [r.prompt_tokens for r in w.requests] == [5, 7, 6, 8]
    assert any("sorted 1 out-of-order" in n and "line 4" in n for n in w.notes)
    from dataclasses import replace

    with pytest.raises(ValueError, match=r"t.csv.*line 4.*--strict-order"):
        load_trace(path, replace(opts, strict_order=True))


@pytest.mark.parametrize(
    "unit, values, expected_s",
    [
        (TimeUnit.S, ["10", "10.5", "12"], [0, 0.5, 2]),
        (TimeUnit.MS, ["1000", "1500", "3000"], [0, 0.5, 2]),
        (TimeUnit.US, ["0", "500000", "2000000"], [0, 0.5, 2]),
        (TimeUnit.NS, ["0", "500000000", "2000000000"], [0, 0.5, 2]),
        (
            TimeUnit.DATETIME,
            ["2024-01-01T00:00:00", "2024-01-01T00:00:00.5", "2024-01-01T00:00:02"],
            [0, 0.5, 2],
        ),
    ],
)
def test_generic_csv_time_units(tmp_path, unit, values, expected_s):
    path = tmp_path / "g.csv"
    rows = [f"{v},{i + 1},{i + 2},{'batch' if i else 'chat'},{i}" for i, v in enumerate(values)]
    path.write_text("t,in,out,cls,prio\n" + "\n".join(rows) + "\n")
    opts = TraceOptions(
        format=TraceFormat.GENERIC,
        time_unit=unit,
        time_column="t",
        prompt_column="in",
        output_column="out",
        class_column="cls",
        priority_column="prio",
    )
    w = load_trace(path, opts)
    assert np.allclose(_arrivals(w), expected_s)
    assert [r.request_class for r in w.requests] == ["chat", "batch", "batch"]
    assert [r.priority for r in w.requests] == [0, 1, 2]


def test_generic_jsonl(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(
        '{"ts": 0.0, "p": 10, "o": 3}\n\n'
        '{"ts": 0.25, "p": 20, "o": 0}\n{"ts": 1.0, "p": 5, "o": 1}\n'
    )
    opts = TraceOptions(
        format=TraceFormat.GENERIC,
        time_unit=TimeUnit.S,
        time_column="ts",
        prompt_column="p",
        output_column="o",
    )
    w = load_trace(path, opts)
    assert len(w) == 2 and any("dropped 1 of 3" in n for n in w.notes)


def test_format_errors_name_file_and_columns(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_text("when,a,b\n1,2,3\n")
    with pytest.raises(ValueError, match=r"odd.csv.*\['a', 'b', 'when'\].*--trace-format"):
        load_trace(path)
    with pytest.raises(ValueError, match="--time-unit"):
        load_trace(path, TraceOptions(format=TraceFormat.GENERIC))
    opts = TraceOptions(format=TraceFormat.GENERIC, time_unit=TimeUnit.S, time_column="when")
    with pytest.raises(ValueError, match=r"odd.csv.*'prompt_tokens'.*\['when', 'a', 'b'\]"):
        load_trace(path, opts)
    with pytest.raises(ValueError, match=r"missing.csv does not exist"):
        load_trace(tmp_path / "missing.csv")
    azure_missing = tmp_path / "az.csv"
    azure_missing.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n")
    with pytest.raises(ValueError, match="az.csv.*GeneratedTokens.*columns present"):
        load_trace(azure_missing, TraceOptions(format=TraceFormat.AZURE))

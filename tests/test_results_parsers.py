"""Benchmark results files (`validate.results`): each format read from a file in its
documented schema, arrivals rebuilt as the bench tool draws them, malformed files refused
with one error naming the file and the field."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunksim.core.errors import InputError
from chunksim.validate.arrivals import sglang_schedule, vllm_schedule
from chunksim.validate.results import load_results


def _vllm_doc(n=4, **over):
    doc = {
        "date": "20260101-000000", "endpoint_type": "openai", "backend": "openai",
        "label": None, "model_id": "m", "tokenizer_id": "m", "num_prompts": n,
        "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": 5.0, "completed": n, "failed": 0,
        "input_lens": [100 + 10 * i for i in range(n)],
        "output_lens": [3] * n,
        "ttfts": [0.05 + 0.01 * i for i in range(n)],
        "itls": [[0.02, 0.03]] * n,
        "latencies": [0.05 + 0.01 * i + 0.05 for i in range(n)],
        "start_times": [1000.0 + 0.5 * (n - 1 - i) for i in range(n)],  # sent in reverse
        "errors": [""] * n,
    }
    doc.update(over)
    return doc


def _write(tmp_path, name, doc) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_vllm_recorded_arrivals_sorted_from_zero(tmp_path):
    run = load_results(_write(tmp_path, "r.json", _vllm_doc()))
    assert run.format == "vllm" and run.arrivals.startswith("recorded")
    assert np.allclose(run.arrival_s, [0.0, 0.5, 1.0, 1.5])
    # the last-sent request (index 3) comes first, with its own lengths and times
    assert list(run.prompt_tokens) == [130, 120, 110, 100]
    assert np.allclose(run.ttft_s, [0.08, 0.07, 0.06, 0.05])
    assert np.allclose(run.e2el_s - run.ttft_s, 0.05)
    assert len(run.itl_s) == 4 and np.allclose(run.itl_s[0], [0.02, 0.03])


def test_vllm_without_latencies_takes_ttft_plus_gaps(tmp_path):
    doc = _vllm_doc()
    del doc["latencies"]
    doc["itls"] = [[0.01, 0.02], [0.1, 0.1], [0.0, 0.5], [0.2, 0.3]]
    run = load_results(_write(tmp_path, "r.json", doc))
    by_prompt = dict(zip(run.prompt_tokens.tolist(), run.e2el_s - run.ttft_s, strict=True))
    assert by_prompt[100] == pytest.approx(0.03) and by_prompt[130] == pytest.approx(0.5)


def test_vllm_failed_requests_are_left_out(tmp_path):
    doc = _vllm_doc(errors=["", "boom", "", ""], output_lens=[3, 0, 3, 3])
    run = load_results(_write(tmp_path, "r.json", doc))
    assert len(run) == 3 and run.failed == 1 and 110 not in run.prompt_tokens


def test_vllm_schedule_is_the_tools_draws(tmp_path):
    """Without start_times the arrivals are the draws `vllm bench serve` makes: seeded
    global generator, one gamma interval per request, cumulated, rescaled to N / rate."""
    n, rate, burst, seed = 50, 4.0, 0.5, 7
    doc = _vllm_doc(n, request_rate=rate, burstiness=burst)
    del doc["start_times"]
    run = load_results(_write(tmp_path, "r.json", doc), seed=seed)
    np.random.seed(seed)  # vLLM's own sequence, written out
    delays = [np.random.gamma(shape=burst, scale=1.0 / (rate * burst)) for _ in range(n)]
    cum = np.cumsum(delays)
    cum *= (n / rate) / cum[-1]
    assert np.allclose(run.arrival_s, cum - cum[0])
    assert "seed 7" in run.arrivals and run.arrival_s[-1] > 0


def test_vllm_schedule_closed_forms():
    assert np.allclose(np.diff(vllm_schedule(10, 5.0, math.inf)), 0.2)  # uniform
    assert not vllm_schedule(5, math.inf).any()  # all at once
    t = vllm_schedule(200, 10.0, 1.0, 3)
    assert t[-1] == pytest.approx(20.0) and (np.diff(t) >= 0).all()
    ramp = vllm_schedule(100, math.inf, math.inf, 0, ("linear", 1.0, 10.0))
    assert ramp[0] == pytest.approx(1.0) and np.diff(ramp)[-1] == pytest.approx(0.1)


def test_vllm_concurrency_without_start_times_is_refused(tmp_path):
    doc = _vllm_doc(max_concurrency=8)
    del doc["start_times"]
    with pytest.raises(InputError, match="max-concurrency 8.*cannot be rebuilt"):
        load_results(_write(tmp_path, "r.json", doc))


def test_sglang_jsonl_last_run_and_replayed_random_lengths(tmp_path):
    n, seed = 30, 5
    t, lens = sglang_schedule(n, 3.0, seed, (512, 64, 0.5))
    line = {"backend": "sglang", "dataset_name": "random", "request_rate": 3.0,
            "max_concurrency": None, "random_input_len": 512, "random_output_len": 64,
            "random_range_ratio": 0.5, "mean_e2e_latency_ms": 1.0,
            "input_lens": [int(x) for x in lens], "output_lens": [4] * n,
            "ttfts": [0.1] * n, "itls": [[0.01] * 3] * n, "errors": [""] * n}
    first = dict(line, input_lens=[1] * n)
    p = tmp_path / "sg.jsonl"
    p.write_text(json.dumps(first) + "\n" + json.dumps(line) + "\n")
    run = load_results(str(p), seed=seed)
    assert run.format == "sglang" and list(run.prompt_tokens) == [int(x) for x in lens]
    assert "matched: exact" in run.arrivals
    assert np.allclose(run.arrival_s, t) and run.arrival_s[0] == 0.0
    assert np.allclose(run.e2el_s, 0.13)  # no latencies: TTFT + gaps
    other = load_results(str(p), seed=seed + 1)
    assert "NOT the tool's draws" in other.arrivals
    assert load_results(str(p), seed=seed, run=0).prompt_tokens.tolist() == [1] * n


def test_sglang_schedule_closed_form():
    t, lens = sglang_schedule(4, 2.0, 0)
    rng = np.random.RandomState(0)
    assert lens is None and t[0] == 0.0
    assert np.allclose(np.diff(t), rng.exponential(0.5, size=3))


def test_generic_csv_and_jsonl(tmp_path):
    csv = tmp_path / "g.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms,itl_ms,cached_tokens\n"
                   "1.5,100,3,40,100,30;30,64\n"
                   "0.5,200,1,80,80,,0\n")
    run = load_results(str(csv))
    assert run.format == "generic" and np.allclose(run.arrival_s, [0.0, 1.0])
    assert list(run.prompt_tokens) == [200, 100] and list(run.cached_tokens) == [0, 64]
    assert np.allclose(run.itl_s[1], [0.03, 0.03]) and len(run.itl_s[0]) == 0
    assert np.allclose(run.e2el_s, [0.08, 0.1])
    jl = tmp_path / "g.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in [
        {"arrival_s": 0.0, "prompt_tokens": 5, "output_tokens": 2, "ttft_ms": 10, "e2e_ms": 20,
         "itl_ms": [10]},
        {"arrival_s": 0.2, "prompt_tokens": 6, "output_tokens": 2, "ttft_ms": 11, "e2e_ms": 22,
         "itl_ms": [11]}]))
    run = load_results(str(jl))
    assert run.format == "generic" and np.allclose(run.itl_s[1], [0.011])


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(ttfts=d["ttfts"][:-1]), "ttfts"),
    (lambda d: d.pop("input_lens") and d.pop("ttfts"), "input_lens"),
    (lambda d: d.update(output_lens=[3, 3, 2.5, 3]), "output_lens"),
    (lambda d: d.update(itls=[[0.1], "x", [0.1], [0.1]]), "itls"),
    (lambda d: d.update(ttfts=[0.1, -1, 0.1, 0.1]), "ttfts"),
    (lambda d: d.update(latencies=[0.01, 1, 1, 1], ttfts=[0.1] * 4), "latencies"),
    (lambda d: d.update(start_times="soon"), "start_times"),
    (lambda d: d.update(errors=["x"] * 4), "errors"),
])
def test_malformed_vllm_names_file_and_field(tmp_path, mutate, field):
    doc = _vllm_doc()
    mutate(doc)
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(InputError) as exc:
        load_results(path)
    msg = str(exc.value)
    assert path in msg and f"'{field}'" in msg and "\n" not in msg


@pytest.mark.parametrize("text, needle", [
    ("arrival_s,prompt_tokens,output_tokens,ttft_ms\n0,1,1,5\n", "'e2e_ms'"),
    ("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,1,1,5,x\n", "row 2: field 'e2e_ms'"),
    ("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,0,1,5,9\n",
     "row 2: field 'prompt_tokens'"),
    ("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,1,1,5,4\n", "row 2: field 'e2e_ms'"),
    ("arrival_s,prompt_tokens,output_tokens,ttft_ms,e2e_ms,itl_ms\n0,1,2,5,9,a b\n",
     "row 2: field 'itl_ms'"),
])
def test_malformed_generic_names_file_row_and_field(tmp_path, text, needle):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputError, match=needle) as exc:
        load_results(str(p))
    assert str(p) in str(exc.value)


def test_not_json_and_summary_only(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match=f"{p} line 1 is not JSON"):
        load_results(str(p))
    doc = {k: v for k, v in _vllm_doc().items() if k not in (
        "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")}
    doc["request_throughput"] = 1.0
    with pytest.raises(InputError, match="'input_lens' is missing.*--save-detailed"):
        load_results(_write(tmp_path, "s.json", doc))


def test_shipped_example_results_parse_and_say_made_up():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "examples" / "data" / "results"
    names = sorted(p.name for p in root.glob("made_up_*.json"))
    assert names == ["made_up_high.json", "made_up_low.json", "made_up_mid.json"]
    for name in names:
        doc = json.loads((root / name).read_text())
        assert doc["label"].startswith("MADE UP")
        run = load_results(root / name)
        assert run.format == "vllm" and len(run) == 80 and run.arrivals.startswith("recorded")


# ---------------------------------------------------- plausibility, as the trace reader
@pytest.mark.parametrize("mutate, needle", [
    # a clock spanning 1e300 s (TTFT rounds to 0 there)
    (lambda d: d["start_times"].__setitem__(2, 1e300), r"'start_times': the requests span "
                                                       r"1e\+300 s .*request 2"),
    # a nanosecond epoch read as seconds: the float cannot resolve a millisecond
    (lambda d: d.update(start_times=[1.7e18 + k * 1e5 for k in range(4)]),
     r"request \d: field 'start_times' = 1\.7e\+18: at that size a time is only known"),
    # booleans and strings where numbers belong
    (lambda d: d["output_lens"].__setitem__(1, True),
     "request 1: field 'output_lens' = true is a boolean, not a number"),
    (lambda d: d["ttfts"].__setitem__(3, "0.05"),
     "request 3: field 'ttfts' = '0.05' is a string, not a number"),
    (lambda d: d["itls"].__setitem__(0, [0.02, False]),
     "request 0: field 'itls' = false is a boolean, not a gap in s"),
    # more gaps than output tokens allow
    (lambda d: d["itls"].__setitem__(2, [0.01] * 5),
     "request 2: field 'itls' holds 5 token gaps, more than its 3 output tokens can have"),
    # gaps that add up past E2E
    (lambda d: d["itls"].__setitem__(1, [0.5, 0.5]),
     r"request 1: field 'itls': TTFT plus its gaps 1\.06 s exceeds its E2E 0\.11 s"),
    # negative TTFT: shown plainly, never as np.float64(-0.05)
    (lambda d: d["ttfts"].__setitem__(0, -0.05), r"request 0: field 'ttfts' = -0\.05 s is not"),
    (lambda d: d["latencies"].__setitem__(0, 1e12), r"request 0: field 'latencies' = 1e\+12 s"),
])
def test_impossible_values_are_refused_naming_request_and_field(tmp_path, mutate, needle):
    doc = _vllm_doc()
    mutate(doc)
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(InputError, match=needle) as exc:
        load_results(path)
    msg = str(exc.value)
    assert path in msg and "\n" not in msg and "np." not in msg


@pytest.mark.parametrize("row, needle", [
    ('{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 2, "ttft_ms": 5, "e2e_ms": 9}',
     "row 1: field 'prompt_tokens' = true is a boolean"),
    ('{"arrival_s": "0", "prompt_tokens": 5, "output_tokens": 2, "ttft_ms": 5, "e2e_ms": 9}',
     "row 1: field 'arrival_s' = '0' is a string"),
    ('{"arrival_s": 1e300, "prompt_tokens": 5, "output_tokens": 2, "ttft_ms": 5, "e2e_ms": 9}',
     r"'arrival_s': the requests span 1e\+300 s .*row 2 to row 1.*stray value at row 1"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2, "ttft_ms": 5, "e2e_ms": 9, '
     '"itl_ms": [1, 1]}', "row 1: field 'itl_ms' holds 2 token gaps, more than its 2 output "
                          r"tokens can have \(1: one per token after the first\)"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3, "ttft_ms": 5, "e2e_ms": 9, '
     '"itl_ms": [3, 3]}', r"row 1: field 'itl_ms': TTFT plus its gaps 11 ms exceeds its E2E 9"),
])
def test_generic_jsonl_is_as_strict(tmp_path, row, needle):
    ok = ('{"arrival_s": 0.5, "prompt_tokens": 5, "output_tokens": 2, "ttft_ms": 5, '
          '"e2e_ms": 9' + (', "itl_ms": [4]}' if "itl_ms" in row else "}"))
    p = tmp_path / "g.jsonl"
    p.write_text(row + "\n" + ok + "\n")
    with pytest.raises(InputError, match=needle) as exc:
        load_results(str(p))
    assert str(p) in str(exc.value)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 6), st.floats(0.001, 0.2), st.integers(0, 8),
                          st.floats(0.0, 0.05)), min_size=1, max_size=12))
def test_gap_rules_match_their_definition(rows):
    """A request passes exactly when its gaps are at most output - 1 and TTFT + their sum
    is within the slack of its E2E (the rule written out per request); the count is
    checked over every request before the sum, so the first count fault is named first."""
    import tempfile
    from pathlib import Path

    n = len(rows)
    out = [r[0] for r in rows]
    ttft = [r[1] for r in rows]
    gaps = [[r[3]] * r[2] for r in rows]
    e2e = [t + 0.1 for t in ttft]
    doc = _vllm_doc(n, output_lens=out, ttfts=ttft, itls=gaps, latencies=e2e,
                    input_lens=[10] * n, start_times=[float(k) for k in range(n)])
    many = [len(g) > o - 1 for o, g in zip(out, gaps, strict=True)]
    late = [t + sum(g) > e * (1 + 1e-3) + 1e-3 for t, g, e in zip(ttft, gaps, e2e, strict=True)]
    first = many.index(True) if any(many) else late.index(True) if any(late) else None
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "r.json")
        Path(path).write_text(json.dumps(doc))
        if first is not None:
            with pytest.raises(InputError, match=f"request {first}: field 'itls'"):
                load_results(path)
        else:
            assert len(load_results(path)) == n


def test_large_file_reads_and_says_so(tmp_path):
    """A file past PROGRESS_BYTES says it is being read, and how many requests and gaps
    it read; the gaps come back per request, in arrival order."""
    from chunksim.validate import results

    n = 1000  # ~3 MiB
    doc = _vllm_doc(n, output_lens=[400] * n, itls=[[0.001] * 399] * n,
                    latencies=[0.5] * n, ttfts=[0.05] * n)
    path = _write(tmp_path, "big.json", doc)
    lines = []
    old = results.PROGRESS_BYTES
    results.PROGRESS_BYTES = 1 << 20
    try:
        run = load_results(path, progress=lines.append)
    finally:
        results.PROGRESS_BYTES = old
    assert len(run) == n and sum(len(g) for g in run.itl_s) == n * 399
    assert lines[0].startswith("reading big.json (") and "MiB" in lines[0]
    assert lines[1].startswith(f"read {n:,} requests ({n * 399:,} token gaps) from big.json")
    assert load_results(path, progress=lines.append) and len(lines) == 2  # small: silent

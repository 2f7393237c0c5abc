"""Benchmark results files (`validate.results`): each format read from a file in its
documented schema, arrivals rebuilt as the bench tool draws them, malformed files refused
with one error naming the file and the field."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

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

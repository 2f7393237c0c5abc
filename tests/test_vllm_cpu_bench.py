"""benchmarks/vllm_cpu.py's own parts on synthetic server logs: reading steps and
arrivals from the log, the step-by-step comparison, and the step-clock replay that puts
each request at the simulated step matching the engine step that first saw it."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("vllm_cpu_bench",
                                               ROOT / "benchmarks" / "vllm_cpu.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # dataclasses look their module up
_spec.loader.exec_module(bench)


def it(t: float, i: int, ctx: int, gen: int, ms: float) -> str:
    return (f"{t:.6f} INFO Engine 000: Iteration({i}): {1 if ctx else 0} context requests, "
            f"{ctx} context tokens, {gen} generation requests, {gen} generation tokens, "
            f"iteration elapsed time: {ms:.2f} ms, CPU KV cache usage: 0.1%")


def received(t: float, rid: str, out: int) -> str:
    return (f"{t:.6f} INFO Received request {rid}: params: SamplingParams(n=1, "
            f"max_tokens={out}, min_tokens=0), lora_request: None.")


def added(t: float, rid: str) -> str:
    return f"{t:.6f} INFO Added request {rid}-bdb656c3."


def test_compare_steps_counts_same_steps_and_names_the_first_difference():
    e = [(256, 0), (100, 2), (0, 3), (0, 3)]
    assert bench.compare_steps(e, list(e))["same_pct"] == 100.0
    assert bench.compare_steps(e, list(e))["first_difference"] is None
    r = bench.compare_steps(e, [(256, 0), (99, 2), (0, 3)])
    assert r["same"] == 2 and r["same_pct"] == 50.0
    assert r["first_difference"] == {"step": 1, "engine": [100, 2], "sim": [99, 2]}
    r = bench.compare_steps(e, [(256, 0), (100, 2), (0, 3)])
    assert r["first_difference"] == {"step": 3, "engine": [0, 3], "sim": None}


def test_step_spans_are_bounded_by_the_next_steps_elapsed_time():
    # 10 ms steps logged 0.5 ms after they end (the engine's own work around a step),
    # but step 4 is logged late, together with step 5: it ended by step 5's start
    logged = [1.0, 1.0105, 1.021, 1.0315, 1.060, 1.0601]
    spans = bench.step_spans(logged, [0.01] * 6)
    ends = [e for _, e in spans]
    assert ends == pytest.approx([1.0, 1.0105, 1.021, 1.0315, 1.0496, 1.0601])
    assert all(e - s == pytest.approx(0.0105) for s, e in spans)  # elapsed + host
    assert all(e0 <= s1 + 1e-12 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))


def test_arrivals_are_the_engine_steps_that_first_see_each_request():
    rows = [{"output_length": 3}, {"output_length": 9}, {"output_length": 33},
            {"output_length": 12}]
    log = "\n".join([
        received(0.990, "cmpl-a-1-0", 9), added(0.995, "cmpl-a-1-0"),  # wakes step 0
        it(1.010, 0, 100, 0, 10), it(1.020, 1, 0, 1, 8),
        received(1.021, "cmpl-a-0-0", 3), added(1.0215, "cmpl-a-0-0"),  # busy: step 3
        it(1.040, 2, 0, 1, 9), it(1.041, 3, 64, 1, 1),  # logged late
    ] + [it(1.042 + i / 1e3, 4 + i, 0, 1, 0.5) for i in range(5)] + [
        it(1.051, 9, 0, 1, 0.5), it(1.052, 10, 0, 1, 0.5),  # all decoded by step 10
        received(1.060, "cmpl-a-2-0", 33), received(1.0601, "cmpl-a-3-0", 12),
        added(1.061, "cmpl-a-2-0"), added(1.06105, "cmpl-a-3-0"),  # idle: step 11
        it(1.080, 11, 150, 0, 15),
    ])
    steps, spans = bench.engine_steps(log)
    assert len(steps) == 12 and steps[3] == (64, 1)
    assert sum(d for _, d in steps[:11]) == (9 - 1) + (3 - 1)  # decodes owed: all made
    got = bench.engine_arrivals(log, rows, steps, spans)
    assert got == [(1, 0), (0, 3), (2, 11), (3, 11)]
    # a second request added 0.2 ms after the one that woke the engine misses its step
    late = log.replace("1.061050 INFO Added request cmpl-a-3-0",
                       "1.061200 INFO Added request cmpl-a-3-0")
    assert bench.engine_arrivals(late, rows, steps, spans)[3] == (3, 12)
    # paused: every request before the first step, in the order added
    assert bench.engine_arrivals(log, rows, steps, spans, paused=True) == [
        (1, 0), (0, 0), (2, 0), (3, 0)]


def test_the_step_clock_replay_shows_a_request_at_its_engine_step(tmp_path):
    """Three requests: two at step 0, one first seen by engine step 7. In the replay
    the third's first prefill is at step 7 exactly, whatever the steps' real lengths."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        '{"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, '
        '"num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 490, '
        '"max_position_embeddings": 4096}')
    rows = [{"input_length": 300, "output_length": 20, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
            {"input_length": 90, "output_length": 30, "hash_ids": [1, 2, 13]},
            {"input_length": 70, "output_length": 12, "hash_ids": [21, 22, 23]}]
    trace = tmp_path / "t.csv"
    bench.sim_trace(trace, rows, [(0, 0), (1, 0), (2, 7)])
    clock = tmp_path / "clock.csv"
    bench.clock_profile(clock, model)
    engine = bench.Engine(max_num_seqs=8, max_num_batched_tokens=128)
    steps = bench.sim_steps(tmp_path, "t", trace, clock, engine, kv_blocks=1000)
    prefills = [k for k, (c, _) in enumerate(steps) if c]
    # 390 prompt tokens (64 of request 1's 90 are request 0's cached prefix... which it
    # may not hit yet, as request 0 is mid-prefill) fill steps 0..3 at 128 a step
    assert prefills[0] == 0 and 7 in prefills
    assert steps[7][0] == 70 and steps[6][0] == 0  # request 2 alone, at step 7, whole
    assert sum(c for c, _ in steps) <= 300 + 90 + 70
    assert sum(d for _, d in steps) == 20 + 30 + 12 - 3  # the first token comes with prefill


def test_intake_counts_each_request_from_the_quickest_handover(tmp_path):
    rows = [{"output_length": 9}, {"output_length": 3}]
    log = "\n".join([received(100.010, "cmpl-b-0-0", 9), added(100.012, "cmpl-b-0-0"),
                     received(100.030, "cmpl-b-1-0", 3), added(100.062, "cmpl-b-1-0")])
    result = tmp_path / "r.json"
    result.write_text('{"start_times": [5.000, 5.020]}')  # the bench's own clock
    got = bench.intake_ms(log, rows, result)
    assert got["max"] == pytest.approx(30.0) and got["mean"] == pytest.approx(15.0)


def test_wall_over_elapsed_counts_busy_stretches_only():
    # three 10 ms steps 12 ms apart, an idle second, two more 12 ms apart
    log = "\n".join([it(1.000, 0, 64, 0, 10), it(1.012, 1, 0, 1, 10), it(1.024, 2, 0, 1, 10),
                     it(2.024, 3, 64, 0, 10), it(2.036, 4, 0, 1, 10)])
    assert bench.wall_over_elapsed(log) == pytest.approx((0.010 + 0.012 * 3 + 0.010) / 0.05)

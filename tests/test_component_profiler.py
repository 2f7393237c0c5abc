"""`sim profile --kind components`: axes, tensor-parallel shapes, the all-reduce model, and
a small end-to-end run whose profile `sim run` loads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from factories import SMALL, workload
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.decoder.config import preset_config, shard_config
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.profiler.collective import LINKS, allreduce_s, layer_allreduce_s, link_settings
from chunksim.profiler.component_grid import ComponentGrid, decode_lengths, dense_tokens
from chunksim.sim.run import RunConfig, simulate

try:
    import torch

    from chunksim.profiler.component_run import ComponentSettings, run_components
    from chunksim.profiler.components import LayerBench
except ImportError:  # the tests that use them are marked `torch`, skipped without it
    torch = None


def test_dense_axis_is_every_16_to_512_then_geometric():
    t = dense_tokens(4096)
    assert t[:3] == (1, 16, 32) and set(range(16, 513, 16)) <= set(t)
    above = [x for x in t if x > 512]
    assert above[-1] == 4096
    ratios = [b / a for a, b in zip([512, *above], above, strict=False)]
    assert all(1.3 < r < 1.5 for r in ratios[:-1])


@pytest.mark.parametrize("count,mean,spread", [(8, 256, 2.0), (3, 100, 1.5), (64, 16, 3.0),
                                               (1, 50, 1.0), (4, 1024, 1.0)])
def test_decode_lengths_keep_the_mean_and_set_the_longest(count, mean, spread):
    lens = decode_lengths(count, mean, spread)
    assert len(lens) == count and sum(lens) == mean * count
    assert max(lens) == round(spread * mean) and min(lens) >= 1


def test_decode_lengths_refuse_a_spread_the_count_cannot_reach():
    assert decode_lengths(2, 16, 3.0) is None  # the other would need -16 tokens
    assert decode_lengths(1, 16, 2.0) is None


def test_tp_shards_heads_kv_heads_intermediate_and_vocab():
    cfg = preset_config("llama-3.1-70b")
    s = shard_config(cfg, 4)
    assert (s.n_heads, s.n_kv_heads, s.intermediate_size, s.vocab_size) == (
        16, 2, 7168, 32064)
    assert (s.hidden_size, s.head_dim, s.n_layers) == (8192, 128, 80)
    assert shard_config(cfg, 16).n_kv_heads == 1  # fewer KV heads than shards: replicated
    with pytest.raises(ValueError, match="--tp 3"):
        shard_config(cfg, 3)


@pytest.mark.torch
def test_a_sharded_layer_runs_at_the_sharded_shapes():
    cfg = shard_config(preset_config("llama-3.1-70b-mini"), 4)
    timing = {"warmup": 0, "repeats": 1, "point_budget_s": 1.0, "point_min_s": 0.0,
              "clock": __import__("time").perf_counter}
    with torch.inference_mode():
        bench = LayerBench(cfg, "cpu", torch.float32, 0, lambda: None, timing)
        b = bench.block
        hd = cfg.head_dim
        assert tuple(b.wq.weight.shape) == (64 // 4 * hd, 512)
        assert tuple(b.wk.weight.shape) == (8 // 4 * hd, 512)
        assert tuple(b.gate.weight.shape) == (1792 // 4, 512)
        assert tuple(b.down.weight.shape) == (512, 1792 // 4)
        assert tuple(bench.model.head_weight().shape) == (8192 // 4, 512)
        assert len(bench.model.layers) == 1
        assert bench.decode_attn([10, 30, 20]).median_s > 0


def test_allreduce_formula_and_presets():
    assert allreduce_s(0, 8, 3600, 8.0) == pytest.approx(8e-6)
    # 1 GB over 4 devices at 800 Gbit/s: 2 * 3/4 * 8e9 / 8e11 = 15 ms, plus 10 us
    assert allreduce_s(1e9, 4, 800, 10.0) == pytest.approx(0.015 + 1e-5)
    link = link_settings(4, "pcie", None, None)
    assert (link["gbps"], link["latency_us"]) == LINKS["pcie"]
    assert link_settings(4, None, 100.0, 3.0)["gbps"] == 100.0
    assert layer_allreduce_s(10, 8192, 2, 4, link) == pytest.approx(
        2 * allreduce_s(10 * 8192 * 2, 4, *LINKS["pcie"]))
    with pytest.raises(ValueError, match="--link-gbps"):
        link_settings(1, None, 100.0, None)
    with pytest.raises(ValueError, match="--link 'ib'"):
        link_settings(2, "ib", None, None)


MICRO = ComponentGrid(preset="micro", max_tokens=96, chunk_len=(1, 16, 64),
                      prior_len=(0, 64), decode_count=(1, 2, 4), kv_len=(16, 64),
                      spreads=(1.0, 1.5), logits=(0, 1, 4), warmup=1, repeats=3,
                      point_min_s=0.0, calibration_steps=6, sequence_rounds=2)


def _micro(tmp_path: Path, model=SMALL, **kw) -> ComponentSettings:
    model = replace(model, max_position=min(model.max_position, 2048))
    return ComponentSettings(model=model, device="cpu", dtype="float32", grid=MICRO,
                             out_csv=tmp_path / "c.csv", threads=1, live_costs=False,
                             clock="thread-cpu", **kw)


@pytest.fixture(scope="module")
def micro_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("micro")
    run_components(_micro(tmp), show_progress=False)
    return load_profile(str(tmp / "c.csv"))


@pytest.mark.torch
@pytest.mark.slow  # times a small model
def test_a_component_run_writes_a_profile_sim_run_loads(micro_profile):
    p = micro_profile
    assert p.kind == "components" and p.provenance["format"] == "chunksim-components/1"
    assert set(p.table["component"]) == {"dense", "embed", "prefill_attn", "decode_attn",
                                         "head", "fixed"}
    unequal = p.table[(p.table.component == "decode_attn")
                      & (p.table.kv_max > p.table.kv_len)]
    assert len(unequal) > 0
    cal = p.provenance["calibration"]
    assert cal["steps"] == 6 and {"all", "prefill", "decode", "mixed"} <= set(cal["alone"])
    assert all(s["alone_s"] > 0 and s["in_sequence_s"] > 0 for s in cal["sample"])
    # alone: each step's lower look of two, and their spread is the noise floor
    assert cal["alone_looks"] == 2 and cal["repeatability"]["all"]["steps"] == 6
    assert all(s["alone_s"] == min(s["alone_looks_s"]) and len(s["alone_looks_s"]) == 2
               for s in cal["sample"])
    # the rest of the model: its weights less one layer's
    one, two = (replace(SMALL, n_layers=n, max_position=2048).weights_bytes("float32")
                for n in (1, 2))
    whole = replace(SMALL, max_position=2048).weights_bytes("float32")
    assert p.provenance["components"]["evict_bytes"] == whole - (two - one)
    assert p.provenance["components"]["layers"] == SMALL.n_layers
    _, s = simulate(workload([(0.0, 50, 5), (0.001, 30, 8)]), p,
                    RunConfig(policy="budget", chunk=64, kv_blocks=100))
    assert s["completed"] == 2 and s["profile_kind"] == "components"


@pytest.mark.torch
@pytest.mark.slow  # times a small model
def test_the_calibration_reports_the_models_own_predictions(micro_profile):
    """The stored predictions are what `sim run`'s model prices for those steps."""
    from chunksim.latency.composed import ComponentModel
    from chunksim.profiler.calibration import SampleStep

    lat = latency_model(micro_profile)
    assert isinstance(lat, ComponentModel)
    scale = micro_profile.provenance["components"]["in_sequence_scale"]
    for s in micro_profile.provenance["calibration"]["sample"]:
        chunks, decodes = s["step"]
        step = SampleStep(tuple(tuple(c) for c in chunks), tuple(decodes))
        assert lat.step_s(step.shape())[0] == pytest.approx(s["predicted_s"] * scale,
                                                             rel=1e-12)


@pytest.mark.torch
@pytest.mark.slow  # times a small model
def test_tp_run_adds_two_allreduces_per_layer(tmp_path):
    mini = preset_config("llama-3.1-70b-mini")
    link = link_settings(4, "nvlink-h100", None, None)
    s = replace(_micro(tmp_path, model=mini, tp=4, link=link), calibrate=False)
    run_components(s, show_progress=False)
    p = load_profile(str(tmp_path / "c.csv"))
    ar = p.table[p.table.component == "allreduce"]
    assert len(ar) > 0
    for tokens, t in zip(ar.tokens, ar.median_s, strict=True):
        assert t == pytest.approx(layer_allreduce_s(int(tokens), 512, 4, 4, link))
    assert p.provenance["components"]["shard"] == {"n_heads": 16, "n_kv_heads": 2,
                                                   "intermediate_size": 448,
                                                   "vocab_size": 2048}
    assert " · tp 4" in p.label


def test_cli_refuses_whole_step_flags_with_components(tmp_path):
    res = CliRunner().invoke(app, ["profile", "--kind", "components", "--chunk-lens", "0,64",
                                   "--out", str(tmp_path / "x.csv")])
    assert res.exit_code != 0 and "--chunk-lens" in str(res.exception)
    res = CliRunner().invoke(app, ["profile", "--tp", "2", "--out", str(tmp_path / "x.csv")])
    assert res.exit_code != 0 and "--tp" in str(res.exception)


@pytest.mark.torch
@pytest.mark.slow
def test_cli_profiles_the_70b_mini_at_tp4(tmp_path):
    out = tmp_path / "m.csv"
    res = CliRunner().invoke(app, ["profile", "--kind", "components", "--model",
                                   "llama-3.1-70b-mini", "--tp", "4", "--device", "cpu",
                                   "--grid", "quick", "--warmup", "1", "--repeats", "3",
                                   "--point-budget-s", "0.01", "--no-calibrate", "--quiet",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["components"]["tp"] == 4 and meta["model"]["n_layers"] == 4
    assert "calibration skipped: --no-calibrate" in res.output  # calibrated at tp: below


def test_measure_runs_between_before_every_run_outside_the_clock():
    """`between` (the eviction read) runs before each warm-up and timed run and is never
    timed: a clock that only `fn` advances by 1 and `between` by 100 reads 1 per run."""
    from chunksim.profiler.timing import measure

    now = [0.0]
    log: list[str] = []

    def fn():
        log.append("fn")
        now[0] += 1.0

    def between():
        log.append("between")
        now[0] += 100.0

    t = measure(fn, warmup=2, repeats=4, clock=lambda: now[0], between=between)
    assert t.repeats == 4 and t.median_s == t.p10_s == t.p90_s == 1.0
    assert log == ["between", "fn"] * 6


@pytest.mark.torch
def test_evict_bytes_is_the_rest_of_the_model_capped():
    from chunksim.profiler.components import EVICT_CAP_BYTES, evict_bytes

    assert evict_bytes(3_000, 700) == 2_300
    assert evict_bytes(10 * EVICT_CAP_BYTES, 1_000) == EVICT_CAP_BYTES
    assert evict_bytes(500, 500) == 0


@pytest.mark.torch
def test_a_cold_bench_reads_its_eviction_buffer_before_every_run():
    cfg = preset_config("tiny")
    timing = {"warmup": 1, "repeats": 3, "point_budget_s": 1.0, "point_min_s": 0.0,
              "clock": __import__("time").perf_counter}
    with torch.inference_mode():
        cold = LayerBench(cfg, "cpu", torch.float32, 0, lambda: None, timing, evict=4096)
        assert cold._evict.numel() * 4 == 4096
        reads = []
        cold._cold = lambda: reads.append(1)
        t = cold.dense(16)
        assert len(reads) == 1 + t.repeats
        warm = LayerBench(cfg, "cpu", torch.float32, 0, lambda: None, timing)
        assert warm._evict is None and warm.dense(16).median_s > 0


@pytest.mark.torch
def test_repeatability_is_look_two_against_look_one():
    from chunksim.profiler.calibration import repeatability

    kinds = ["decode", "decode", "prefill"]
    got = repeatability(kinds, [[1.0, 2.0, 4.0], [1.1, 2.0, 3.0]])
    assert got["decode"]["median_abs_error_pct"] == pytest.approx(5.0)
    assert got["prefill"]["median_abs_error_pct"] == pytest.approx(25.0)
    assert got["all"]["steps"] == 3 and "median_error_pct" not in got["all"]
    assert repeatability(kinds, [[1.0, 2.0, 4.0]]) is None


@pytest.mark.torch
def test_a_primed_bench_runs_the_layer_before_after_the_eviction_read():
    """On CPU each layer part runs after the same work on the layer before it (warm code,
    cold weights): evict, then layer 1's closure, then layer 0's timed one."""
    cfg = preset_config("tiny")
    timing = {"warmup": 1, "repeats": 3, "point_budget_s": 1.0, "point_min_s": 0.0,
              "clock": __import__("time").perf_counter}
    with torch.inference_mode():
        bench = LayerBench(cfg, "cpu", torch.float32, 0, lambda: None, timing, evict=4096,
                           prime=True)
        assert len(bench.model.layers) == 2
        log = []
        bench._cold = lambda: log.append("evict")
        layers = bench.model.layers

        def logged(i: int):
            real = layers[i].dense_in

            def dense_in(*a):
                log.append(i)
                return real(*a)
            return dense_in

        for i in (0, 1):
            layers[i].dense_in = logged(i)
        t = bench.dense(16)
        assert log == ["evict", 1, 0] * (1 + t.repeats)
        bench.decode_attn([12, 30])  # attention reads layer 1's KV too: it must exist
        assert bench.pools["decode"].k[1].shape == bench.pools["decode"].k[0].shape
        plain = LayerBench(cfg, "cpu", torch.float32, 0, lambda: None, timing, evict=4096)
        assert len(plain.model.layers) == 1 and plain.dense(16).median_s > 0


def test_link_measured_refuses_formula_flags_and_missing_devices():
    from chunksim.profiler.allreduce_bench import check_devices, measured_tokens

    assert link_settings(2, "measured", None, None)["preset"] == "measured"
    with pytest.raises(ValueError, match="--link-gbps"):
        link_settings(2, "measured", 100.0, None)
    with pytest.raises(ValueError, match="needs 4 CUDA devices; torch sees 1"):
        check_devices("cuda", 4, 1)
    check_devices("cpu", 4, 0)  # gloo: processes, no devices needed
    assert measured_tokens((1, 16, 32, 48, 64, 96, 700)) == (1, 16, 32, 64, 700)


@pytest.mark.torch
@pytest.mark.slow  # spawns two processes
def test_a_measured_link_times_the_allreduce_with_torch_distributed(tmp_path):
    """tp 2 on CPU (gloo): the allreduce rows are two measured all-reduces per layer, and
    the calibration runs one shard's whole model."""
    mini = preset_config("llama-3.1-70b-mini")
    run_components(_micro(tmp_path, model=mini, tp=2,
                          link=link_settings(2, "measured", None, None)),
                   show_progress=False)
    p = load_profile(str(tmp_path / "c.csv"))
    link = p.provenance["components"]["link"]
    assert link["preset"] == "measured" and link["backend"] == "gloo"
    ar = p.table[p.table.component == "allreduce"]
    assert list(ar.tokens) == [int(t) for t in link["allreduce_s"]]
    for tokens, t in zip(ar.tokens, ar.median_s, strict=True):
        assert t == pytest.approx(2 * link["allreduce_s"][str(tokens)]) and t > 0
    assert "allreduce" in p.provenance["phase_s"]
    cal = p.provenance["calibration"]
    assert cal["steps"] == 6 and "tensor-parallel" in cal["note"]

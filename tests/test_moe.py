"""MoE models: configs and KV bytes, the MoE layer, the routed-expert law (tokens per
expert, skew, expert parallelism), the all-to-all, and MoE profiles through the CLI."""

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.decoder.config import PRESETS, load_hf_config, shard_moe
from chunksim.latency.component_table import COLUMNS
from chunksim.latency.composed import ComponentModel
from chunksim.latency.moe import Routing, routed_expert_s
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.profiler.alltoall import alltoall_s, layer_alltoall_s
from chunksim.profiler.collective import link_settings

try:
    import torch
except ImportError:  # the tests that use it are marked `torch`, skipped without it
    torch = None

RUNNER = CliRunner()


# --- configs ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,params_b,kv_bytes", [
    # published totals: Mixtral 46.7 B, Qwen3-30B-A3B 30.5 B, DeepSeek-V3 671 B (no MTP)
    ("mixtral-8x7b", 46.7, 2 * 32 * 8 * 128 * 2),
    ("qwen3-30b-a3b", 30.5, 2 * 48 * 4 * 128 * 2),
    ("deepseek-v3", 671.0, 61 * (512 + 64) * 2),  # MLA: the latent and the RoPE key
])
def test_moe_presets_have_their_published_size_and_kv_bytes(name, params_b, kv_bytes):
    cfg = PRESETS[name]
    assert cfg.n_params() / 1e9 == pytest.approx(params_b, rel=0.01)
    assert cfg.kv_bytes_per_token("bfloat16") == kv_bytes


def test_a_dense_models_entry_and_kv_bytes_are_unchanged():
    cfg = PRESETS["llama-3.1-8b"]
    assert "moe" not in cfg.as_dict() and "mla" not in cfg.as_dict()
    assert cfg.kv_bytes_per_token("bfloat16") == 2 * 32 * 8 * 128 * 2


def test_hf_configs_of_moe_models_load_their_experts_and_latent(tmp_path):
    qwen = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
            "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
            "moe_intermediate_size": 768, "max_position_embeddings": 40960}
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text(json.dumps(qwen))
    cfg = load_hf_config(tmp_path / "q")
    assert replace(cfg, name="qwen3-30b-a3b", rope_theta=1e6, rms_eps=1e-6) == \
        PRESETS["qwen3-30b-a3b"]
    ds = {"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
          "num_key_value_heads": 128, "intermediate_size": 18432, "vocab_size": 129280,
          "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
          "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
          "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
          "v_head_dim": 128}
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(json.dumps(ds))
    cfg = load_hf_config(tmp_path / "d")
    assert cfg.moe == PRESETS["deepseek-v3"].moe and cfg.mla == PRESETS["deepseek-v3"].mla
    assert cfg.kv_bytes_per_token("bfloat16") == 61 * 576 * 2


def test_expert_parallel_shards_and_refusals():
    cfg = PRESETS["qwen3-30b-a3b"]
    tp2 = shard_moe(cfg, 2, 1)  # tensor-parallel experts: each half as wide
    assert tp2.moe.expert_intermediate_size == 384 and tp2.n_heads == 16
    ep2 = shard_moe(cfg, 2, 2)  # whole experts, 64 per device
    assert ep2.moe.expert_intermediate_size == 768 and ep2.n_heads == 16
    with pytest.raises(ValueError, match="--ep 4 with --tp 2"):
        shard_moe(cfg, 2, 4)
    with pytest.raises(ValueError, match="--ep 3 does not divide"):
        shard_moe(cfg, 3, 3)
    with pytest.raises(ValueError, match="has no experts"):
        shard_moe(PRESETS["tiny"], 2, 2)


# --- the MoE layer --------------------------------------------------------------------------

@pytest.mark.torch
def test_the_moe_layer_is_the_weighted_sum_of_each_tokens_top_k_experts():
    from chunksim.decoder.model import build_model

    cfg = replace(PRESETS["tiny-moe"], max_position=256)
    model = build_model(cfg, "cpu", torch.float64, seed=3)
    assert sum(p.numel() for p in model.parameters()) == cfg.n_params()
    moe = model.layers[0].moe
    h = torch.randn(37, cfg.hidden_size, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        got = moe(h)
        weights, ids = moe.route(h)
        want = torch.zeros_like(h)
        for t in range(len(h)):
            for j in range(cfg.moe.top_k):
                e = int(ids[t, j])
                x = h[t:t + 1]
                y = torch.nn.functional.silu(x @ moe.w_gate[e].T) * (x @ moe.w_up[e].T)
                want[t] += weights[t, j] * (y @ moe.w_down[e].T)[0]
        assert torch.allclose(got, want, atol=1e-12)
        assert torch.allclose(weights.sum(-1), torch.ones(len(h), dtype=torch.float64))
        assert not moe(h, routed=False).any()  # no shared experts: nothing but the routed


@pytest.mark.torch
def test_mla_models_are_refused_by_the_torch_decoder():
    from chunksim.decoder.model import build_model

    with pytest.raises(ValueError, match="multi-head latent attention"):
        build_model(replace(PRESETS["deepseek-v3"], n_layers=1), "meta")


# --- the routed-expert law ------------------------------------------------------------------

def _linear(alpha, beta):
    return lambda n: (alpha + beta * n, 0.0, False)


def _uniform_term(tokens, experts, top_k, ep, alpha, beta):
    active = 1 - (1 - top_k / experts) ** tokens
    n = tokens * top_k / (experts * active)
    return experts / ep * active * (alpha + beta * n)


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 20000), experts=st.sampled_from([8, 16, 64, 128, 256]),
       top_k=st.integers(1, 8), ep=st.sampled_from([1, 2, 4, 8]),
       alpha=st.floats(0.0, 1e-4), beta=st.floats(0.0, 1e-6))
def test_uniform_routing_prices_experts_per_device_at_their_mean_load(
        tokens, experts, top_k, ep, alpha, beta):
    r = Routing(experts, min(top_k, experts), ep)
    s, _, _ = routed_expert_s(tokens, r.device_shares(), _linear(alpha, beta))
    assert s == pytest.approx(_uniform_term(tokens, experts, r.top_k, ep, alpha, beta),
                              rel=1e-9, abs=1e-18)


def test_tokens_per_expert_move_the_price_as_the_law_says():
    # one decode: top_k experts of one token each; a long step: every expert, T k / E each
    r = Routing(128, 8, 1)
    seen = []

    def expert(n):
        seen.append(n)
        return 1e-6 * n + 1e-5, 0.0, False

    s, _, _ = routed_expert_s(1, r.device_shares(), expert)
    assert seen[-1] == pytest.approx(1.0) and s == pytest.approx(8 * (1e-6 + 1e-5))
    s, _, _ = routed_expert_s(16384, r.device_shares(), expert)
    assert seen[-1] == pytest.approx(16384 * 8 / 128)
    assert s == pytest.approx(128 * (1e-6 * 1024 + 1e-5))
    # expert parallelism: each device runs num_experts / ep of them
    half, _, _ = routed_expert_s(16384, Routing(128, 8, 2).device_shares(), expert)
    assert half == pytest.approx(s / 2)


def test_skew_concentrates_tokens_and_the_busiest_device_sets_the_time():
    r = Routing(16, 2, 4, skew=1.0)
    p = r.shares()
    assert p.sum() == pytest.approx(2) and np.all(np.diff(p) <= 0) and p.max() <= 1
    assert np.allclose(Routing(16, 2, 4).shares(), 2 / 16)
    dev = r.device_shares()
    assert dev.shape == (4, 4) and dev[0, 0] == p[0] and dev[1, 0] == p[1]
    tokens, alpha, beta = 300, 2e-5, 1e-7

    def device_s(row):
        act = 1 - (1 - row) ** tokens
        return float(np.sum(act * (alpha + beta * tokens * row / act)))

    s, _, _ = routed_expert_s(tokens, dev, _linear(alpha, beta))
    assert s == pytest.approx(device_s(dev[0])) and s == pytest.approx(
        max(device_s(row) for row in dev))
    assert s > _uniform_term(tokens, 16, 2, 4, alpha, beta)  # a hot device waits longer


def test_a_share_above_one_is_held_at_one():
    p = Routing(4, 3, skew=4.0).shares()  # Zipf would give the first expert 2.8 picks
    assert p[0] == 1.0 and p.sum() == pytest.approx(3) and np.all(p <= 1.0)


def test_alltoall_formula():
    link = link_settings(8, "nvlink-h200", None, None)
    # 4096 tokens, 1/8 dispatched by each device, 7/8 of their 8 picks remote, 2048 x 2 B
    nbytes = 4096 / 8 * 8 * 7 / 8 * 2048 * 2
    one = 8e-6 + nbytes * 8 / 3600e9
    assert alltoall_s(4096, 2048, 2, 8, 8, 3600, 8.0) == pytest.approx(one)
    assert layer_alltoall_s(4096, 2048, 2, 8, 8, link) == pytest.approx(2 * one)


# --- MoE component profiles -----------------------------------------------------------------

LAYERS = 4
ALPHA, BETA = 2e-5, 1e-8
"""The synthetic profile's expert(n) = ALPHA + BETA n (linear: interpolation is exact)."""


def _rows(moe: bool, ep: int) -> list[dict]:
    rows = []

    def add(component, median, **keys):
        r = dict.fromkeys(COLUMNS[1:8], 0)
        r.update(keys)
        rows.append({"component": component, **r, "median_s": median, "p10_s": median * 0.9,
                     "p90_s": median * 1.1, "mean_s": median, "repeats": 3})

    grid = (1, 16, 256, 4096, 16384)
    for t in grid:
        add("dense", 1e-5 + 1e-8 * t, tokens=t)
        add("embed", 1e-7, tokens=t)
        if moe:
            add("expert", ALPHA + BETA * t, tokens=t)
        if ep > 1:
            add("allreduce", 5e-6 + 1e-10 * t, tokens=t)
            add("alltoall", 1e-5 + 2e-10 * t, tokens=t)
    for c in (1, 4096, 16384):
        for p in (0, 16384):
            add("prefill_attn", 1e-6 + 1e-12 * c * (p + c), chunk_len=c, prior_len=p)
    for d in (1, 2, 256, 1024):
        for kv in (1, 16384):
            add("decode_attn", 1e-6 + 1e-11 * d * kv, decode_count=d, kv_len=kv, kv_max=kv)
    for n in (0, 1, 1024):
        add("head", 1e-9 * n, logits=n)
    add("fixed", 1e-4)
    return rows


def moe_profile(tmp_path, name="m", experts=8, top_k=2, ep=1, moe=True):
    """A component profile of a LAYERS-layer MoE model with closed-form components."""
    table = pd.DataFrame(_rows(moe, ep), columns=list(COLUMNS))
    path = tmp_path / f"{name}.csv"
    table.to_csv(path, index=False)
    comp = {"layers": LAYERS, "in_sequence_scale": 1.0, "tp": ep}
    if moe:
        comp["moe"] = {"num_experts": experts, "top_k": top_k, "ep": ep, "skew": 0.0}
    meta = {"format": "chunksim-components/1", "device": "cuda", "device_name": "synthetic",
            "device_memory_bytes": 80 * 2**30, "weights_bytes": 10 * 2**30,
            "kv_bytes_per_token": 65536, "step_overhead_s": 0.0, "dtype": "bfloat16",
            "model": {"name": "synthetic-moe", "n_layers": LAYERS, "max_position": 32768},
            "components": comp}
    path.with_suffix(".json").write_text(json.dumps(meta))
    return str(path)


@pytest.mark.parametrize("shape", [BatchShape(0, 0, 1, 100), BatchShape(0, 0, 200, 3000),
                                   BatchShape(512, 0, 0, 0), BatchShape(2000, 1000, 64, 500)])
def test_a_moe_profile_adds_layers_x_routed_experts_to_the_dense_price(tmp_path, shape):
    moe = ComponentModel(load_profile(moe_profile(tmp_path, "m", 8, 2)))
    dense = ComponentModel(load_profile(moe_profile(tmp_path, "d", moe=False)))
    tokens = shape.prefill_tokens + shape.decode_count
    want = LAYERS * _uniform_term(tokens, 8, 2, 1, ALPHA, BETA)
    got = moe.step_s(shape)[0] - dense.step_s(shape)[0]
    assert got == pytest.approx(want, rel=1e-9)
    if shape.prefill_tokens == 0:  # the bulk decode path agrees bit for bit
        bulk, _ = moe.decode_steps_s(shape.decode_count, np.array([shape.decode_kv_tokens]))
        assert bulk[0] == moe.step_s(shape)[0]


def test_expert_parallel_profile_adds_its_alltoall_and_divides_the_experts(tmp_path):
    ep = ComponentModel(load_profile(moe_profile(tmp_path, "e", 8, 2, ep=2)))
    shape = BatchShape(1024, 0, 0, 0)
    dense = ComponentModel(load_profile(moe_profile(tmp_path, "d", moe=False)))
    extra = (5e-6 + 1e-10 * 1024) + (1e-5 + 2e-10 * 1024)  # allreduce + alltoall rows
    want = LAYERS * (_uniform_term(1024, 8, 2, 2, ALPHA, BETA) + extra)
    assert ep.step_s(shape)[0] - dense.step_s(shape)[0] == pytest.approx(want, rel=1e-9)


def test_expert_skew_is_the_runs_knob_and_refused_on_a_dense_profile(tmp_path):
    path = moe_profile(tmp_path, "s", 8, 2, ep=2)
    shape = BatchShape(0, 0, 64, 1000)
    uniform = latency_model(load_profile(path)).step_s(shape)[0]
    skewed = latency_model(load_profile(path), expert_skew=1.5).step_s(shape)[0]
    r = Routing(8, 2, 2, skew=1.5)
    hot, _, _ = routed_expert_s(64, r.device_shares(), _linear(ALPHA, BETA))
    cold = _uniform_term(64, 8, 2, 2, ALPHA, BETA)
    assert skewed - uniform == pytest.approx(LAYERS * (hot - cold), rel=1e-9)
    with pytest.raises(ValueError, match="--expert-skew 1.5: profile .* dense model"):
        latency_model(load_profile(moe_profile(tmp_path, "d", moe=False)), expert_skew=1.5)


def test_expert_rows_without_a_moe_section_are_refused(tmp_path):
    path = moe_profile(tmp_path, "x")
    meta = json.loads((tmp_path / "x.json").read_text())
    del meta["components"]["moe"]
    (tmp_path / "x.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="expert/alltoall rows but no components.moe"):
        latency_model(load_profile(path))


# --- the CLI on a MoE profile ---------------------------------------------------------------

SMALL_RUN = ["-n", "30", "--prompt-mean", "256", "--output-mean", "16", "--rate", "20"]


def test_sim_run_prices_a_moe_profile_and_takes_expert_skew(tmp_path):
    path = moe_profile(tmp_path, "r", 8, 2, ep=2)
    out = []
    for extra in ([], ["--expert-skew", "2"]):
        res = RUNNER.invoke(app, ["run", "--profile", path, *SMALL_RUN, "--json", *extra])
        assert res.exit_code == 0, res.output
        out.append(json.loads(res.output[res.output.index("{"):]))
    assert out[0]["completed"] == out[1]["completed"] == 30
    assert out[1]["mean_tpot_ms"] > out[0]["mean_tpot_ms"]  # the hot device is slower
    res = RUNNER.invoke(app, ["run", "--profile", moe_profile(tmp_path, "d", moe=False),
                              *SMALL_RUN, "--expert-skew", "1"])
    assert isinstance(res.exception, ValueError)
    assert "--expert-skew 1: profile" in str(res.exception)


@pytest.mark.slow
def test_sim_compare_runs_a_moe_profile(tmp_path):
    path = moe_profile(tmp_path, "c", 8, 2, ep=2)
    res = RUNNER.invoke(app, ["compare", "--profile", path, *SMALL_RUN, "--policies",
                              "whole,budget", "--chunks", "512", "--seeds", "0",
                              "--workers", "1", "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cmp" / "report.html").exists()


@pytest.mark.slow
def test_sim_capacity_gpus_counts_an_expert_parallel_engines_gpus(tmp_path):
    path = moe_profile(tmp_path, "g", 8, 2, ep=2)  # one engine spans 2 GPUs
    out = tmp_path / "cap"
    res = RUNNER.invoke(app, ["capacity", "--profile", path, "-n", "30", "--gpus", "8",
                              "--policies", "budget", "--chunks", "512", "--seeds", "0",
                              "--tol", "0.3", "--workers", "1", "--no-svg", "--no-report",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    splits = pd.read_csv(out / "splits.csv")
    # 8 GPUs = 4 engines: 4 replicas, P/D 1:3, 2:2, 3:1, each counted as 8 GPUs
    assert sorted(splits.fleet_layout) == sorted(["4x", "P/D 1:3", "P/D 2:2", "P/D 3:1"])
    assert set(splits.gpus) == {8}
    assert np.allclose(splits.max_rate_per_gpu, splits.max_rate / 8)
    res = RUNNER.invoke(app, ["capacity", "--profile", path, "-n", "5", "--gpus", "7",
                              "--policies", "budget", "--chunks", "512"])
    assert isinstance(res.exception, ValueError)
    assert "give a multiple of 2" in str(res.exception)


# --- our own profiler on the tiny MoE preset --------------------------------------------------

@pytest.mark.torch
@pytest.mark.slow  # times a small model (about 15 s on one thread)
def test_the_component_profiler_times_the_expert_by_tokens_per_expert(tmp_path):
    from chunksim.profiler.component_grid import ComponentGrid
    from chunksim.profiler.component_run import ComponentSettings, run_components

    grid = ComponentGrid(preset="nano", max_tokens=32, chunk_len=(1, 16), prior_len=(0, 16),
                         decode_count=(1, 2), kv_len=(16,), spreads=(1.0,), logits=(0, 1),
                         warmup=0, repeats=1, point_budget_s=0.01, point_min_s=0.0, looks=1)
    cfg = replace(PRESETS["tiny-moe"], max_position=256)
    link = link_settings(2, "nvlink-h100", None, None)
    run_components(ComponentSettings(model=cfg, device="cpu", dtype="float32", grid=grid,
                                     out_csv=tmp_path / "t.csv", threads=1, tp=2, ep=2,
                                     link=link, calibrate=False, live_costs=False,
                                     clock="thread-cpu"), show_progress=False)
    p = load_profile(str(tmp_path / "t.csv"))
    t = p.table
    expert = t[t.component == "expert"]
    assert sorted(expert.tokens) == [1, 16, 32] and (expert.median_s > 0).all()
    a2a = t[t.component == "alltoall"]
    for tokens, sec in zip(a2a.tokens, a2a.median_s, strict=True):
        assert sec == pytest.approx(layer_alltoall_s(int(tokens), 128, 4, 2, 2, link))
    moe = p.provenance["components"]["moe"]
    assert (moe["num_experts"], moe["top_k"], moe["ep"]) == (8, 2, 2)
    assert p.provenance["model"]["moe"]["expert_intermediate_size"] == 192
    assert p.provenance["kv_bytes_per_token"] == cfg.kv_bytes_per_token("float32")
    lat = latency_model(p)
    assert lat.routing.experts_per_device == 4
    one, _ = lat.step_s(BatchShape(0, 0, 1, 16))
    assert math.isfinite(one) and one > 0


# --- the bundled MoE profile ----------------------------------------------------------------

def test_the_bundled_moe_profile_is_labelled_and_expert_parallel():
    p = load_profile("qwen3-30b-a3b-h200-ep2")
    assert p.provenance["device"] == "imported" and p.provenance["calibration"] is None
    assert p.provenance["source"]["kind"] == "aiconfigurator" and p.devices == 2
    lat = latency_model(p)
    assert (lat.routing.num_experts, lat.routing.top_k, lat.routing.ep) == (128, 8, 2)
    cfg = shard_moe(PRESETS["qwen3-30b-a3b"], 2, 2)
    assert p.provenance["kv_bytes_per_token"] == cfg.kv_bytes_per_token("bfloat16")


@pytest.mark.parametrize("tokens", [16, 1024, 8192])
def test_the_bundled_moe_profile_reproduces_the_databases_prefill_sum(tokens):
    """At a grid shape the database prices directly, the composed step equals the sum of
    its context ops (its MoE op included, through the back-solved `expert`) plus the LM
    head of the chunk's one logit row."""
    pytest.importorskip("aiconfigurator_core")
    import contextlib
    import io
    import logging

    from aiconfigurator_core.sdk.engine import EngineHandle

    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            h = EngineHandle.compile("Qwen/Qwen3-30B-A3B", "h200_sxm", "vllm", tp_size=2,
                                     moe_ep_size=2)
            shared, ctx, _ = h.mixed_step_breakdown_per_op(16, 1, 16, 2, 0)
            ops = h.evaluate_context_ops(list(range(len(shared) + len(ctx))), batch_size=1,
                                         s=tokens, prefix=0)
    finally:
        logging.disable(logging.NOTSET)
    lat = latency_model(load_profile("qwen3-30b-a3b-h200-ep2"))
    want = sum(ms for _, ms, _, _ in ops) / 1e3 + lat.head.at(1)[0]
    assert lat.step_s(BatchShape(tokens, 0, 0, 0))[0] == pytest.approx(want, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 20000), experts=st.sampled_from([8, 64, 128]),
       top_k=st.integers(1, 8), ep=st.sampled_from([1, 2, 8]), layer_s=st.floats(1e-6, 1e-2))
def test_expert_rows_back_solved_from_a_whole_moe_op_price_it_back(
        tokens, experts, top_k, ep, layer_s):
    from chunksim.latency.moe import expert_from_layer

    r = Routing(experts, top_k, ep)
    n, sec = expert_from_layer(tokens, layer_s, r)
    got, _, _ = routed_expert_s(tokens, r.device_shares(),
                                lambda x: (sec if x == pytest.approx(n) else math.nan, 0.0,
                                           False))
    assert got == pytest.approx(layer_s, rel=1e-9)


@pytest.mark.torch
@pytest.mark.torch
@pytest.mark.parametrize("args,message", [
    (["--model", "tiny", "--tp", "2", "--ep", "2"], "has no experts"),
    (["--model", "tiny-moe", "--tp", "2", "--ep", "4"], "--ep 4 with --tp 2"),
    (["--model", "tiny-moe", "--tp", "2", "--ep", "2", "--link", "measured"],
     "--ep 2 with --link measured"),
    (["--model", "deepseek-v3"], "multi-head latent attention"),
])
def test_sim_profile_refuses_ep_it_cannot_honour(tmp_path, args, message):
    res = RUNNER.invoke(app, ["profile", "--kind", "components", "--device", "cpu",
                              "--out", str(tmp_path / "p.csv"), "--quiet", *args])
    assert isinstance(res.exception, ValueError), res.output
    assert message in str(res.exception)


def test_sim_profile_whole_step_refuses_ep(tmp_path):
    res = RUNNER.invoke(app, ["profile", "--model", "tiny-moe", "--ep", "2", "--device",
                              "cpu", "--out", str(tmp_path / "p.csv")])
    assert isinstance(res.exception, ValueError)
    assert "--ep 2 applies to --kind components only" in str(res.exception)

"""Profiler tests (CPU, seconds): mixed step vs naive reference, table rules, resume, inputs."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from chunksim.decoder.config import ModelConfig, load_hf_config, preset_config  # noqa: E402
from chunksim.decoder.kv import KVPool  # noqa: E402
from chunksim.decoder.model import build_model  # noqa: E402
from chunksim.decoder.reference import reference_logits  # noqa: E402
from chunksim.decoder.step import SeqSlice, StepBatch, prepare_step  # noqa: E402
from chunksim.profiler.grid import (  # noqa: E402
    PRESETS as GRID_PRESETS,
)
from chunksim.profiler.grid import (  # noqa: E402
    GridPoint,
    GridSpec,
    grid_preset,
    parse_axis,
    prune,
)
from chunksim.profiler.passes import combine, fast_points, pass_order  # noqa: E402
from chunksim.profiler.run import ProfileSettings, run_profile  # noqa: E402
from chunksim.profiler.timing import measure  # noqa: E402

# GQA ratio 2, qkv bias, small head_dim: every code path of the real presets, tiny cost.
MINI = ModelConfig(name="mini", n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2,
                   head_dim=8, intermediate_size=48, vocab_size=64, max_position=256,
                   qkv_bias=True)


# ---------------------------------------------------------------- mixed step vs reference


def _fill(model, pools, histories: dict[tuple[int, int], torch.Tensor], cached: dict) -> None:
    """Prefill each (pool, slot)'s first cached[key] tokens through forward_step itself."""
    seqs = [SeqSlice(slot=s, cached_tokens=0, new_tokens=cached[(p, s)], needs_logits=False,
                     pool=p) for (p, s) in histories if cached[(p, s)] > 0]
    if not seqs:
        return
    tokens = torch.cat([histories[(q.pool, q.slot)][: q.new_tokens] for q in seqs])
    step = prepare_step(StepBatch(tuple(seqs)), pools, "cpu")
    assert model.forward_step(tokens, step, pools).shape[0] == 0


def _check_mixed(cfg, dtype, chunk_len, prior_len, decode_kv, atol, decode_slots=None,
                 two_pools=False, cuda_kernels=None):
    """One real mixed step against full recomputation of every sequence."""
    model = build_model(cfg, "cpu", dtype, seed=3)
    gen = torch.Generator().manual_seed(11)
    n_dec = len(decode_kv)
    decode_slots = decode_slots or list(range(1, n_dec + 1))
    cap = max([prior_len + chunk_len] + [k + 1 for k in decode_kv])
    pools = [KVPool(cfg, 1 + max(decode_slots, default=0), cap, "cpu", dtype)]
    dec_pool = 0
    if two_pools:
        pools.append(KVPool(cfg, 1 + max(decode_slots, default=0), cap, "cpu", dtype))
        dec_pool = 1
    hist, cached, new = {}, {}, {}
    if chunk_len:
        hist[(0, 0)] = torch.randint(0, cfg.vocab_size, (prior_len + chunk_len,), generator=gen)
        cached[(0, 0)], new[(0, 0)] = prior_len, chunk_len
    for slot, kv in zip(decode_slots, decode_kv, strict=True):
        hist[(dec_pool, slot)] = torch.randint(0, cfg.vocab_size, (kv + 1,), generator=gen)
        cached[(dec_pool, slot)], new[(dec_pool, slot)] = kv, 1
    with torch.inference_mode():
        _fill(model, pools, hist, cached)
        seqs = tuple(SeqSlice(slot=s, cached_tokens=cached[(p, s)], new_tokens=new[(p, s)],
                              pool=p) for (p, s) in hist)
        tokens = torch.cat([hist[k][cached[k]:] for k in hist])
        step = prepare_step(StepBatch(seqs), pools, "cpu", cuda_kernels=cuda_kernels)
        got = model.forward_step(tokens, step, pools)
        again = model.forward_step(tokens, step, pools)  # idempotent: the profiler repeats
    want = torch.stack([reference_logits(model, hist[k])[-1] for k in hist])
    assert got.shape == (len(hist), cfg.vocab_size)
    torch.testing.assert_close(got, want, atol=atol, rtol=0)
    torch.testing.assert_close(again, got, atol=0, rtol=0)


@pytest.mark.parametrize("chunk_len,prior_len,decode_kv", [
    (16, 0, []),                # first chunk, prefill only
    (16, 24, []),               # later chunk over its own prior context
    (0, 0, [5, 5, 5]),          # decode-only, equal lengths
    (12, 20, [7, 7]),           # the profiler's shape: chunk + equal decodes
    (12, 20, [3, 9, 30, 0]),    # general API: unequal decode lengths (padded + masked)
    (1, 10, [4]),               # a one-token chunk joins the decode group
    (9, 0, [17, 2]),
])
def test_mixed_step_matches_reference_float64(chunk_len, prior_len, decode_kv):
    _check_mixed(MINI, torch.float64, chunk_len, prior_len, decode_kv, atol=1e-10)


def test_scattered_slots_and_two_pools_match_reference():
    _check_mixed(MINI, torch.float64, 8, 5, [6, 3, 6], atol=1e-10, decode_slots=[4, 1, 2])
    _check_mixed(MINI, torch.float64, 8, 5, [6, 6], atol=1e-10, two_pools=True)


@pytest.mark.parametrize("n,cached,group", [(7, 1, 1), (16, 24, 2), (33, 300, 4), (2, 64, 2)])
def test_prefix_attention_equals_one_masked_call(n, cached, group):
    from chunksim.decoder.attention import prefix_attention

    gen = torch.Generator().manual_seed(n + cached)
    q = torch.randn(1, 2 * group, n, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, cached + n, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 2, cached + n, 16, generator=gen, dtype=torch.float64)
    mask = torch.ones(n, cached + n, dtype=torch.bool).tril(diagonal=cached)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                             enable_gqa=group > 1)
    torch.testing.assert_close(prefix_attention(q, k, v, cached), want, atol=1e-12, rtol=0)
    got = prefix_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), cached)
    torch.testing.assert_close(got.double(), want, atol=0.05, rtol=0.05)


def test_cpu_prefill_after_a_prefix_takes_the_split_path_or_else_the_mask(monkeypatch):
    import chunksim.decoder.step as step_mod

    pools = [KVPool(MINI, 2, 64, "cpu", torch.float64)]
    batch = StepBatch((SeqSlice(0, 16, 8), SeqSlice(1, 0, 5)))
    first, fresh = prepare_step(batch, pools, "cpu").prefills
    assert (first.mask, first.cached) == (None, 16) and (fresh.mask, fresh.cached) == (None, 0)
    monkeypatch.setattr(step_mod, "cpu_flash", lambda: None)  # a torch without the op
    masked = prepare_step(batch, pools, "cpu").prefills[0]
    assert masked.mask.shape == (8, 24) and masked.mask.dtype == torch.bool
    _check_mixed(MINI, torch.float64, 16, 24, [5], atol=1e-10)  # the masked path, still right


@pytest.mark.parametrize("chunk_len,prior_len,decode_kv", [(16, 24, []), (12, 20, [3, 9, 0])])
def test_cuda_attention_branch_matches_reference_on_cpu(chunk_len, prior_len, decode_kv):
    # CausalBias masks and repeated KV heads, the branch CUDA takes, checked where we can.
    _check_mixed(MINI, torch.float64, chunk_len, prior_len, decode_kv, atol=1e-10,
                 cuda_kernels=True)


def test_selfcheck_passes_on_cpu():
    from chunksim.profiler.selfcheck import TOLERANCE, check_mixed_step

    assert check_mixed_step("cpu", "float32") < TOLERANCE["float32"] / 10


def test_tiny_preset_float32_matches_reference():
    cfg = dataclasses.replace(preset_config("tiny"), max_position=512)
    _check_mixed(cfg, torch.float32, 40, 60, [30, 30, 30], atol=2e-4)


def test_step_rejects_bad_batches():
    pool = KVPool(MINI, 2, 16, "cpu", torch.float32)
    with pytest.raises(ValueError, match="appears twice"):
        StepBatch((SeqSlice(0, 0, 4), SeqSlice(0, 4, 1)))
    with pytest.raises(ValueError, match="bigger pool"):
        prepare_step(StepBatch((SeqSlice(0, 10, 8),)), pool, "cpu")
    with pytest.raises(ValueError, match="slot 5 does not exist"):
        prepare_step(StepBatch((SeqSlice(5, 0, 4),)), pool, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_mixed_step_cuda_bf16_close_to_reference():
    cfg = dataclasses.replace(preset_config("tiny"), max_position=1024)
    model = build_model(cfg, "cuda", torch.bfloat16, seed=0)
    ref_model = build_model(cfg, "cuda", torch.float32, seed=0)
    with torch.no_grad():
        for p, rp in zip(model.parameters(), ref_model.parameters(), strict=True):
            rp.copy_(p.float())
    pools = [KVPool(cfg, 3, 300, "cuda", torch.bfloat16)]
    hist = torch.randint(0, cfg.vocab_size, (3, 300), device="cuda")
    with torch.inference_mode():
        fill = StepBatch((SeqSlice(0, 0, 200, False), SeqSlice(1, 0, 99, False),
                          SeqSlice(2, 0, 99, False)))
        model.forward_step(torch.cat([hist[0, :200], hist[1, :99], hist[2, :99]]),
                           prepare_step(fill, pools, "cuda"), pools)
        step = StepBatch((SeqSlice(0, 200, 64), SeqSlice(1, 99, 1), SeqSlice(2, 99, 1)))
        tokens = torch.cat([hist[0, 200:264], hist[1, 99:100], hist[2, 99:100]])
        got = model.forward_step(tokens, prepare_step(step, pools, "cuda"), pools).float()
    want = torch.stack([reference_logits(ref_model, hist[0, :264])[-1],
                        reference_logits(ref_model, hist[1, :100])[-1],
                        reference_logits(ref_model, hist[2, :100])[-1]])
    assert (got - want).abs().max().item() < 0.05 * want.abs().max().item() + 1e-2


# ---------------------------------------------------------------- table and provenance

SMALL_GRID = GridSpec(preset="custom", chunk_len=(0, 8, 16), decode_count=(0, 1, 3),
                      kv_len=(1, 9), prior_len=(4, 12), warmup=0, repeats=2,
                      point_budget_s=0.5)
FORMAT_KEYS = {"format", "content_sha256", "created", "device", "device_name",
               "device_memory_bytes", "dtype", "threads", "torch_version", "attention_backend",
               "model", "weights_bytes", "kv_bytes_per_token", "step_overhead_s", "grid",
               "points", "elapsed_s", "sdpa_backends", "first_call"}


def _settings(tmp_path: Path, **kw) -> ProfileSettings:
    base = dict(model=MINI, device="cpu", dtype="float32", grid=SMALL_GRID,
                out_csv=tmp_path / "mini.csv", threads=1)
    return ProfileSettings(**{**base, **kw})


def _read(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # the profiler end to end
def test_profile_table_follows_the_format(tmp_path):
    res = run_profile(_settings(tmp_path), show_progress=False)
    raw = res.csv_path.read_bytes()
    rows = _read(res.csv_path)
    assert list(rows[0]) == ["chunk_len", "prior_len", "decode_count", "kv_len", "median_s",
                             "p10_s", "p90_s", "mean_s", "repeats"]
    keys = [tuple(int(r[c]) for c in ("prior_len", "chunk_len", "decode_count", "kv_len"))
            for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    main = {(c, d, k) for p, c, d, k in keys if p == 0}
    want_main = {(c, d, k if d else 0) for c in (0, 8, 16) for d in (0, 1, 3) for k in (1, 9)
                 if c or d}
    assert main == want_main
    assert {(p, c) for p, c, d, k in keys if p} == {(p, c) for p in (4, 12) for c in (8, 16)}
    assert all(d == 0 and k == 0 for p, c, d, k in keys if p)
    for r in rows:
        p10, med, p90 = float(r["p10_s"]), float(r["median_s"]), float(r["p90_s"])
        assert 0 < p10 <= med <= p90 and float(r["mean_s"]) > 0 and int(r["repeats"]) >= 2
    meta = json.loads(res.json_path.read_text())
    assert FORMAT_KEYS <= set(meta)
    assert meta["sdpa_backends"] is None  # CPU: SDPA is left to torch
    first = meta["first_call"]
    assert first["kv_start"] + 64 + 12 <= MINI.max_position
    for kind in ("decode", "decodes_unequal", "prefill_chunk"):
        assert first[kind]["first_s"] > 0 and first[kind]["ratio"] == pytest.approx(
            first[kind]["first_s"] / first[kind]["repeat_s"])
    assert meta["content_sha256"] == hashlib.sha256(raw).hexdigest()
    assert meta["points"] == len(rows) and meta["threads"] == 1
    assert meta["kv_bytes_per_token"] == 2 * 2 * 2 * 8 * 4
    assert meta["step_overhead_s"] > 0 and meta["step_overhead"]["steps"] > 0  # live loop measured
    wake = meta["wake_up"]  # each step after each idle time, over its warm time
    assert len(wake["ratios"]) == len(wake["idle_s"]) == 4 and len(wake["warm_s"]) == 5
    assert all(len(row) == 5 and all(r > 0 for r in row) for row in wake["ratios"])
    assert meta["gpu_clock"] is None  # CPU: nothing sampled
    assert meta["grid"]["chunk_len"] == [0, 8, 16] and meta["grid"]["repeats"] == 2
    assert {"name", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim",
            "intermediate_size", "vocab_size", "max_position"} <= set(meta["model"])
    assert not (tmp_path / "mini.partial.csv").exists()
    assert not (tmp_path / "mini.partial.json").exists()
    mask = os.umask(0)
    os.umask(mask)
    for path in (res.csv_path, res.json_path):  # shared like any result, not mkstemp's 0600
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.slow  # the profiler end to end
def test_profile_loads_in_the_simulator(tmp_path):
    from chunksim.latency.profile import load_profile

    res = run_profile(_settings(tmp_path), show_progress=False)
    prof = load_profile(str(res.csv_path))
    assert len(prof.table) == res.meta["points"]


class Interrupt(Exception):
    pass


@pytest.mark.slow  # the profiler end to end
def test_resume_measures_only_missing_points(tmp_path):
    settings = _settings(tmp_path)
    seen: list[GridPoint] = []

    def stop_after_5(point, timing):
        seen.append(point)
        if len(seen) == 5:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_profile(settings, on_point=stop_after_5, show_progress=False)
    partial = tmp_path / "mini.partial.csv"
    assert len(_read(partial)) == 5 and not settings.out_csv.exists()
    with partial.open("a") as f:
        f.write("16,0,3,9,0.00")  # a row torn by the kill: dropped, point re-measured

    with pytest.raises(ValueError, match="--resume"):
        run_profile(settings, show_progress=False)  # refuses to clobber the checkpoint
    with pytest.raises(ValueError, match="threads"):
        run_profile(dataclasses.replace(settings, threads=2, resume=True), show_progress=False)

    res = run_profile(dataclasses.replace(settings, resume=True), show_progress=False)
    everything = prune(SMALL_GRID.points(), MINI, "float32", 1 << 40).kept
    assert set(res.measured_now) == set(everything) - set(seen)
    assert len(res.measured_now) == len(everything) - 5
    assert res.meta["points"] == len(everything) == len(_read(settings.out_csv))
    assert not partial.exists()


@pytest.mark.slow  # the profiler end to end
def test_passes_look_again_at_fast_points_and_resume(tmp_path):
    settings = _settings(tmp_path, passes=3, repass_below_s=60.0)  # every point is fast
    everything = prune(SMALL_GRID.points(), MINI, "float32", 1 << 40).kept
    n = len(everything)
    calls: list[tuple[GridPoint, int]] = []

    def stop_in_pass_2(point, timing):
        calls.append((point, timing.repeats))
        if len(calls) == n + 4:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_profile(settings, on_point=stop_in_pass_2, show_progress=False)
    partial = _read(tmp_path / "mini.partial.csv")
    assert [r["pass"] for r in partial] == ["1"] * n + ["2"] * 4
    # pass 2 looks at prefill points once, cold; decode-only points warm (>= 2 repeats)
    assert all(reps == 1 if p.chunk_len else reps >= 2 for p, reps in calls[n:])
    assert {p for p, _ in calls[n:]} <= set(everything)
    with pytest.raises(ValueError, match="passes: checkpoint 3 vs now 2"):
        run_profile(dataclasses.replace(settings, passes=2, resume=True), show_progress=False)

    res = run_profile(dataclasses.replace(settings, resume=True), show_progress=False)
    assert res.measured_now == []  # pass 1 was complete
    assert len(res.relooked_now) == 2 * n - 4
    done = {(2, p) for p, _ in calls[n:]}
    assert done.isdisjoint(res.relooked_now)
    assert done | set(res.relooked_now) == {(k, p) for k in (2, 3) for p in everything}
    meta = res.meta
    assert (meta["passes"], meta["repassed_points"], meta["cold_looks"]) == (3, n,
                                                                         "prefill points")
    pass1 = {tuple(int(r[c]) for c in ("chunk_len", "prior_len", "decode_count", "kv_len")):
             int(r["repeats"]) for r in partial if r["pass"] == "1"}
    for r in _read(settings.out_csv):  # repeats add up over the three looks
        key = tuple(int(r[c]) for c in ("chunk_len", "prior_len", "decode_count", "kv_len"))
        extra = int(r["repeats"]) - pass1[key]
        assert extra == 2 if int(r["chunk_len"]) else extra >= 4
        assert 0 < float(r["p10_s"]) <= float(r["median_s"]) <= float(r["p90_s"])
    assert not (tmp_path / "mini.partial.csv").exists()


def test_passes_combine_by_median_and_order_by_seed():
    first = (16, 0, 1, 9, "3.0", "2.0", "4.0", "3.5", 5)
    looks = [(16, 0, 1, 9, "1.0", "1.0", "1.0", "1.0", 1),
             (16, 0, 1, 9, "2.0", "2.0", "2.0", "2.0", 1)]
    assert combine(first, looks) == (16, 0, 1, 9, "2.0", "2.0", "2.0", repr(6.5 / 3), 7)
    assert combine(first, []) == first
    pts = [GridPoint(0, c, d, 9) for c in (8, 16) for d in (0, 1, 3) if c or d]
    rows = {p.key(): (*p.key(), repr(0.001 * p.chunk_len), "0", "0", "0", 1) for p in pts}
    assert {p.chunk_len for p in fast_points(rows, pts, below_s=0.01)} == {8}
    fast = fast_points(rows, pts, below_s=1.0)
    assert fast == fast_points(rows, reversed(pts), below_s=1.0)  # table order, not input's
    assert pass_order(fast, 0, 2) == pass_order(fast, 0, 2)
    assert sorted(pass_order(fast, 0, 3), key=fast.index) == fast
    assert len({tuple(pass_order(fast, 0, k)) for k in range(2, 8)}) > 1


# ---------------------------------------------------------------- grid and pruning


def test_default_grid_covers_simulator_scenarios():
    g = grid_preset("default")
    assert max(g.chunk_len) >= 8192 and max(g.decode_count) >= 256
    assert max(g.kv_len) >= 16384 and max(g.prior_len) >= 16384
    for spec in GRID_PRESETS.values():  # every preset obeys the row rules
        assert 0 in spec.chunk_len and 0 in spec.decode_count
    fine = grid_preset("fine").chunk_len
    assert {255, 256, 257, 4095, 4097} <= set(fine)


def test_prune_by_memory_and_position():
    pts = [GridPoint(0, 0, 256, 16384), GridPoint(0, 64, 1, 1), GridPoint(16384, 8192, 0, 0)]
    cfg = preset_config("llama-3.1-8b")
    kept = prune(pts, cfg, "bfloat16", memory_bytes=141 * 2**30)
    assert kept.kept == [GridPoint(0, 64, 1, 1), GridPoint(16384, 8192, 0, 0)]
    assert kept.memory == 1
    short = dataclasses.replace(cfg, max_position=8192)
    assert prune(pts, short, "bfloat16", 141 * 2**30).max_position == 2


def test_measure_stops_on_budget_but_keeps_min_repeats():
    calls = []
    t = measure(lambda: calls.append(1), warmup=2, repeats=50, min_repeats=3, budget_s=1e-12)
    assert t.repeats == 3 and len(calls) == 5
    assert t.p10_s <= t.median_s <= t.p90_s


def test_config_bytes():
    cfg = preset_config("llama-3.1-8b")
    assert cfg.kv_bytes_per_token("bfloat16") == 2 * 32 * 8 * 128 * 2 == 131072
    assert 8.0e9 < cfg.n_params() < 8.1e9  # Llama-3.1-8B has 8.03 B parameters
    assert cfg.weights_bytes(torch.bfloat16) == 2 * cfg.n_params()
    assert 0.49e9 < preset_config("qwen2.5-0.5b").n_params() < 0.5e9  # 494 M
    model = build_model(MINI)
    assert sum(p.numel() for p in model.parameters()) == MINI.n_params()


# ---------------------------------------------------------------- inputs


def test_hf_config_loading(tmp_path):
    d = tmp_path / "Some-Model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
        "vocab_size": 100, "head_dim": 32, "rope_theta": 1e6, "max_position_embeddings": 512,
        "tie_word_embeddings": True}))
    cfg = load_hf_config(d / "config.json")
    assert (cfg.name, cfg.n_layers, cfg.head_dim, cfg.n_kv_heads) == ("Some-Model", 3, 32, 2)
    assert cfg.rope_theta == 1e6 and cfg.max_position == 512
    assert cfg.tie_embeddings and cfg.qkv_bias
    assert load_hf_config(d) == cfg  # a folder works too
    (d / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ValueError, match="--hf-config.*lacks num_hidden_layers"):
        load_hf_config(d / "config.json")
    with pytest.raises(ValueError, match="--hf-config.*no such file"):
        load_hf_config(tmp_path / "nope.json")
    (d / "config.json").write_text(json.dumps({
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 3, "intermediate_size": 96, "vocab_size": 100}))
    with pytest.raises(ValueError, match="--hf-config.*n_kv_heads=3"):
        load_hf_config(d / "config.json")


def test_bad_inputs_name_the_flag(tmp_path):
    from chunksim.profiler.settings import build_settings

    with pytest.raises(ValueError, match="--model"):
        preset_config("gpt-5")
    with pytest.raises(ValueError, match="--grid"):
        grid_preset("huge")
    with pytest.raises(ValueError, match="--chunk-lens"):
        parse_axis("0,64,x", "--chunk-lens")
    with pytest.raises(ValueError, match="--chunk-lens.*lacks 0"):
        build_settings(device="cpu", chunk_lens="64,128")
    with pytest.raises(ValueError, match="--kv-lens.*>= 1"):
        build_settings(device="cpu", kv_lens="0,5")
    with pytest.raises(ValueError, match="--repeats"):
        build_settings(device="cpu", repeats=0)
    with pytest.raises(ValueError, match="--threads"):
        build_settings(device="cpu", threads=0)
    with pytest.raises(ValueError, match="--out"):
        build_settings(device="cpu", out=tmp_path / "x.txt")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda"):
            build_settings(device="cuda")
    with pytest.raises(ValueError, match="n_heads=6 is not a multiple of n_kv_heads=4"):
        dataclasses.replace(MINI, n_heads=6, n_kv_heads=4)


@pytest.mark.slow  # the profiler end to end
def test_cli_profile_runs_and_reports_bad_flags(tmp_path):
    from typer.testing import CliRunner

    from chunksim.cli import app

    out = tmp_path / "cli.csv"
    runner = CliRunner()
    res = runner.invoke(app, ["profile", "--device", "cpu", "--chunk-lens", "0,8",
                              "--decode-counts", "0,1", "--kv-lens", "4", "--prior-lens", "",
                              "--warmup", "0", "--repeats", "1", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.with_suffix(".json").read_text())["points"] == 3
    bad = runner.invoke(app, ["profile", "--device", "cpu", "--decode-counts", "1,2"])
    assert isinstance(bad.exception, ValueError) and "--decode-counts" in str(bad.exception)
    for flags, name in ((["--passes", "0"], "--passes 0"),
                        (["--passes", "2", "--repass-below-ms", "0"], "--repass-below-ms 0")):
        bad = runner.invoke(app, ["profile", "--device", "cpu", *flags])
        assert isinstance(bad.exception, ValueError) and name in str(bad.exception)


def test_command_module_does_not_import_torch():
    code = ("import sys, chunksim.cli.profile, chunksim.decoder.config, "
            "chunksim.profiler.grid; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_every_phase_runs_under_a_progress_bar(tmp_path, monkeypatch):
    import chunksim.profiler.run as prun

    open_bars: list[str] = []
    phases: list[tuple[str, tuple[str, ...]]] = []

    class Recording:
        def __init__(self, label, total=0, enabled=True, completed=0):
            self.label = label

        def __enter__(self):
            open_bars.append(self.label)
            return self

        def __exit__(self, *exc):
            open_bars.remove(self.label)

        def describe(self, text):
            pass

        def advance(self, n=1):
            pass

    def watched(name, fn):
        def run(*a, **k):
            phases.append((name, tuple(open_bars)))
            return fn(*a, **k)
        return run

    monkeypatch.setattr(prun, "ProgressBar", Recording)
    monkeypatch.setattr(prun, "_measure_overhead", watched("overhead", prun._measure_overhead))
    monkeypatch.setattr(prun, "_measure_cold_costs", watched("cold", prun._measure_cold_costs))
    run_profile(_settings(tmp_path), show_progress=True)
    assert [name for name, _ in phases] == ["overhead", "cold"]
    assert all(bars for _, bars in phases), phases  # neither runs after the bars are done

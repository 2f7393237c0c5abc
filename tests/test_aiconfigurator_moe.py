"""`sim profile import --from aiconfigurator` of a mixture-of-experts model: the CLI writes
a profile `sim run` replays; its `expert` rows give back the database's MoE op exactly
(as its `dense` rows give back the GEMMs), its `alltoall` rows the dispatch and combine;
the bundled MoE profile is what the CLI writes; what it cannot price is refused in one
line naming the flag."""

import json
import math

import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.latency.moe import Routing, expert_from_layer
from chunksim.latency.profile import bundled_profiles, load_profile
from chunksim.latency.select import latency_model

MODEL = "Qwen/Qwen3-30B-A3B"
LAYERS, EXPERTS, TOP_K = 48, 128, 8
ARGS = ["profile", "import", "--from", "aiconfigurator", "--system", "h200_sxm",
        "--backend", "vllm", "--model", MODEL]


def said(res) -> str:
    return res.output + (str(res.exception) if res.exception else "")


@pytest.fixture(scope="module")
def ep2(tmp_path_factory):
    """The CLI's import at tensor and expert parallel 2 (the bundled profile's engine)."""
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path_factory.mktemp("aic-moe") / "qwen3.csv"
    res = CliRunner().invoke(app, [*ARGS, "--tp", "2", "--ep", "2", "--out", str(out)])
    assert res.exit_code == 0, said(res)
    return out, res.output


@pytest.fixture(scope="module")
def db():
    """The database's engine at tp 2, ep 2: (name, seconds, source) per op."""
    pytest.importorskip("aiconfigurator_core")
    from chunksim.profiler.aiconfigurator import Database

    return Database(MODEL, "h200_sxm", "vllm", None, 2, 2, None, moe=True)


@pytest.fixture(scope="module")
def database(db):
    from chunksim.profiler.aiconfigurator import _quiet

    def context(tokens: int, prior: int = 0) -> list[tuple]:
        with _quiet():
            return db.context(tokens, prior)

    return context


def op_sum(ops: list[tuple], *names: str) -> float:
    return sum(s for op, s, _ in ops if op in names)


def test_the_cli_writes_a_moe_profile_that_sim_run_replays(ep2, tmp_path):
    out, output = ep2
    prof = load_profile(str(out))
    moe = prof.provenance["components"]["moe"]
    assert (moe["num_experts"], moe["top_k"], moe["ep"]) == (EXPERTS, TOP_K, 2)
    assert prof.provenance["source"]["measured"]["expert"] == "measured"
    assert "expert measured" in output and "alltoall measured" in output
    assert prof.devices == 2
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--profile", str(out), "--workload", "burst",
                                   "--out", str(run), "--json"])
    assert res.exit_code == 0, said(res)
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert summary["completed"] > 0 and summary["rejected"] == 0
    assert summary["profile_kind"] == "components" and summary["extrapolated_steps"] == 0
    assert math.isfinite(summary["mean_ttft_ms"]) and summary["mean_ttft_ms"] > 0


@pytest.mark.parametrize("tokens", [1, 2, 16, 48, 512, 3072, 16384])
def test_the_expert_rows_give_back_the_databases_moe_op_per_layer(ep2, database, tokens):
    """Routed experts at a grid token count, composed under uniform routing, are the
    database's `moe` op over the layers (as `dense` is its GEMMs and norms over the
    layers), and the all-to-all is its dispatch plus combine."""
    lat = latency_model(load_profile(str(ep2[0])))
    ops = database(tokens)
    moe, _, out = lat.moe_at(tokens)
    assert not out
    want_expert = op_sum(ops, "moe") / LAYERS
    want_a2a = op_sum(ops, "moe_pre_dispatch", "moe_post_dispatch") / LAYERS
    assert moe == pytest.approx(want_expert + want_a2a, rel=1e-9)
    assert lat.dense.at(tokens)[0] == pytest.approx(
        op_sum(ops, "add_norm_1", "qkv_gemm", "proj_gemm", "add_norm_2", "router_gemm")
        / LAYERS, rel=1e-12)


@pytest.mark.parametrize("tokens", [1, 64, 1024, 8192])
def test_a_prefill_step_is_the_databases_whole_context_sum(ep2, database, tokens):
    lat = latency_model(load_profile(str(ep2[0])))
    want = sum(s for _, s, _ in database(tokens)) + lat.head.at(1)[0]
    got, out = lat.step_s(BatchShape(tokens, 0.0, 0, 0.0))
    assert not out and got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("decodes,kv", [(1, 128), (8, 1024), (64, 2048), (256, 4096),
                                        (32, 16384)])
def test_a_decode_step_is_the_databases_whole_generation_sum(ep2, db, decodes, kv):
    """Decodes at a grid count and context: dense, experts (from the context ops at
    `decodes` tokens), all-to-all, attention and LM head give the database's own
    generation step, MoE op included."""
    from chunksim.profiler.aiconfigurator import _quiet

    with _quiet():
        ops = db.generation(decodes, kv + 1)
    lat = latency_model(load_profile(str(ep2[0])))
    got, out = lat.step_s(BatchShape(0, 0.0, decodes, float(kv)))
    assert "moe" in {op for op, _, _ in ops}
    assert not out and got == pytest.approx(sum(s for _, s, _ in ops), rel=1e-6)


def test_expert_rows_are_the_closed_form_of_the_moe_op(ep2, database):
    """Each `expert` row sits at n(T) = T k / (E active(T)) and holds
    moe(T) x ep / (E active(T)), active(T) = 1 - (1 - k/E)^T: one row a grid T."""
    table = load_profile(str(ep2[0])).table
    rows = table[table.component == "expert"].sort_values("tokens")
    dense = table[table.component == "dense"].sort_values("tokens")
    assert len(rows) == len(dense)
    routing = Routing(EXPERTS, TOP_K, 2)
    for t, (_, row) in zip(dense.tokens, rows.iterrows(), strict=True):
        active = 1 - (1 - TOP_K / EXPERTS) ** t
        layer = op_sum(database(int(t)), "moe") / LAYERS
        assert row.tokens == pytest.approx(max(1.0, t * TOP_K / (EXPERTS * active)), abs=1e-9)
        assert row.median_s == pytest.approx(layer * 2 / (EXPERTS * active), rel=1e-9)
        assert (row.tokens, row.median_s) == pytest.approx(
            expert_from_layer(int(t), layer, routing), abs=1e-9)
    assert rows.tokens.is_monotonic_increasing and rows.tokens.is_unique


def test_the_bundled_moe_profile_is_what_the_cli_writes(ep2):
    assert "qwen3-30b-a3b-h200-ep2" in bundled_profiles()
    bundled = load_profile("qwen3-30b-a3b-h200-ep2")
    ours = load_profile(str(ep2[0]))
    assert bundled.provenance["content_sha256"] == ours.provenance["content_sha256"]
    src = bundled.provenance["source"]
    assert (src["model"], src["system"], src["tp"], src["ep"]) == (MODEL, "h200_sxm", 2, 2)


def test_tensor_parallel_experts_without_expert_parallel(tmp_path):
    """--ep 1 at --tp 2 (vLLM's default: each expert sharded): one device holds every
    expert, the routed-expert term prices all of them."""
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / "tp2.csv"
    res = CliRunner().invoke(app, [*ARGS, "--tp", "2", "--out", str(out)])
    assert res.exit_code == 0, said(res)
    lat = latency_model(load_profile(str(out)))
    assert (lat.routing.ep, lat.routing.experts_per_device) == (1, EXPERTS)


@pytest.mark.parametrize("args,says", [
    (["--model", MODEL, "--tp", "1", "--ep", "2"], "--ep 2 with --tp 1"),
    (["--model", "meta-llama/Meta-Llama-3.1-8B", "--ep", "2"],
     "--ep 2: expert parallelism applies to mixture-of-experts models"),
    (["--model", "Qwen/Qwen3.5-35B-A3B"], "chunksim cannot read its config"),
    (["--model", "acme/NoSuchMoE-30B-A3B"], "--model 'acme/NoSuchMoE-30B-A3B' is not in "
                                            "the database"),
    (["--model", "stepfun-ai/Step-3.7-Flash"], "--system"),
])
def test_what_the_moe_import_cannot_price_is_refused_in_one_line(tmp_path, args, says):
    pytest.importorskip("aiconfigurator_core")
    base = [a for a in ARGS if a not in ("--model", MODEL)]
    res = CliRunner().invoke(app, [*base, *args, "--out", str(tmp_path / "p.csv")])
    assert res.exit_code != 0
    msg = str(res.exception)
    assert "\n" not in msg and says in msg, msg
    assert not (tmp_path / "p.csv").exists()

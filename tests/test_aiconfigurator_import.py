"""`sim profile import --from aiconfigurator`: the composed step equals the database's own
per-op sum at the shapes it expresses directly; bad requests get one line listing what is
available; the import is fast; provenance says what was measured."""

import sys
import time

import pytest
from typer.testing import CliRunner

from chunksim.cli import app
from chunksim.core.shape import BatchShape
from chunksim.latency.profile import load_profile
from chunksim.latency.select import latency_model

MODEL = "meta-llama/Meta-Llama-3.1-8B"


def said(res) -> str:
    return res.output + (str(res.exception) if res.exception else "")


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path_factory.mktemp("aic") / "h200.csv"
    start = time.perf_counter()
    res = CliRunner().invoke(app, ["profile", "import", "--from", "aiconfigurator",
                                   "--system", "h200_sxm", "--backend", "vllm", "--model",
                                   MODEL, "--out", str(out)])
    elapsed = time.perf_counter() - start
    assert res.exit_code == 0, said(res)
    return out, elapsed, res.output


@pytest.fixture(scope="module")
def database():
    pytest.importorskip("aiconfigurator_core")
    from chunksim.profiler.aiconfigurator import Database

    return Database(MODEL, "h200_sxm", "vllm", None, 1, 1, None)


def test_the_import_is_fast_and_says_what_was_measured(h200):
    out, elapsed, output = h200
    assert elapsed < 30
    prof = load_profile(str(out))
    src = prof.provenance["source"]
    assert src["kind"] == "aiconfigurator" and src["package_version"] == "0.12.0"
    assert src["system"] == "h200_sxm" and src["data_version"]
    assert set(src["measured"]) >= {"dense", "prefill_attn", "decode_attn", "embed", "head"}
    assert src["measured"]["decode_attn"] == "measured"  # silicon in this database
    assert "measured on the GPU:" in output
    assert prof.provenance["components"]["mixed_attention"].startswith("sum-of-parts")
    assert prof.provenance["framework"]["source"].startswith("chunksim default")


@pytest.mark.parametrize("decodes,kv", [(1, 128), (8, 1024), (64, 2048), (256, 4096),
                                        (32, 16384)])
def test_a_decode_step_equals_the_databases_per_op_sum(h200, database, decodes, kv):
    lat = latency_model(load_profile(str(h200[0])))
    ours, out = lat.step_s(BatchShape(0, 0.0, decodes, float(kv)))
    theirs = sum(s for _, s, _ in database.generation(decodes, kv + 1))
    assert not out
    assert ours == pytest.approx(theirs, rel=0.01)


@pytest.mark.parametrize("chunk,prior", [(512, 0), (2048, 0), (1024, 4096), (256, 16384),
                                         (8192, 0)])
def test_a_prefill_step_equals_the_databases_per_op_sum(h200, database, chunk, prior):
    lat = latency_model(load_profile(str(h200[0])))
    ours, out = lat.step_s(BatchShape(chunk, float(prior), 0, 0.0, ((chunk, prior),), 0.0, 1))
    theirs = sum(s for _, s, _ in database.context(chunk, prior))
    assert not out
    assert ours == pytest.approx(theirs, rel=0.01)


@pytest.mark.parametrize("chunk,decodes,kv", [(64, 64, 1024), (256, 256, 2048),
                                               (1024, 512, 4096)])
def test_a_mixed_step_is_the_sum_of_the_databases_parts(h200, database, chunk, decodes, kv):
    # the chunk continues its prompt: logits for the decodes only (shapes on the grid)
    lat = latency_model(load_profile(str(h200[0])))
    ours, out = lat.step_s(BatchShape(chunk, 0.0, decodes, float(kv), ((chunk, 0),),
                                      float(kv), decodes))
    shared = sum(s for op, s, _ in database.context(chunk + decodes)
                 if op not in ("attention", "logits_gemm"))
    attn = (sum(s for op, s, _ in database.context(chunk) if op == "attention")
            + sum(s for op, s, _ in database.generation(decodes, kv + 1) if op == "attention"))
    head = sum(s for op, s, _ in database.generation(decodes, 2) if op == "logits_gemm")
    assert not out
    assert ours == pytest.approx(shared + attn + head, rel=0.01)


@pytest.mark.parametrize("flag,value,lists", [
    ("--system", "h999_sxm", "h200_sxm"),
    ("--model", "acme/NoSuchModel-1B", MODEL),
    ("--backend", "tgi", "vllm, sglang, trtllm"),
])
def test_an_unknown_request_lists_what_is_available(tmp_path, flag, value, lists):
    pytest.importorskip("aiconfigurator_core")
    args = {"--system": "h200_sxm", "--model": MODEL, "--backend": "vllm", flag: value}
    res = CliRunner().invoke(app, ["profile", "import", "--from", "aiconfigurator",
                                   "--out", str(tmp_path / "p.csv"),
                                   *(x for kv in args.items() for x in kv)])
    assert res.exit_code != 0
    msg = str(res.exception)
    assert "\n" not in msg and f"{flag} {value!r}" in msg and lists in msg
    assert not (tmp_path / "p.csv").exists()


def test_a_missing_extra_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    res = CliRunner().invoke(app, ["profile", "import", "--from", "aiconfigurator",
                                   "--system", "h200_sxm", "--model", MODEL, "--out",
                                   str(tmp_path / "p.csv")])
    assert res.exit_code != 0
    assert "pip install 'chunksim[aic]'" in str(res.exception)


def test_flags_of_the_other_source_are_refused(tmp_path):
    res = CliRunner().invoke(app, ["profile", "import", "--from", "aiconfigurator",
                                   "--system", "h200_sxm", "--model", MODEL,
                                   "--device-memory-gib", "80", "--out",
                                   str(tmp_path / "p.csv")])
    assert res.exit_code != 0 and "--device-memory-gib apply to --from csv" in said(res)
    res = CliRunner().invoke(app, ["profile", "import", str(tmp_path), "--system", "h200_sxm",
                                   "--out", str(tmp_path / "p.csv")])
    assert res.exit_code != 0 and "--system apply to --from aiconfigurator" in said(res)


@pytest.mark.parametrize("args,says", [
    (["--model", MODEL, "--ep", "2"], "--ep 2: expert parallelism applies to"),
])
def test_what_the_dense_import_cannot_price_is_refused(tmp_path, args, says):
    pytest.importorskip("aiconfigurator_core")
    res = CliRunner().invoke(app, ["profile", "import", "--from", "aiconfigurator",
                                   "--system", "h200_sxm", *args, "--out",
                                   str(tmp_path / "p.csv")])
    assert res.exit_code != 0 and says in str(res.exception)
    assert not (tmp_path / "p.csv").exists()
